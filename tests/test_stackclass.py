"""Stack classes: attribution by the innermost relevant frame, implicit syncs, JAX and CuPy, and
classes derived on read from raw stacks (a recording's stored class is never trusted)."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from memtop.core.model import StackFrame
from memtop.core.stackclass import classify
from memtop.storage.store import Recording

DATA = Path(__file__).parent / "data"
TORCH = "/v/site-packages/torch"
JAX = "/v/site-packages/jax/_src"
CUPY = "/v/site-packages/cupy"


def f(name: str, file: str, code: str = "", line: int = 1) -> StackFrame:
    return StackFrame(name, file, line, code)


def user(code: str) -> StackFrame:
    return f("step", "/w/train.py", code)


FORWARD = [
    f("forward", f"{TORCH}/nn/modules/linear.py", "return F.linear(input, self.weight, self.bias)"),
    f("_call_impl", f"{TORCH}/nn/modules/module.py", "return forward_call(*args, **kwargs)"),
]


@pytest.mark.parametrize(
    ("frames", "gil", "klass"),
    [
        # the forward pass deeper than a line that also syncs or copies is the forward pass
        ([*FORWARD, user("acc += model(x).eq(y).sum().item()")], False, "other"),
        ([*FORWARD, user("out = model(x.to(dev))")], False, "other"),
        # the same lines as the leaf: the thread is in the native call they make
        ([user("acc += model(x).eq(y).sum().item()")], False, "sync"),
        ([user("out = model(x.to(dev, non_blocking=True))")], False, "copy"),
        # a dtype conversion happens on the device
        ([user("h = x.to(torch.bfloat16)")], False, "other"),
        ([user("h = x.to(dtype=torch.float16)")], False, "other"),
        # a thread running Python on the line (holding the GIL) is not waiting
        ([user("loss_val = loss.item()")], True, "other"),
        # implicit synchronisations
        ([user("if torch.isnan(loss).any():")], False, "sync"),
        ([user("sel = y[y > 0]")], False, "sync"),
        ([user("ids = torch.nonzero(mask)")], False, "sync"),
        ([user("same = torch.equal(a, b)")], False, "sync"),
        ([user("total += float(loss)")], False, "sync"),
        ([user("vals = top[:4].tolist()")], False, "sync"),
        ([f("synchronize", f"{TORCH}/cuda/__init__.py"), user("torch.cuda.synchronize()")], True, "sync"),
        # threading.Event.wait is no GPU sync
        ([f("wait", "/usr/lib/python3.12/threading.py"), user("ready.wait()")], False, "other"),
        # JAX
        ([f("block_until_ready", f"{JAX}/array.py"), user("y.block_until_ready()")], False, "sync"),
        ([f("device_get", f"{JAX}/api.py"), user("m = jax.device_get(m)")], False, "sync"),
        (
            [
                f("ArrayImpl._value", f"{JAX}/array.py"),
                f("__float__", f"{JAX}/array.py"),
                user("l = float(loss)"),
            ],
            True,
            "sync",
        ),
        ([f("device_put", f"{JAX}/api.py"), user("d = jax.device_put(x)")], True, "copy"),
        # CuPy
        ([user("v = float(x[0, 0].get())")], False, "sync"),
        ([user("cp.cuda.get_current_stream().synchronize()")], False, "sync"),
        ([f("asarray", f"{CUPY}/_creation/from_data.py"), user("d = cp.asarray(host)")], False, "copy"),
        # native leaves from py-spy --native
        ([f("cudaStreamSynchronize", "libcudart.so"), user("x = y.cpu()")], False, "sync"),
        ([f("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so"), *FORWARD, user("x")], False, "sync"),
    ],
)
def test_innermost_relevant_frame(frames, gil, klass):
    assert classify(frames, True, gil) == klass


def test_stored_classes_are_ignored_and_stacks_reclassified(tmp_path):
    """A recording written by 0.1.0 (or any older rules) opens and shows today's classes."""
    src = DATA / "labelled_s0.memtop"
    dst = tmp_path / "old.memtop"
    shutil.copyfile(src, dst)
    db = sqlite3.connect(dst)
    db.execute("UPDATE stack_sample SET klass='bogus'")
    db.commit()
    db.close()
    seen: Counter[str] = Counter()
    for fr in Recording(dst).frames():
        for s in fr.stacks:
            seen.update(th.klass for th in s.threads)
    assert "bogus" not in seen and seen["sync"] and seen["data"], seen


