"""Labels per job on a shared GPU: each job's phase from its own processes (issue #37).

Where two or more jobs hold contexts on one GPU (time-slicing, MPS, or plain co-location), the GPU's
label is the sum of both. Here each job gets its own: the GPU's figures are split by the driver's
per-process SM utilisation (GpuSample.proc_util), each job keeps only its processes (so its CPU, its
DataLoader workers, its main thread's wait and its stacks are its own), and the unchanged phase
Classifier (memtop.analysis.phases: the same rules, hysteresis and stack window) labels each job's view as if
the job had the GPU alone. Nothing here is a rule: only the per-job inputs.

A job: processes with the same cgroup identity (container, pod, Slurm job: Frame.jobs) and the same
process tree (memtop.analysis.jobs.proc_key: parent and command line); a GPU process whose ancestor holds a
context on the same GPU belongs to that ancestor's job.

The split of a figure: a job's part of the GPU's per-process SM time. While the GPU is saturated
(engine >= SATURATED) the jobs contend for it, and a job using at least its even part of the GPU
(1 / the jobs at work) would have used all of it: its part is scaled by the number of jobs at work, up
to the whole. So a compute-bound job beside another compute-bound job stays compute-bound, and an
input-bound job's few kernels beside a compute-bound job stay a few.
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from memtop.analysis.jobs import proc_key
from memtop.analysis.phases import METRICS_READ, Classifier, Label
from memtop.analysis.verdict import Verdict, verdict
from memtop.core.metrics import METRICS
from memtop.core.model import Frame, GpuSample, ProcSample, ProcUtil

SATURATED = 80.0  # GPU engine %: the jobs contend for it (the phase rules' under-used line)
# the figures a job's view scales by its part; the rest (power, clocks, memory) stay the GPU's
SCALED = (
    *("graphics", "sm", "occupancy", "tensor", "dram", "util", "mem_util"),
    *("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx"),
)
_ANCESTRY = 32  # parent links followed to find a GPU process's job
# what a report's Frames may leave out: nothing the Classifier or the split reads (Recording.frames' skip)
READ_SKIP = frozenset({"series", "perf", "note"}) | frozenset(
    m.name for m in METRICS if m.name not in METRICS_READ
)


@dataclass(frozen=True)
class Job:
    """One job on a shared GPU, as shown: its key, its main process (the lowest pid), its script or
    name, and its cgroup identity where it has one."""

    key: str
    pid: int
    name: str
    identity: str = ""
    pids: tuple[int, ...] = ()

    @property
    def title(self) -> str:
        who = f"pid {self.pid}, {self.name}" if self.name else f"pid {self.pid}"
        return (
            f"job {self.identity} ({who})"
            if self.identity
            else f"job {self.name or self.pid} (pid {self.pid})"
        )


def script_of(p: ProcSample | None) -> str:
    """The script or module a process runs (its first argument ending .py, or after -m), else its name."""
    if p is None:
        return ""
    argv = p.argv or tuple(p.cmdline.split())
    for k, a in enumerate(argv):
        if a.endswith(".py"):
            return a.rsplit("/", 1)[-1]
        if a == "-m" and k + 1 < len(argv):
            return argv[k + 1]
    return p.name


def _identity(job: Mapping[str, str]) -> str:
    for key, word in (("slurm_job_id", "slurm"), ("pod_uid", "pod"), ("container", "container")):
        if job.get(key):
            return f"{word} {job[key][:12]}"
    return ""


def jobs_on(frame: Frame, g: GpuSample, known: dict[int, tuple[str, str]] | None = None) -> dict[str, Job]:
    """The jobs holding contexts on one GPU of a Frame, by key. ``known``: each process's (job key,
    script) as last found (kept up to date here), for a process the Frame's host sample omits."""
    known = {} if known is None else known
    procs = {p.pid: p for p in frame.host.procs} if frame.host is not None else {}
    on = {p.pid for p in g.processes}
    by_key: dict[str, list[int]] = {}
    for pid in sorted(on):
        root = _root(pid, on, procs)
        p = procs.get(root)
        ident = frame.job_of(root)
        if p is not None:
            key = ",".join(f"{k}={v}" for k, v in sorted(ident.items())) + "|" + proc_key(p)
            known[root] = (key, script_of(p))
        if root in known:  # (a process the host has not listed yet is in no job until it has)
            by_key.setdefault(known[root][0], []).append(pid)
    out = {}
    for key, pids in by_key.items():
        main = min(pids)
        out[key] = Job(
            key, main, known[_root(main, on, procs)][1], _identity(frame.job_of(main)), tuple(pids)
        )
    return out


