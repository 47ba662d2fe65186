"""Stragglers among the GPUs of one job on this node: the rank the others wait for.

In a synchronous job (DDP, FSDP) every rank meets the others in each collective, so one slow rank
shows as its peers' GPUs in `comm` while its own GPU computes, loads data or sits under host work.
Pure functions over Frames and per-GPU labels; the pipeline turns a finding into that GPU's verdict.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memtop.labelcols import columns
from memtop.model import Frame, ProcSample
from memtop.timefmt import length

if TYPE_CHECKING:
    from memtop.phases import Label

# a straggler is judged over this much of the newest labels: 2 s gave straggler F1 0.965 on the
# training 2-GPU runs (1 s 0.998 but two bins of evidence; 10 s 0.45: it lags an 8 s phase)
WINDOW_S = 2.0
PEER_COMM_MIN = 0.5  # its peers spend at least this share of the window in comm...
OWN_COMM_MAX = 0.2  # ...while it spends at most this share there
OWN_WORK_MIN = 0.5  # ...and at least this share in one phase of its own work
# phases of a rank doing its own work (idle is not: a finished or hung rank is another story)
WORK = ("compute", "memory", "transfer", "sync", "input", "cpu")


def job_groups(frame: Frame) -> dict[int, str]:
    """GPU index -> job key. GPUs are one job when their processes have the same parent and command
    line (torchrun, srun and mpirun start every rank so) or are one process driving several GPUs.
    The ranks' RANK / SLURM_JOB_ID (collectors/jobid.py) are read for snapshots, not carried in
    Frames, so they are not used here. Two copies of one command started from one shell look like
    one job."""
    if frame.host is None:
        return {}
    procs = {p.pid: p for p in frame.host.procs}
    return _groups({g.index: [p.pid for p in g.processes] for g in frame.gpus}, procs)


def jobs_of(procs: Mapping[int, ProcSample]) -> dict[int, str]:
    """job_groups over a whole recording: every process seen with a context on a GPU (a report reads
    the run after its ranks have exited)."""
    by_gpu: dict[int, list[int]] = {}
    for p in procs.values():
        for g in p.gpus:
            by_gpu.setdefault(g, []).append(p.pid)
    return _groups(by_gpu, procs)


def _groups(pids_by_gpu: Mapping[int, Sequence[int]], procs: Mapping[int, ProcSample]) -> dict[int, str]:
    out = {}
    for gpu, pids in pids_by_gpu.items():
        keys = sorted((p.ppid, p.cmdline or p.name) for pid in pids if (p := procs.get(pid)))
        if keys:
            out[gpu] = f"{keys[0][0]} {keys[0][1]}"
    return out


@dataclass(frozen=True)
class Straggler:
    gpu: int
    phase: str  # its own dominant work phase over the window
    share: float  # of the window
    peers: tuple[int, ...]
    peer_comm: float  # the peers' mean share of comm over the window
    window_s: float

    @property
    def evidence(self) -> str:
        names = ", ".join(str(p) for p in self.peers)
        return (  # "straggler" first: the TUI cuts this line at the panel's width
            f"straggler: GPU {self.gpu} {self.phase} {100 * self.share:.0f} % of the last {length(self.window_s)} while "
            f"GPU{'s' if len(self.peers) > 1 else ''} {names} of its job "
            f"{'wait' if len(self.peers) > 1 else 'waits'} in collectives "
            f"{100 * self.peer_comm:.0f} % of it"
        )


def _shares(labels: Sequence[Label], since: float) -> dict[str, float]:
    return _fractions(Counter(lab.label for lab in labels if lab.t > since))


def _fractions(c: Counter[str]) -> dict[str, float]:
    n = sum(v for k, v in c.items() if k != "warmup")
    return {k: v / n for k, v in c.items() if k != "warmup" and v} if n else {}


def stragglers(
    labels: Mapping[int, Sequence[Label]], jobs: Mapping[int, str], window_s: float = WINDOW_S
) -> list[Straggler]:
    """The GPUs in their own work while the other GPUs of their job wait in `comm`."""
    ends = [ls[-1].t for ls in labels.values() if ls]
    if not ends:
        return []
    since = max(ends) - window_s
    return _judge({g: _shares(ls, since) for g, ls in labels.items() if g in jobs}, jobs, window_s)


def _judge(
    shares: Mapping[int, dict[str, float]], jobs: Mapping[int, str], window_s: float
) -> list[Straggler]:
    groups: dict[str, list[int]] = {}
    for g in sorted(shares):
        if shares[g]:
            groups.setdefault(jobs[g], []).append(g)
    out = []
    for gpus in groups.values():
        for g in gpus:
            peers = tuple(p for p in gpus if p != g)
            if not peers:
                continue
            own = shares[g]
            peer_comm = sum(shares[p].get("comm", 0.0) for p in peers) / len(peers)
            phase, share = max(
                ((k, v) for k, v in own.items() if k in WORK), key=lambda kv: kv[1], default=("", 0.0)
            )
            if share >= OWN_WORK_MIN and own.get("comm", 0.0) <= OWN_COMM_MAX and peer_comm >= PEER_COMM_MIN:
                out.append(Straggler(g, phase, share, peers, peer_comm, window_s))
    return out


@dataclass(frozen=True)
class Episode:
    """A stretch of bins in which one GPU was flagged as its job's straggler."""

    gpu: int
    t0: float
    t1: float  # the end of its last flagged bin
    phase: str  # its own work phase while flagged
    peers: tuple[int, ...]


def episodes(
    labels: Mapping[int, Sequence[Label]], jobs: Mapping[int, str], bin_s: float, window_s: float = WINDOW_S
) -> list[Episode]:
    """Every straggler flag of a recording, judged at each bin on the labels as they stood then (as
    the live pipeline flags), merged into episodes per GPU: a gap of one bin, or another own phase
    (the rank late for another reason), splits them."""
    if len(set(jobs.values())) == len(jobs):  # no job spans two GPUs
        return []
    # one sweep over time: each GPU's label counts over the newest window_s, as stragglers() takes
    # them at that instant (labels newer than the instant's end - window_s)
    seq: list[tuple[float, int, str]] = []
    for g, ls in labels.items():
        if g in jobs:
            cols = columns(ls)
            seq += zip(cols.t.tolist(), itertools.repeat(g), cols.label.tolist(), strict=False)
    seq.sort()
    counts: dict[int, Counter[str]] = {g: Counter() for g in labels if g in jobs}
    flags: dict[int, list[tuple[float, str, tuple[int, ...]]]] = {}
    head = tail = 0
    while head < len(seq):
        t = seq[head][0]
        while head < len(seq) and seq[head][0] == t:
            counts[seq[head][1]][seq[head][2]] += 1
            head += 1
        while seq[tail][0] <= t - window_s:
            counts[seq[tail][1]][seq[tail][2]] -= 1
            tail += 1
        if any(c["comm"] for c in counts.values()):  # no GPU waits: nobody is late
            for s in _judge({g: _fractions(c) for g, c in counts.items()}, jobs, window_s):
                flags.setdefault(s.gpu, []).append((t, s.phase, s.peers))
    out = []
    for gpu, fs in sorted(flags.items()):
        run = [fs[0]]
        for f in fs[1:] + [(float("inf"), "", ())]:
            if f[0] - run[-1][0] > 1.5 * bin_s or f[1] != run[-1][1]:
                out.append(Episode(gpu, run[0][0], run[-1][0] + bin_s, run[-1][1], run[-1][2]))
                run = []
            run.append(f)
    return out