def test_classes_on_real_framework_stacks():
    """The raw stacks of real H100 runs (JAX, CuPy, torch implicit syncs) get today's classes."""
    want = {
        ("train_jax_s1", "jax_transfer"): ("sync", 0.4),  # np.asarray of a device array: ArrayImpl._value
        ("train_jax_s1", "jax_compute"): ("sync", 0.6),  # y.block_until_ready()
        ("train_cupy_s1", "cupy_compute"): ("sync", 0.5),  # Device().synchronize()
        ("train_torch_s1", "bidir_pageable"): ("copy", 0.5),
        ("train_torch_s1", "neg_bf16_cast"): ("other", 0.6),  # x.to(torch.bfloat16) copies nothing
    }
    for (rec_name, phase), (klass, share) in want.items():
        rec = Recording(DATA / f"{rec_name}.memtop")
        m = next(m for m in rec.markers() if m.name == phase)
        pids = {p.pid for fr in rec.frames(m.t0, m.t1) for g in fr.gpus for p in g.processes}
        seen = {}
        for fr in rec.frames(m.t0 + 0.5, m.t1):
            for s in fr.stacks:
                if s.pid in pids and s.main is not None:
                    seen[(s.pid, s.t)] = classify(s.main.frames, s.main.active, s.main.owns_gil)
        c = Counter(seen.values())
        assert c[klass] / max(1, sum(c.values())) >= share, (rec_name, phase, c)


NATIVE = DATA / "native_h100.json"


@pytest.mark.parametrize(
    ("key", "klass"),
    [
        ("sync_torch_cuda_synchronize", "sync"),  # cuCtxSynchronize_v2 <- cudaDeviceSynchronize
        ("sync_item", "sync"),  # cuStreamSynchronize <- _local_scalar_dense_cuda
        ("sync_item_2", "sync"),
        ("sync_nonzero", "sync"),  # cuStreamSynchronize <- nonzero_cuda_out_impl
        ("other_item_step_in_gemm", "other"),  # the same loop caught launching a product: not a wait
        ("other_nonzero_launch", "other"),  # nonzero's dispatch, before its copy and wait
    ],
)
def test_native_leaves_of_real_h100_dumps(key, klass):
    """py-spy --native dumps of a process under GPU load (bench/native_overhead.py on the H100): the
    native leaf names the wait, the user frame a person would edit stays the Python one."""
    import json

    from memtop.collectors.stacks import parse_dump

    from memtop.core.stackclass import site

    dump = json.loads(NATIVE.read_text())[key]
    s = parse_dump(json.dumps(dump), 1, 0.0)
    m = s.main
    assert m is not None and m.active and not m.owns_gil
    assert classify(m.frames, m.active, m.owns_gil) == klass
    assert m.klass == klass
    assert site(m.frames)[0].startswith("<string>:")  # not libcuda.so:0


def test_native_leaves_need_their_patterns():
    """Without the native leaf rules the same real dumps read as plain work: the patterns decide."""
    import json

    from memtop.collectors.stacks import parse_dump

    from memtop.core import stackclass

    dump = json.loads(NATIVE.read_text())["sync_item"]
    frames = parse_dump(json.dumps(dump), 1, 0.0).main.frames
    python_only = tuple(fr for fr in frames if not stackclass.native(fr))
    assert classify(frames, True, False) == "sync"
    assert classify(python_only, True, False) == "other"  # the Python line (`x[0, 0].float().item()`) is
    # in a string here: without native frames or source text, nothing names the wait