def _root(pid: int, on: set[int], procs: Mapping[int, ProcSample]) -> int:
    """The oldest ancestor of ``pid`` that holds a context on the same GPU (itself where none does)."""
    root, cur = pid, procs.get(pid)
    for _ in range(_ANCESTRY):
        if cur is None or cur.ppid <= 1:
            break
        if cur.ppid in on:
            root = cur.ppid
        cur = procs.get(cur.ppid)
    return root


def sm_shares(g: GpuSample, jobs: Mapping[str, Job]) -> dict[str, float] | None:
    """Each job's share of the GPU's per-process SM time, None where the driver gave no figure."""
    sm = {k: sum((u.sm or 0.0) for u in g.proc_util if u.pid in j.pids) for k, j in jobs.items()}
    total = sum(sm.values())
    return {k: v / total for k, v in sm.items()} if total > 0 else None


def parts(g: GpuSample, jobs: Mapping[str, Job]) -> dict[str, float]:
    """Each job's part (0..1) of the GPU's figures: its share of the per-process SM time, scaled up
    while the GPU is saturated (module doc); an even split where the driver gave no figure."""
    share = sm_shares(g, jobs)
    if share is None:
        return {k: 1.0 / len(jobs) for k in jobs}
    engine = g.engine
    if engine is None or engine < SATURATED:
        return share
    at_work = sum(1 for v in share.values() if v > 0)
    return {k: min(1.0, s * at_work) for k, s in share.items()}


def job_sample(g: GpuSample, job: Job, part: float) -> GpuSample:
    """The GPU's sample as one job sees it: its figures scaled by the job's part, its processes only."""
    values = {f: v * part for f in SCALED if (v := getattr(g, f)) is not None}
    return replace(
        g,
        **values,
        processes=tuple(p for p in g.processes if p.pid in job.pids),
        proc_util=tuple(u for u in g.proc_util if u.pid in job.pids),
    )


class JobView(NamedTuple):
    """A job on a shared GPU of one Frame: the job, the Frame as it sees it (its view of every GPU it
    shares, its stacks) and its share of each of those GPUs' SM time (``sm_shares``; even where the
    driver gave no figure): what its energy there is split by, unscaled by saturation."""

    job: Job
    frame: Frame
    share: dict[int, float]


def split(frame: Frame, known: dict[int, tuple[str, str]] | None = None) -> dict[str, JobView]:
    """Each job on a shared GPU of the Frame, by key. GPUs held by one job are left out: their label
    is the job's."""
    views: dict[str, list[GpuSample]] = {}
    found: dict[str, Job] = {}
    got: dict[str, dict[int, float]] = {}
    for g in frame.gpus:
        if g.mode == "lost" or len(g.processes) < 2:
            continue
        jobs = jobs_on(frame, g, known)
        if len(jobs) < 2:
            continue
        share = sm_shares(g, jobs) or {k: 1.0 / len(jobs) for k in jobs}
        for key, part in parts(g, jobs).items():
            views.setdefault(key, []).append(job_sample(g, jobs[key], part))
            got.setdefault(key, {})[g.index] = share[key]
            j = found.get(key)
            found[key] = (
                jobs[key] if j is None else replace(j, pids=tuple(sorted({*j.pids, *jobs[key].pids})))
            )
    out = {}
    for key, gs in views.items():
        pids = set(found[key].pids)
        out[key] = JobView(
            found[key],
            replace(frame, gpus=tuple(gs), stacks=tuple(s for s in frame.stacks if s.pid in pids)),
            got[key],
        )
    return out


