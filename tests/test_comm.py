"""The `comm` phase and the straggler flag.

SYNTHETIC FRAMES: except for the single-GPU corpus control, these tests build Frames by hand from
GpuSample / StackSample with the shapes issue #22 describes (a rank waiting in NCCL: graphics busy,
SM, tensor and DRAM near zero, low power; its peer computing). They check the rule's logic, not
that it is right on hardware: tests/test_comm_recorded.py does that on real 2-GPU recordings.
"""

from __future__ import annotations

import glob
from dataclasses import replace
from pathlib import Path

import pytest
from memtop.tui import format as fmt
from multigpu import multi_gpu

from memtop.analysis.jobs import job_groups
from memtop.analysis.phases import Classifier, classify, nvlink_peak
from memtop.analysis.straggler import stragglers
from memtop.analysis.verdict import straggler_verdict, verdict
from memtop.core.model import (
    Frame,
    GpuProcess,
    GpuSample,
    HostSample,
    PcieLink,
    ProcSample,
    StackFrame,
    StackSample,
    ThreadStack,
)
from memtop.core.stackclass import classify as stack_class
from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording

H100 = "NVIDIA H100 80GB HBM3"
TORCH = "/usr/lib/python3/dist-packages/torch"
# GPU patterns (graphics, SM, tensor, DRAM, NVLink bytes/s both ways, power W)
WAIT = (100.0, 4.0, 0.0, 1.0, 2e9, 115.0)  # NCCL kernel spinning for a late peer
COMPUTE = (98.0, 88.0, 55.0, 30.0, 0.0, 610.0)
OVERLAPPED = (99.0, 84.0, 50.0, 35.0, 120e9, 640.0)  # all-reduce buckets under the backward pass
BANDWIDTH = (100.0, 35.0, 0.0, 25.0, 0.8 * nvlink_peak(H100), 330.0)
LOW_SM = (100.0, 5.0, 0.0, 1.0, 0.0, 110.0)


def _gpu(t: float, i: int, pat: tuple, pid: int, mode: str = "gpm") -> GpuSample:
    g, sm, tensor, dram, nvl, power = pat
    gpm = mode == "gpm"
    return GpuSample(
        t=t,
        index=i,
        uuid=f"GPU-synthetic-{i}",
        name=H100,
        mode=mode,
        util=g,
        mem_util=dram,
        graphics=g if gpm else None,
        sm=sm if gpm else None,
        tensor=tensor if gpm else None,
        dram=dram if gpm else None,
        pcie_rx=2e8,
        pcie_tx=2e8,
        nvlink_rx=nvl / 2 if gpm else None,
        nvlink_tx=nvl / 2 if gpm else None,
        link=PcieLink(5, 16, 5, 16, 63e9),
        power_w=power,
        processes=(GpuProcess(pid, 8 << 30),),
    )


def _proc(pid: int, gpu: int, cmd: str = "python -u train.py", ppid: int = 100, cpu: float = 100.0, **kw):
    return ProcSample(pid, ppid, "python", cmd, "u", cpu, 12, "R", "0-15", "0", (), (gpu,), **kw)


def _stack(t: float, pid: int, frames: tuple[StackFrame, ...]) -> StackSample:
    th = ThreadStack(pid, "MainThread", True, False, frames, stack_class(frames, True, False))
    return StackSample(t, pid, (th,))


ALL_REDUCE = (
    StackFrame("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 2501, "work.wait()"),
    StackFrame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 83, "return func(*args, **kwargs)"),
    StackFrame("step", "/home/u/train.py", 40, "dist.all_reduce(loss)"),
)


