"""Input pipelines that are not torch's DataLoader, their negative controls and device-to-host copies
(issue #35), written the way users write them. Each pipeline runs at two CPU/GPU ratios (``_lo``: the
GPU does ~1 ms per batch, ``_hi``: about half of what the producers take); every producer is slower
than the GPU step, so the GPU waits for data: input-bound by construction. The workload's own facts
(batches, the main thread's wait share) go into each marker (see wl.py).

usage: python pipe_fw.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import tempfile
import time
from multiprocessing import shared_memory

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from wl import Waits, args, run, spin

dev = torch.device("cuda")
A = args(__doc__)
S = A.scale
torch.manual_seed(A.seed)
FORK = mp.get_context("fork")  # children never touch CUDA
WORKERS = 3
ITEM_MS = 40.0 * S  # a producer's work per batch (decode + augment)
IMG = (16, 96, 96, 3)  # a batch of uint8 images: 0.4 MB moved to the GPU per batch

MID = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16) / 2048**0.5
BIG = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)


def _per_ms() -> float:
    MID @ MID
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        MID @ MID
    torch.cuda.synchronize()
    return max(1, round(50 / ((time.perf_counter() - t) * 1e3)))


K1 = _per_ms()  # products of MID per ms of GPU


def gpu_step(ms: float, batch: np.ndarray) -> None:
    """A training step: the batch to the GPU, ``ms`` of kernels (queued: the loop never syncs)."""
    x = torch.from_numpy(batch).to(dev).float().mean()
    y = MID * x
    for _ in range(max(1, round(ms * K1))):
        y = MID @ y


def decode(seed: int, ms: float = ITEM_MS) -> np.ndarray:
    """A producer's work: numpy image decode/augment for ``ms`` (releases the GIL in numpy's loops)."""
    rng = np.random.default_rng(seed)
    end = time.perf_counter() + ms / 1e3
    img = rng.integers(0, 255, IMG, dtype=np.uint8)
    while time.perf_counter() < end:
        f = img.astype(np.float32)
        f = np.sort(f[:, ::-1], axis=2)
        img = (np.clip(f * 0.99 + 1, 0, 255)).astype(np.uint8)
    return img


def _ratio(hi: bool) -> float:
    """GPU ms per batch: ~1 ms, or half of a batch's share of the producers' time (WORKERS at once)."""
    return 0.5 * ITEM_MS / WORKERS if hi else 1.0


def _loop(end: float, get, hi: bool) -> dict:
    w, n, ms = Waits(), 0, _ratio(hi)
    while time.monotonic() < end:
        gpu_step(ms, w.timed(get, n))
        n += 1
    torch.cuda.synchronize()
    # the pipeline's teardown (joining its processes) is not the phase
    return {"batches": n, "gpu_ms_per_batch": round(ms, 1), "wait_frac": w.frac(), "_t1": time.monotonic()}


# -- multiprocessing.Pool ---------------------------------------------------------------------
def pool(end: float, hi: bool) -> dict:
    with FORK.Pool(WORKERS) as p:
        it = p.imap(decode, range(A.seed * 10**6, A.seed * 10**6 + 10**6), chunksize=1)
        return _loop(end, lambda n: next(it), hi)


# -- concurrent.futures.ProcessPoolExecutor ----------------------------------------------------
def ppe(end: float, hi: bool) -> dict:
    with cf.ProcessPoolExecutor(WORKERS, mp_context=FORK) as ex:
        return _futures(ex, end, hi)


# -- a thread pool (numpy releases the GIL) -----------------------------------------------------
def threads(end: float, hi: bool) -> dict:
    with cf.ThreadPoolExecutor(WORKERS) as ex:
        return _futures(ex, end, hi)


def _futures(ex: cf.Executor, end: float, hi: bool) -> dict:
    """The loop fed by ``ex``: 2 x WORKERS decodes in flight, each one taken replaced by the next."""
    futs = [ex.submit(decode, k) for k in range(2 * WORKERS)]
    k = len(futs)

    def get(n: int) -> np.ndarray:
        nonlocal k
        out = futs.pop(0).result()
        futs.append(ex.submit(decode, k))
        k += 1
        return out

    out = _loop(end, get, hi)
    for f in futs:
        f.cancel()
    return out


# -- a producer process over multiprocessing.Queue -------------------------------------------
def _producer_q(q, stop, k: int) -> None:
    while not stop.is_set():
        q.put(decode(k))
        k += 1


def queue(end: float, hi: bool) -> dict:
    q, stop = FORK.Queue(4), FORK.Event()
    ps = [FORK.Process(target=_producer_q, args=(q, stop, k * 10**5), daemon=True) for k in range(WORKERS)]
    for p in ps:
        p.start()
    try:
        return _loop(end, lambda n: q.get(), hi)
    finally:
        stop.set()
        for p in ps:
            p.terminate()
            p.join()


# -- a producer process over shared memory (ring of slots, semaphores) -----------------------------
SLOTS = 4


def _producer_shm(name: str, full, free, stop, k: int) -> None:
    shm = shared_memory.SharedMemory(name=name)
    ring = np.ndarray((SLOTS, *IMG), dtype=np.uint8, buffer=shm.buf)
    i = 0
    while not stop.is_set():
        img = decode(k + i, ITEM_MS / WORKERS)  # one producer, as fast as the pools' three
        if not free.acquire(timeout=1.0):
            continue
        ring[i % SLOTS] = img
        full.release()
        i += 1
    shm.close()


def shm(end: float, hi: bool) -> dict:
    size = SLOTS * int(np.prod(IMG))
    mem = shared_memory.SharedMemory(create=True, size=size)
    ring = np.ndarray((SLOTS, *IMG), dtype=np.uint8, buffer=mem.buf)
    full, free, stop = FORK.Semaphore(0), FORK.Semaphore(SLOTS), FORK.Event()
    p = FORK.Process(target=_producer_shm, args=(mem.name, full, free, stop, A.seed), daemon=True)
    p.start()
    slot = [0]

    def get(n: int) -> np.ndarray:
        full.acquire()
        out = ring[slot[0] % SLOTS].copy()
        slot[0] += 1
        free.release()
        return out

    try:
        return _loop(end, get, hi)
    finally:
        stop.set()
        p.join(3)
        p.terminate()
        mem.close()
        mem.unlink()


# -- torch DataLoader, the reference ---------------------------------------------------------------
class Decoded(Dataset):
    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int) -> np.ndarray:
        return decode(i)


def loader(end: float, hi: bool) -> dict:
    dl = DataLoader(Decoded(), batch_size=None, num_workers=WORKERS, prefetch_factor=2)
    it = iter(dl)
    return _loop(end, lambda n: next(it).numpy(), hi)


# -- negative controls: a busy helper unrelated to feeding the job -------------------------------
def _logger(end: float) -> None:
    """A logger formatting and compressing records: CPU-bound, feeding nothing."""
    while time.monotonic() < end:
        spin(20)


def _ckpt_writer(end: float) -> None:
    """A checkpoint writer: serialising state and writing it to a file, over and over."""
    state = np.random.default_rng(0).standard_normal(4 << 20).astype(np.float32)
    fd, path = tempfile.mkstemp(prefix="ckpt")
    os.close(fd)
    try:
        while time.monotonic() < end:
            with open(path, "wb") as fh:
                fh.write((state * 1.0001).tobytes())
            state = np.sort(state)[::-1].copy()
    finally:
        os.unlink(path)


def _compile_worker(end: float) -> None:
    """A compile worker (as torch.compile's): compiling source text, no GPU."""
    src = "\n".join(f"def f{i}(x):\n    return x * {i} + sum(range({i % 50}))" for i in range(400))
    while time.monotonic() < end:
        compile(src, "<gen>", "exec")


HELPERS = {"logger": _logger, "ckpt": _ckpt_writer, "compile": _compile_worker}


def _with_helper(end: float, helper: str, body) -> dict:
    ch = FORK.Process(target=HELPERS[helper], args=(end,), daemon=True)
    ch.start()
    try:
        return {**body(end), "_t1": time.monotonic()}
    finally:
        ch.join(2)
        ch.terminate()


def _saturated(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        for _ in range(4):
            BIG @ BIG
        torch.cuda.synchronize()
        n += 1
    return {"steps": n}


def _asleep(end: float) -> dict:
    time.sleep(max(0.0, end - time.monotonic()))
    return {}


# -- device-to-host copies (no stacks needed to tell them) -----------------------------------------
NB = int(64 * S) << 20  # floats per copy (256 MiB at scale 1)
DSRC = torch.ones(NB, device=dev)
H_PIN = torch.empty(NB).pin_memory()


def d2h_pageable(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        DSRC.cpu()  # a fresh pageable buffer each time, as .cpu() makes
        n += 1
    return {"d2h_bytes": n * NB * 4}


def d2h_pinned(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        H_PIN.copy_(DSRC, non_blocking=True)
        torch.cuda.synchronize()
        n += 1
    return {"d2h_bytes": n * NB * 4}


PHASES = {
    **{f"{k}_{r}": ("input", lambda e, f=f, h=(r == "hi"): f(e, h)) for k, f in (
        ("pool", pool), ("ppe", ppe), ("threads", threads), ("queue", queue), ("shm", shm), ("loader", loader)
    ) for r in ("lo", "hi")},
    **{f"neg_busy_{h}": ("compute", lambda e, h=h: _with_helper(e, h, _saturated)) for h in HELPERS},
    **{f"neg_idle_{h}": ("idle", lambda e, h=h: _with_helper(e, h, _asleep)) for h in HELPERS},
    "d2h_pageable": ("transfer", d2h_pageable),
    "d2h_pinned": ("transfer", d2h_pinned),
}  # fmt: skip

if __name__ == "__main__":
    run(A, PHASES)