class JobLabeller:
    """Feed Frames in time order; read ``labels`` (GPU -> job key -> its Labels) and ``jobs``.

    One phase Classifier per job, fed the job's view of the GPUs it shares. The driver's per-process
    figure of a second arrives at that second's end (collectors.nvml.ProcUtilDrain) while the GPU's
    own figures are of the instant, so a Frame waits until the figure covering it has come (its GPU's
    proc_util changed) or FIGURE_S has passed, and is split by the newest figure then: a job's labels
    come about a second after the GPU's (on the training runs every error of the undelayed split was
    in the second after a job's phase changed). ``forget_s``: a job not seen on a shared GPU for this
    long is dropped (live mode; a report keeps every job). ``keep_shares``: keep each job's share of
    each shared GPU's SM time at every instant (``shares``: the report's energy per job)."""

    FIGURE_S = 1.0  # the driver's per-process sampling period (about 1 s on the H100 and H200)

    def __init__(self, forget_s: float | None = None, keep_shares: bool = False, **kw) -> None:
        self.forget_s = forget_s
        # GPU -> job key -> (time, share) at each instant it was split, in time order
        self.shares: dict[int, dict[str, list[tuple[float, float]]]] | None = {} if keep_shares else None
        self.kw = kw
        self.jobs: dict[str, Job] = {}
        self._clf: dict[str, Classifier] = {}
        self._seen: dict[str, float] = {}
        self._known: dict[int, tuple[str, str]] = {}  # pid -> its job's key and script (jobs_on)
        self._pending: deque[Frame] = deque()
        self._util: dict[int, tuple[ProcUtil, ...]] = {}  # each GPU's newest per-process figures

    def feed(self, frame: Frame) -> None:
        new = False
        for g in frame.gpus:
            if g.proc_util and g.proc_util != self._util.get(g.index):
                self._util[g.index] = g.proc_util
                new = True
        self._pending.append(frame)
        while self._pending and (new or self._pending[0].t <= frame.t - self.FIGURE_S):
            self._label(self._pending.popleft())

    def _label(self, frame: Frame) -> None:
        if any(len(g.processes) > 1 for g in frame.gpus):  # (only such a GPU can be shared: split's test)
            util = self._util
            gpus = tuple(
                g if (u := util.get(g.index, g.proc_util)) == g.proc_util else replace(g, proc_util=u)
                for g in frame.gpus
            )
            frame = replace(frame, gpus=gpus)
            for key, (job, view, share) in split(frame, self._known).items():
                self.jobs[key] = job
                if self.shares is not None:
                    for gpu, v in share.items():
                        self.shares.setdefault(gpu, {}).setdefault(key, []).append((frame.t, v))
                self._seen[key] = frame.t
                clf = self._clf.get(key) or self._clf.setdefault(key, Classifier(**self.kw))
                clf.feed(view)
        if self.forget_s is not None:
            for key in [k for k, t in self._seen.items() if t < frame.t - self.forget_s]:
                del self._clf[key], self._seen[key], self.jobs[key]
                for by_job in (self.shares or {}).values():
                    by_job.pop(key, None)
            if len(self._known) > 4096:  # processes come and go
                self._known = {p: k for p, k in self._known.items() if k[0] in self.jobs}

    def feed_all(self, frames: Iterable[Frame]) -> JobLabeller:
        for f in frames:
            self.feed(f)
        while self._pending:
            self._label(self._pending.popleft())
        for clf in self._clf.values():
            clf.flush()
        return self

    def drop_shares(self, gpu: int, before: float) -> None:
        """Forget a GPU's shares older than ``before`` but the newest of them (it holds until the next)."""
        for got in (self.shares or {}).get(gpu, {}).values():
            k = bisect.bisect_left(got, (before, -1.0))
            if k > 1:
                del got[: k - 1]

    @property
    def labels(self) -> dict[int, dict[str, list[Label]]]:
        out: dict[int, dict[str, list[Label]]] = {}
        for key, clf in self._clf.items():
            for gpu, labs in clf.labels.items():
                out.setdefault(gpu, {})[key] = labs
        return out


def entry_key(job: Job, procs: Mapping[int, ProcSample]) -> str:
    """The key memtop.analysis.jobs.jobs_on_gpus gives the job (its main process's tree): a job's energy on
    the GPUs it shared and on those it held alone adds to one entry."""
    p = procs.get(job.pid)
    return proc_key(p) if p is not None else job.key


def job_of_pid(jobs: Mapping[str, Job], pid: int) -> str | None:
    """The key of the job a GPU process belongs to, if it is on a shared GPU."""
    return next((k for k, j in jobs.items() if pid in j.pids), None)