def _frames(
    pats: list[tuple],
    seconds: float = 20.0,
    cmds: list[str] | None = None,
    stacks=None,
    mode="gpm",
    workers=(),
) -> list[Frame]:
    """One frame per 0.1 s: GPU i shows pats[i], its process 1000+i (children of one launcher)."""
    frames = []
    cmds = cmds or ["python -u train.py"] * len(pats)
    for k in range(int(seconds * 10)):
        t = 100.0 + 0.1 * k
        procs = tuple(_proc(1000 + i, i, cmds[i]) for i in range(len(pats))) + tuple(workers)
        host = HostSample(t, (50.0,) * 16, 0.0, (1.0, 1.0, 1.0), 1 << 34, 1 << 36, 0, 0, procs=procs)
        st = () if stacks is None or k % 2 else tuple(_stack(t, 1000 + i, fr) for i, fr in stacks.items())
        gpus = tuple(_gpu(t, i, p, 1000 + i, mode) for i, p in enumerate(pats))
        frames.append(Frame(t, gpus, host, st))
    return frames


def _run(pats: list[tuple], **kw) -> Classifier:
    return classify(_frames(pats, **kw))


def _settled(c: Classifier, gpu: int) -> set[str]:
    """The labels after the first 3 s (warm-up and confirmation)."""
    return {lab.label for lab in c.labels[gpu] if lab.t >= 103.0}


# -- the phase --------------------------------------------------------------------------------
def test_comm_fires_on_the_waiting_gpu_and_not_on_its_busy_peer():
    c = _run([WAIT, COMPUTE])
    assert _settled(c, 0) == {"comm"} and _settled(c, 1) == {"compute"}
    last = c.labels[0][-1]
    assert last.sub == "wait" and last.evidence.peers_elsewhere == (1,)
    assert last.evidence.power_w == 115.0 and "no stacks" in last.evidence.mode
    assert "peer GPU 1 not in a collective" in verdict(c.labels[0], gpu=0).evidence


def test_comm_confirmed_by_collective_stacks_without_peers():
    c = _run([WAIT], stacks={0: ALL_REDUCE})
    assert _settled(c, 0) == {"comm"}
    top = c.labels[0][-1].evidence.top_stack
    assert top is not None and top.code == "dist.all_reduce(loss)"


def test_bandwidth_bound_collective_is_comm_with_its_sub_tag():
    c = _run([BANDWIDTH, BANDWIDTH])
    for g in (0, 1):
        assert _settled(c, g) == {"comm"} and c.labels[g][-1].sub == "bandwidth"
    assert stragglers(c.labels, c.jobs) == []  # both in the collective: nobody is late


# -- negative controls ------------------------------------------------------------------------
def test_overlapped_all_reduce_during_compute_stays_compute():
    c = _run([OVERLAPPED, OVERLAPPED], stacks={0: ALL_REDUCE, 1: ALL_REDUCE})
    assert _settled(c, 0) == _settled(c, 1) == {"compute"}


def test_lone_gpu_with_low_sm_and_no_peers_or_stacks_is_not_comm():
    assert "comm" not in _settled(_run([LOW_SM]), 0)


def test_peers_of_another_job_do_not_confirm_comm():
    c = _run([WAIT, COMPUTE], cmds=["python -u train.py", "python -u other.py"])
    assert c.jobs[0] != c.jobs[1] and "comm" not in _settled(c, 0)


def test_without_gpm_comm_cannot_fire_and_the_evidence_says_so():
    for c in (_run([WAIT, COMPUTE], mode="nvml"), _run([WAIT], mode="nvml", stacks={0: ALL_REDUCE})):
        assert "comm" not in _settled(c, 0)
        assert "needs GPM" in (c.labels[0][-1].evidence.comm or "")


def _corpus() -> list[Path]:
    return [Path(p) for p in sorted(glob.glob(str(Path(__file__).parent / "data" / "*.memtop")))]


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.stem)
def test_no_comm_on_the_single_gpu_corpus(path):
    """Real H100 recordings: no comm bin, and none when each is made a 2-GPU job (the same process on
    both, shifted 11 s, so every bin has a peer)."""
    frames = list(Recording(path).frames())
    for fr in (frames, multi_gpu(frames, 2)):
        c = classify(fr)
        assert not [lab.t for ls in c.labels.values() for lab in ls if lab.raw == "comm"], path.name


# -- stragglers -------------------------------------------------------------------------------
def test_straggler_is_the_computing_rank_with_evidence_and_advice():
    c = _run([WAIT, COMPUTE, WAIT])
    (s,) = stragglers(c.labels, c.jobs)
    assert (s.gpu, s.phase, s.peers) == (1, "compute", (0, 2)) and s.peer_comm > 0.8
    v = straggler_verdict(s, verdict(c.labels[1], gpu=1, window_s=10), None)
    assert v.headline.startswith("GPU 1 is the straggler") and "GPUs 0, 2 of its job wait" in v.evidence
    assert v.evidence.startswith("straggler: GPU 1 compute")  # the TUI shows the line's start at 80 columns
    assert "-o memtop-straggler-rank%q{RANK}" in v.command


def test_straggler_delayed_by_its_dataloader_gets_input_advice():
    slow_loader = (35.0, 30.0, 10.0, 5.0, 0.0, 200.0)
    workers = [
        replace(_proc(2000 + k, 1, cpu=95.0), name="pt_data_worker", gpus=(), worker_of=1001)
        for k in range(4)
    ]
    c = _run([WAIT, slow_loader], workers=workers)
    (s,) = stragglers(c.labels, c.jobs)
    assert (s.gpu, s.phase) == (1, "input")
    assert "DataLoader" in straggler_verdict(s, verdict(c.labels[1], gpu=1), None).advice[0]


def test_pipeline_turns_the_straggler_into_its_gpu_verdict():
    p = Pipeline(Status("replay"))
    for f in _frames([WAIT, COMPUTE]):
        p.on_frame(f, tick=False)
    view = p.view()
    v = view.verdicts
    assert v[0].label == "comm" and "waits in a collective" in v[0].advice[0]
    assert v[1].headline.startswith("GPU 1 is the straggler") and v[1].label == "compute"
    # the screen's headline names it first, and its nsys command shows though compute is healthy
    assert fmt.headline(view, 1).plain.startswith("GPU 1 STRAGGLER now: compute ")
    assert "STRAGGLER" not in fmt.headline(view, 0).plain
    assert "$ nsys profile" in fmt.verdict_text(view, 1).plain and "straggler-rank" in v[1].command


def test_no_straggler_when_every_rank_computes():
    c = _run([COMPUTE, COMPUTE])
    assert stragglers(c.labels, c.jobs) == []


def test_job_groups_by_launcher_and_command_line():
    c = _run(
        [COMPUTE, COMPUTE, COMPUTE], cmds=["python -u a.py", "python -u a.py", "python -u b.py"], seconds=2
    )
    assert c.jobs[0] == c.jobs[1] != c.jobs[2]
    assert job_groups(Frame(0.0)) == {}


# -- stack class ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "frames, gil, klass",
    [
        (ALL_REDUCE, False, "comm"),
        # the CUDA sync inside a c10d work's wait is the collective's wait
        (
            (
                StackFrame("cudaStreamSynchronize", "libcudart.so.12", 0),
                StackFrame("c10d::ProcessGroupNCCL::WorkNCCL::synchronize", "libtorch_cuda.so", 0),
            ),
            None,
            "comm",
        ),
        ((StackFrame("step", "/home/u/train.py", 41, "handle.wait()"),), False, "comm"),
        ((StackFrame("step", "/home/u/train.py", 41, "handle.wait()"),), True, "other"),  # running Python
        # FSDP's forward wrapper above ordinary compute is not a collective
        (
            (
                StackFrame("forward", f"{TORCH}/nn/modules/linear.py", 125),
                StackFrame("forward", f"{TORCH}/distributed/fsdp/fully_sharded_data_parallel.py", 860),
                StackFrame("step", "/home/u/train.py", 30, "out = model(x)"),
            ),
            None,
            "other",
        ),
        ((StackFrame("_unshard", f"{TORCH}/distributed/fsdp/_runtime_utils.py", 300),), None, "comm"),
        ((StackFrame("_sync_buffers", f"{TORCH}/nn/parallel/distributed.py", 1500),), None, "comm"),
    ],
)
def test_comm_stack_class(frames, gil, klass):
    assert stack_class(frames, True, gil) == klass