# -- what the screens say (after the labels: nothing below changes one) -------------------------
LIVE_S = 5.0  # a job whose newest label is this much older than the GPU's has left the GPU


def sharing(
    gpu_labels: Sequence[Label], by_job: Mapping[str, tuple[Label, ...]]
) -> dict[str, tuple[Label, ...]]:
    """The jobs sharing a GPU now: those labelled within LIVE_S of the GPU's newest label."""
    if not gpu_labels:
        return {}
    end = gpu_labels[-1].t
    return {k: labs for k, labs in by_job.items() if labs and labs[-1].t >= end - LIVE_S}


def shared_verdict(
    gpu: int,
    base: Verdict,
    per_job: Mapping[str, Verdict],
    jobs: Mapping[str, Job],
    now: Mapping[str, str] | None = None,
) -> Verdict:
    """The GPU's verdict where jobs share it: the job with a problem named first (one whose problem is
    its label now, ``now``: each job's newest label, before one whose problem is in the window's past;
    then the larger share), with its own verdict (its label, evidence, advice and command); the other
    jobs' verdicts after it on the headline. All healthy or idle: the GPU's own verdict, the jobs named
    on its headline."""
    now = now or {}

    def rank(k: str) -> tuple:
        v = per_job[k]
        return (v.healthy, now.get(k) != v.label, -v.share, jobs[k].pid)

    ranked = sorted(per_job, key=rank)
    words = [f"{jobs[k].title} {per_job[k].about or per_job[k].headline}" for k in ranked]
    head = f"GPU {gpu} shared by {len(ranked)} jobs: " + "; ".join(words)
    first = per_job[ranked[0]]
    if first.healthy:
        return replace(base, headline=head)
    return replace(first, gpu=gpu, headline=head, about=words[0])


def job_frame(frame: Frame | None, job: Job) -> Frame | None:
    """The Frame with only the job's GPU processes on its host: a job's verdict then names its own
    process's command line."""
    if frame is None or frame.host is None:
        return frame
    return replace(
        frame, host=replace(frame.host, procs=tuple(p for p in frame.host.procs if p.pid in job.pids))
    )


@dataclass(frozen=True)
class SharedReport:
    """A recording's jobs on one shared GPU (the report's): each job's verdict over the range and its
    rows for the report (title, phases by seconds and share, the verdict's headline)."""

    jobs: dict[str, Job]
    verdicts: dict[str, Verdict]
    rows: list[dict]
    labels: dict[str, list[Label]]  # each job's own labels
    shares: dict[str, list[tuple[float, float]]]  # each job's share of the GPU's SM time at each instant


def report_jobs(
    frames: Iterable[Frame], window_s: float, procs: Sequence[ProcSample], of: str = ""
) -> dict[int, SharedReport]:
    """Each shared GPU's jobs over a recording's range (``procs``: every process seen in it; ``of``: how
    the verdicts name that range, as the GPU's verdict does)."""
    jl = JobLabeller(keep_shares=True).feed_all(frames)
    bin_s = Classifier().bin_s
    out = {}
    for gpu, by_job in jl.labels.items():
        verdicts = {
            k: verdict(labs, None, window_s, gpu, tuple(p for p in procs if p.pid in jl.jobs[k].pids), of=of)
            for k, labs in by_job.items()
        }
        rows = []
        for k in sorted(by_job, key=lambda k: (verdicts[k].healthy, jl.jobs[k].pid)):
            job, shown = jl.jobs[k], [lab.label for lab in by_job[k] if lab.label != "warmup"]
            n = len(shown) or 1
            rows.append(
                {
                    "title": job.title,
                    "pid": job.pid,
                    "name": job.name,
                    "identity": job.identity,
                    "phases": {
                        lab: {"seconds": c * bin_s, "share": round(c / n, 3)}
                        for lab, c in Counter(shown).most_common()
                    },
                    "verdict": verdicts[k].about or verdicts[k].headline,
                }
            )
        shares = (jl.shares or {}).get(gpu, {})
        out[gpu] = SharedReport({k: jl.jobs[k] for k in by_job}, verdicts, rows, by_job, shares)
    return out
