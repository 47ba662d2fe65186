"""Phase classifier: per 1 s bin and GPU, a label with confidence and evidence.

Features come from Frames only (GPM or NVML-only, PCIe as a fraction of the link, process
and DataLoader-worker CPU, stack-class shares over a sliding window), so live and replayed
runs are classified identically. Rules are a table, first match wins; then hysteresis.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from memtop.analysis.jobs import job_groups, peers
from memtop.analysis.ruleview import Bool, Str, View, scalars
from memtop.core.model import MAIN_FIELDS, Frame, GpuSample, StackSample, metrics_of
from memtop.core.records import Evidence, Gap, StackTop
from memtop.core.stackclass import site

if TYPE_CHECKING:
    import numpy as np

LABELS = ("idle", "transfer", "memory", "compute", "sync", "input", "cpu", "comm", "other")
TITLES = {
    "idle": "idle",
    "transfer": "transfer-bound",
    "memory": "memory-bound",
    "compute": "compute-bound",
    "sync": "sync-stall",
    "input": "CPU-bound: input pipeline",
    "cpu": "CPU-bound: launch/Python",
    "comm": "communication: collective",
    "other": "unclassified",
}
# What each label means, for people, in the order the TUI's help lists them (its phase list is made
# from this table, so a label added above is listed there): every label of LABELS, then what the
# GPU table shows where a label goes before one has won (warmup) and for a GPU its job waits for
# (memtop.analysis.straggler's verdict)
MEANINGS = {
    "compute": "GPU busy with real kernels (healthy)",
    "memory": "DRAM-bandwidth bound kernels",
    "transfer": "PCIe copies dominate (DMA or pageable)",
    "sync": "CPU and GPU take turns at a sync",
    "input": "waiting on the input pipeline (DataLoader workers, a pool or producer)",
    "cpu": "launch/Python overhead starves the GPU",
    "comm": "waiting in a collective (wait) or NVLink-bound (bandwidth)",
    "idle": "nothing running on the GPU (the verdict says what its process waits on)",
    "other": "unclassified: no rule matched for more than a second",
    "warmup": "the first seconds, before a label has held long enough to be shown",
    "straggler": "its job's other GPUs wait for this one in collectives",
}
# one-letter marks for text timelines (report, --ascii TUI)
CHARS = {
    "compute": "C",
    "memory": "M",
    "transfer": "T",
    "sync": "S",
    "input": "I",
    "cpu": "P",
    "comm": "N",
    "idle": ".",
    "other": "?",
    "warmup": " ",
}
HEALTHY = {"compute"}
EXPLAINED_BY = {
    "sync": "sync",
    "transfer": "copy",
    "input": "data",
    "cpu": "other",
    "comm": "comm",
}  # label -> stack class
RECENT_S = 1.0  # "is it still happening": the input rule needs a data sample this recent
STACK_WINDOW_S = 6.0  # stack shares come from this many seconds of samples...
STACK_TAU_S = 1.5  # ...weighted by recency, so a finished phase fades out quickly
# The GpuSample figures the features read: the engine (graphics), busy (gaps), and the means of a bin
# (BIN_MEANS, gpu_figures' ``means``). A fallback figure reads both its fields (model.BY_MODE); a report
# reads only METRICS_READ (and its own) from a recording, and tests/test_long_runs.py checks that no
# Features change. A feature of a new figure adds it here.
BIN_MEANS = ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx", "sm", "tensor", "bandwidth", "util", "power_w")
METRICS_READ = metrics_of(("engine", "busy", *BIN_MEANS))
# torch names its DataLoader worker processes so (the DataLoader rules count them); any other child, or
# the process's own threads, feeds it only by behaviour: the main thread waiting while it works (_fed)
DATA_WORKER_NAMES = ("pt_data_worker",)


@dataclass(frozen=True)
class Features:
    t: float  # bin start
    gpu: int
    gpm: bool
    graphics: float  # GPM graphics %, or NVML util % without GPM
    sm: float | None
    tensor: float | None
    dram: float | None  # GPM DRAM-bandwidth %, or NVML memory util % without GPM
    pcie_bps: float  # both directions together: a full-duplex link moves each at once
    pcie_frac: float  # pcie_bps against one direction's link rate
    proc_cpu: float  # main GPU process CPU %
    workers: int
    worker_cpu: float  # mean CPU % per DataLoader worker
    worker_sleeping: float  # share of workers in S/D state
    iowait: float
    shares: dict[str, float]  # stack-class shares of the main threads over the window
    gil: float  # share of samples where the main thread held the GIL
    stack_n: int  # samples in the window (0: no stacks)
    top: tuple[str, str, str] | None  # (class, file:line, code) of the most common busy main-thread stack
    tops: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # the most common one per class
    recent: frozenset[str] = frozenset()  # classes of the main-thread samples of the last second
    sync_age: float = math.inf  # seconds since the newest main-thread sample waiting in a sync
    util: float | None = None  # NVML util: a kernel *or a copy* ran (copy engines count)
    nvlink_bps: float = 0.0  # GPM NVLink, both directions together
    nvlink_frac: float = 0.0  # nvlink_bps against both directions' peak (NVLINK_PEAK_BPS)
    power_w: float | None = None
    peers: tuple[int, ...] = ()  # other GPUs of the same job on this node (memtop.analysis.jobs.job_groups)
    peers_elsewhere: tuple[int, ...] = ()  # those not in a collective's GPU pattern this bin
    rise: float = 0.0  # graphics minus the previous bin's: a GPU ramping up toward a busy phase
    alive: bool = True  # the GPU still holds a process (False: the job is gone)
    stopped: bool = False  # its process read stopped (t/T): paused by a tracer (py-spy --native) or a signal
    # the GPU process's main thread and the busiest other part of its job (model.ProcSample, recorded
    # from 2026-11-28; older recordings hold the defaults, which no rule reads as evidence)
    main_cpu: float = -1.0
    wait: str = ""  # what the main thread waits on (collectors.procfs.thread_wait), "" while it runs
    wait_on: str = ""  # the file, pipe or socket its call names, where /proc shows one
    feeder: str = ""  # "PID name" of the busiest child of the job, or its other threads
    feeder_cpu: float = 0.0

    @property
    def mode(self) -> str:
        """Which signals this bin had: GPM or NVML-only, with or without stacks (the evidence mode)."""
        return mode_name(self.gpm, self.stack_n > 0)


# One bin's Features as the rules read them (memtop.analysis.ruleview.View): each field by its name
One = scalars(Features.__dataclass_fields__)


@dataclass(frozen=True)
class Label:
    t: float
    gpu: int
    raw: str  # this bin's rule result
    label: str  # after hysteresis
    confidence: float
    rule: str
    features: Features
    sub: str = ""  # input: prep / fetch / main; cpu: launch / python; transfer: dma / pageable; comm: wait / bandwidth

    @cached_property
    def evidence(self) -> Evidence:
        """The numbers that fired the rule and the stack that explains the label (built when read:
        an hour has 7,200 labels per GPU and a report reads a handful)."""
        f = self.features
        top = f.tops.get(EXPLAINED_BY.get(self.raw, ""), f.top)
        return Evidence(
            graphics=round(f.graphics, 1),
            sm=_r(f.sm),
            tensor=_r(f.tensor),
            dram=_r(f.dram),
            pcie_gbps=round(f.pcie_bps / 1e9, 2),
            pcie_pct_link=round(100 * f.pcie_frac, 1),
            nvml_util=_r(f.util),
            nvlink_gbps=round(f.nvlink_bps / 1e9, 2),
            nvlink_pct_peak=round(100 * f.nvlink_frac, 1),
            power_w=_r(f.power_w),
            peers=tuple(f.peers),
            peers_elsewhere=tuple(f.peers_elsewhere),
            mode=f.mode,
            proc_cpu=round(f.proc_cpu),
            workers=f.workers,
            worker_cpu=round(f.worker_cpu),
            workers_sleeping=round(f.worker_sleeping, 2),
            iowait=round(f.iowait, 1),
            stack_shares=tuple((k, round(v, 2)) for k, v in sorted(f.shares.items())),
            gil=round(f.gil, 2),
            stack_samples=f.stack_n,
            main_cpu=round(f.main_cpu),
            wait=f.wait,
            wait_on=f.wait_on,
            feeder=f.feeder,
            feeder_cpu=round(f.feeder_cpu),
            comm="not judged: a collective's wait needs GPM SM activity, which this GPU lacks"
            if not f.gpm and (f.peers or f.shares.get("comm", 0) >= 0.2)
            else None,
            top_stack=StackTop(*top) if top else None,
        )


# A bin's features, written once over a backend ``o``: memtop.analysis.ruleview.One (one bin's Python scalars,
# a missing value None: live mode) or ruleview.Cols (arrays over every bin of a GPU, a missing value
# NaN: the report, memtop.analysis.binscan). What differs between the two is only how a bin's samples are
# gathered (a mean over a list of samples, or over segments of arrays); the formulas are these.
def gpu_figures(
    o: Any, gpm: Any, graphics: Any, prev: Any, means: Mapping[str, Any], link_bps: Any, peak: Any
) -> dict[str, Any]:
    """A GPU's features of a bin from its samples' means (``means``: BIN_MEANS by name), whether all
    were GPM, the previous bin's graphics, the newest sample's PCIe link rate (0: unknown) and NVLink
    peak (``nvlink_peak``)."""
    pcie = o.nz(means["pcie_rx"]) + o.nz(means["pcie_tx"])  # a full-duplex link moves each at once
    nvlink = o.nz(means["nvlink_rx"]) + o.nz(means["nvlink_tx"])
    return {
        "gpm": gpm,
        "graphics": graphics,
        "sm": o.unless(gpm, means["sm"]),
        "tensor": o.unless(gpm, means["tensor"]),
        "dram": means["bandwidth"],
        "util": means["util"],
        "power_w": means["power_w"],
        "pcie_bps": pcie,
        "pcie_frac": o.ratio(pcie, link_bps),
        "nvlink_bps": nvlink,
        "nvlink_frac": o.where(gpm, nvlink / peak, 0.0),
        "rise": graphics - prev,
    }


def proc_figures(
    o: Any, busiest: Any, worker_cpu: Any, workers: Any, asleep: Any, stopped: Any, iowait: Any
) -> dict[str, Any]:
    """A GPU's host features of a bin from the host sample at its last Frame: its processes' CPU (the
    busiest), its DataLoader workers' (``is_data_worker`` children of them) count, summed CPU and
    count asleep (``is_asleep``), whether one of its processes is stopped (``is_stopped``)."""
    return {
        "proc_cpu": busiest,
        "workers": workers,
        "worker_cpu": o.ratio(worker_cpu, workers),  # the mean per worker
        "worker_sleeping": o.ratio(asleep, workers),
        "stopped": stopped,
        "iowait": iowait,
    }


def is_data_worker(name: str) -> bool:
    return name in DATA_WORKER_NAMES


def is_asleep(state: str) -> bool:
    """S or D (a substring test: the process table's one-letter state)."""
    return state in "SD"


def is_stopped(state: str) -> bool:
    """Stopped (t/T): paused by a tracer (py-spy --native) or a signal."""
    return state in ("t", "T")


# A GPU gap: its samples read neither kernels nor copies (GpuSample.busy, NVML util counting copies)
# while it holds a process, for at least GAP_MIN_S
GAP_BUSY = 5.0
GAP_MIN_S = 0.5


Span = tuple[float, float]


def gap_quiet(busy: Any, alive: Any) -> Any:
    """A sample inside a gap (``busy`` NaN where unknown: not quiet), for one sample or arrays of them."""
    return (busy < GAP_BUSY) & alive


def track_gaps(
    quiet: Sequence[bool], time_of: Callable[[int], float], gap: Span | None
) -> tuple[list[tuple[int, Span]], Span | None]:
    """A GPU's gaps over its new samples in time order (whether each is ``gap_quiet``, and the time of
    sample i) from the gap open before them (None: none): (i, span) of each gap of at least
    GAP_MIN_S that sample i ends, and the gap open after the last. The one definition of tracking:
    live mode runs it on each GPU's samples since it last read its gaps (``Classifier.gaps``, once
    a paint tick), the report on a chunk's at once. It steps from one change of ``quiet`` to the
    next (``list.index`` scans a run in C) and asks for the times at those changes only, so it
    costs a call and the runs, not the samples; the samples inside a run change nothing (the
    report leaves them out)."""
    if gap is None and True not in quiet:  # (a GPU at work: the common case, one scan in C)
        return [], None
    out = []
    n, i = len(quiet), 0
    q = [*quiet, False, True]  # each search ends by n or n + 1: no exception to catch
    find = q.index
    while i < n:
        if q[i]:  # a run of quiet samples opens the gap or goes on with it
            j = find(False, i)
            gap = (time_of(i) if gap is None else gap[0], time_of(j - 1))
            if j == n:
                break
            i = j
        # sample i is not quiet: it ends the gap open before it
        if gap is not None and gap[1] - gap[0] >= GAP_MIN_S:
            out.append((i, gap))
        gap = None
        i = find(True, i)
    return out, gap


def mode_name(gpm: bool, stacked: bool) -> str:
    return ("GPM" if gpm else "NVML-only") + (" + stacks" if stacked else ", no stacks")


# The rules read a bin's features through a view (memtop.analysis.ruleview): one bin's Features as scalars (live
# mode, one bin at a time) or every bin's as arrays (the report), by the same expressions. So they are
# written with & | for and/or, ``v.no`` for not and ``v.where`` for a conditional, which both forms
# evaluate alike; a missing value (SM without GPM) reads as 0 beside a ``has_`` flag.
# Each rule: (label, description, predicate, sub-tag function or None). First match wins.
def _under(v: View) -> Bool:
    return v.graphics < 80


def _copy_engines(v: View) -> Bool:
    """GPM graphics near zero while NVML util (which counts copies) is high: the copy engines run."""
    return v.gpm & (v.graphics < 5) & (v.util0 >= 50)


def _workers_busy(v: View) -> Bool:
    """Without stacks, DataLoader workers at work are the input pipeline's only trace."""
    return (v.stack_n == 0) & (v.worker_cpu >= 15)


def _real_kernels(v: View, nvml_min: float = 1.0) -> Bool:
    """Kernels that do work, not a stream of tiny launches: SM busy for much of the graphics time;
    NVML-only has no SM, and tiny launches leave NVML memory util at 0 while real kernels move some
    (``nvml_min``, the bin's mean of whole percents)."""
    return v.where(v.has_sm, v.sm0 >= 0.4 * v.graphics, v.dram0 >= nvml_min)


# NVML's memory util counts the share of time memory was read or written, not bandwidth: matmul
# training reads 30-70 % (compile, Trainer, Lightning), a bandwidth-bound kernel 100 % (training corpus)
NVML_MEMORY_UTIL = 85


# A busy step's first bins while the GPU ramps up (resnet50 after its DataLoader's first batches:
# graphics 5 -> 39 -> 75 -> 99 %) look like the host and the GPU taking turns; a sync loop's graphics
# holds within a few points from bin to bin. Without a sync stack, a bin this far above the previous
# one is not a stall.
RAMP_RISE = 15.0


# Without stacks, PCIe traffic this large with little memory traffic is a transfer: every training bin
# of another label with graphics < 80 % moved <= 1 % of the link, pageable copies 3-39 %; compute that
# overlaps copies (38-44 % of the link) moves memory (NVML memory util 33-36 %)
NO_STACKS_PCIE = 0.1


SYNC_SHARE = 0.1  # the sync rule's share of main-thread stacks in a sync wait


def _sync_seen(v: View) -> Bool:
    """The stack window holds the main thread waiting in a sync: direct evidence of a stall."""
    return v.share("sync") >= SYNC_SHARE


def _main_awake(v: View) -> Bool:
    """The host's turn is Python at work: where stacks were sampled in the last second, the main thread
    was seen doing something, not only asleep. No sample there (no stacks, or none that recent) is no
    evidence either way. A resnet50 step's first second (heldout7_torch_s85, heldout_torch_s3: the GPU
    ramping 8 -> 79 -> 56 -> 100 %, the main thread asleep while workers fed it) read as a stall."""
    return v.awake


# Input-bound by behaviour (recorded from 2026-11-28: collectors/host.py): the GPU process's main thread
# mostly blocked, in a wait that hands it work made elsewhere (a lock or condition: queue.get, a future,
# a pool's results, a shared-memory semaphore; a pipe, a socket, poll/select; or caught running), while
# another part of the same job burns CPU: a child of any kind or name, or the process's other threads.
# A timed sleep, user input, disk I/O, waitpid or a wait in the driver is not being fed.
FED_WAITS = ("lock", "pipe", "socket", "poll", "")
# main thread CPU % below which it waits part of the time: a loop fed at 40 % GPU busy spends 40-60 % of
# its main thread launching work and in pageable .to() copies; a CUDA sync spins at 100 %
MAIN_WAITING = 80.0
FEEDER_MIN = 50.0  # CPU % of the busiest other part of the job


def _fed(v: View) -> Bool:
    waits = functools.reduce(lambda a, b: a | b, [v.wait == w for w in FED_WAITS])
    return (v.main_cpu >= 0) & (v.main_cpu < MAIN_WAITING) & (v.feeder_cpu >= FEEDER_MIN) & waits


def _idle_sub(v: View) -> Str:
    """What an idle GPU's process waits on (procfs.thread_wait's class: sleep, lock, pipe, socket,
    poll, io, tty, child, other), or "gone"; "" where not recorded or its main thread ran."""
    return v.where(v.alive, v.wait, "gone")


def _pageable(v: View) -> Str:
    return v.where((v.share("copy") >= 0.2) | (v.pcie_frac < 0.5), "pageable", "dma")


def _input_sub(v: View) -> Str:
    # num_workers=0: __getitem__ runs in the training process ("main"); saturated workers prepare
    # data, sleeping ones (S/D state, iowait) wait on storage
    busy = (v.worker_cpu >= 60) & (v.worker_sleeping < 0.5)
    return v.where(v.workers == 0, "main", v.where(busy, "prep", "fetch"))


# NVLink peak per direction by GPU name, first match. An unknown board gets the lowest listed
# (an under-estimate tags bandwidth-bound sooner; the label is comm either way).
NVLINK_PEAK_BPS = (
    ("B200", 900e9),
    ("B100", 900e9),
    ("H100 PCIe", 300e9),
    ("H100 NVL", 300e9),
    ("H200", 450e9),
    ("H100", 450e9),
    ("A100", 300e9),
)
NVLINK_DEFAULT_BPS = 300e9


@functools.cache  # a report asks once per bin, with a board name or two
def nvlink_peak(name: str) -> float:
    """Both directions' NVLink peak of a board, bytes/s."""
    return 2 * next((bps for key, bps in NVLINK_PEAK_BPS if key in name), NVLINK_DEFAULT_BPS)


# The collective's GPU pattern (from the field reports until labelled 2-GPU runs calibrate
# them: bench/comm_calibrate.py grids these on training recordings)
COMM_GRAPHICS_MIN = 80.0  # graphics engine busy with NCCL's kernels...
COMM_SM_MAX = 30.0  # ...on few SMs (a few CTAs per channel)
COMM_TENSOR_MAX = 5.0
COMM_DRAM_MAX = 10.0
COMM_PCIE_MAX = 0.5  # of the link: more is a transfer (the first transfer rule takes it)
COMM_NVLINK_BW = 0.5  # of NVLink's peak: a bandwidth-bound collective...
COMM_BW_SM_MAX = 50.0  # ...moves data with more SMs at work


def gpu_in_collective(v: View) -> Bool:
    """The GPU pattern of a collective. NCCL runs a few CTAs per channel, so the graphics engine reads
    busy while SM activity, tensor pipes and DRAM stay near zero (waiting for a peer); a
    bandwidth-bound collective moves NVLink near its peak with more SMs at work. Needs GPM (SM
    activity); power is shown in the evidence, not tested: its scale differs per board, and low SM,
    tensor and DRAM already mean low power. A 0.5 s bin that waits for only part of it carries the
    step's compute (tensor, DRAM) and stays `other`: missed, never a false comm, until recordings
    calibrate these limits."""
    gpu = (
        v.gpm
        & v.has_sm
        & (v.graphics >= COMM_GRAPHICS_MIN)
        & (v.tensor0 < COMM_TENSOR_MAX)
        & (v.pcie_frac < COMM_PCIE_MAX)
    )
    quiet_sms = (v.sm0 < COMM_SM_MAX) & (v.dram0 < COMM_DRAM_MAX)
    return gpu & v.where(v.nvlink_frac >= COMM_NVLINK_BW, v.sm0 < COMM_BW_SM_MAX, quiet_sms)


def collective(f: Features) -> bool:
    """One bin's features show a collective's GPU pattern (gpu_in_collective)."""
    return bool(gpu_in_collective(One(f)))


def _comm_confirmed(v: View) -> Bool:
    """A lone spinning kernel looks the same: stacks in a collective, or a peer GPU of the job that is
    not in one (the rank being waited for), or NVLink near its peak between the job's GPUs confirm it.
    With NCCL a work's .wait() does not block the CPU, so the main thread often waits at the next CUDA
    sync instead: then the peers are the evidence."""
    return (v.share("comm") >= 0.2) | v.has_away | (v.has_peers & (v.nvlink_frac >= COMM_NVLINK_BW))


def _comm_sub(v: View) -> Str:
    return v.where(v.nvlink_frac >= COMM_NVLINK_BW, "bandwidth", "wait")


RULES: tuple[tuple[str, str, Callable[[View], Bool], Callable[[View], Str] | None], ...] = (
    (
        "idle",
        "graphics < 5 %, PCIe < 2 % of link, process CPU < 20 %, no DataLoader workers being waited on "
        "(without stacks: none alive; workers asleep beside an idle GPU wait on storage), the main thread "
        "not waiting on another part of the job at work",
        lambda v: (
            (v.graphics < 5)
            & (v.pcie_frac < 0.02)
            & (v.proc_cpu < 20)
            & v.no((v.workers > 0) & ((v.share("data") >= 0.2) | (v.stack_n == 0)))
            & v.no(_fed(v))
        ),
        _idle_sub,
    ),
    (
        "transfer",
        "PCIe (both directions) >= 50 % of link, or copy engines busy (NVML util >= 50 %, graphics < 5 %), SM < 30 %",
        lambda v: (
            ((v.pcie_frac >= 0.5) | _copy_engines(v))
            & (v.sm0 < 30)
            & (v.gpm | (v.dram0 < 10))  # NVML-only: kernels beside the copies move memory
        ),
        _pageable,
    ),
    (
        "transfer",
        "GPM: PCIe >= 1 GB/s while graphics < 5 % (the GPU only copies)",
        lambda v: v.gpm & (v.pcie_bps >= 1e9) & (v.graphics < 5),
        lambda v: "pageable",
    ),
    # after the two transfer rules that need no stacks (PCIe >= 50 % of link, copy engines alone) and
    # before the rest: a rank waiting in NCCL moves 7-30 % of PCIe (measured on 2 H200s, FSDP) while its
    # main thread sits at a sync, which the pageable-copy rules below would take. comm needs graphics
    # >= 80 % and SM < 30 %, so compute (SM >= 70 %) never meets it; an all-reduce overlapped with
    # compute stays compute
    (
        "comm",
        "GPM: graphics >= 80 % with SM < 30 %, tensor < 5 %, DRAM < 10 % (or NVLink >= 50 % of peak and "
        "SM < 50 %), confirmed by collective stacks >= 20 %, a peer GPU of the job not in a collective, "
        "or NVLink >= 50 % of peak with peers",
        lambda v: gpu_in_collective(v) & _comm_confirmed(v),
        _comm_sub,
    ),
    (
        "transfer",
        "PCIe >= 1 GB/s with SM < 30 % and copy or wait stacks >= 20 % (pageable/staged)",
        lambda v: (
            (v.pcie_bps >= 1e9)
            & (v.sm0 < 30)
            & (v.share("copy") + v.share("sync") >= 0.2)
            & (v.gpm | (v.dram0 < 10))
        ),
        lambda v: "pageable",
    ),
    (
        "transfer",
        "no stacks: PCIe (both directions) >= 10 % of link with SM < 30 % and memory < 10 %: without GPM or "
        "stacks a pageable copy is only its PCIe traffic (NVML util counts the copy engines, up to 82 %)",
        lambda v: (v.stack_n == 0) & (v.pcie_frac >= NO_STACKS_PCIE) & (v.sm0 < 30) & (v.dram0 < 10),
        lambda v: "pageable",
    ),
    (
        "transfer",
        "no stacks: PCIe >= 1 GB/s with graphics < 80 %, SM < 30 % and memory < 10 %, the process's CPU in "
        "the copy (>= 50 %): a pageable copy at a low link rate (a 1 GiB .cpu() moves 1.3 GB/s)",
        lambda v: (
            (v.stack_n == 0)
            & (v.pcie_bps >= 1e9)
            & _under(v)
            & (v.sm0 < 30)
            & (v.dram0 < 10)
            & (v.proc_cpu >= 50)
        ),
        lambda v: "pageable",
    ),
    (
        "memory",
        "DRAM >= 60 % (NVML-only: memory util >= 85 %) with graphics >= 80 %",
        lambda v: (v.dram0 >= v.where(v.gpm, 60, NVML_MEMORY_UTIL)) & (v.graphics >= 80),
        None,
    ),
    (
        "compute",
        "graphics >= 80 % and SM >= 70 %",
        lambda v: (v.graphics >= 80) & (v.no(v.has_sm) | (v.sm0 >= 70)),
        None,
    ),
    (
        "input",
        "GPU under-used, input-pipeline stacks >= 20 %, and workers alive or loading in-process",
        lambda v: (
            _under(v)
            & (v.share("data") >= 0.2)
            & v.recent_has("data")
            & ((v.workers > 0) | (v.proc_cpu >= 50))
        ),
        _input_sub,
    ),
    (
        "input",
        "no stacks: GPU under-used while DataLoader workers are busy (CPU >= 15 %) or the main process waits",
        lambda v: (v.stack_n == 0) & _under(v) & (v.workers > 0) & (_workers_busy(v) | (v.proc_cpu < 50)),
        _input_sub,
    ),
    (
        "input",
        f"GPU under-used, its process's main thread waits (CPU < {MAIN_WAITING:.0f} %, on a lock, queue, pipe, "
        f"socket or poll) while another part of the job (a child of any kind, or its other threads) burns "
        f"CPU >= {FEEDER_MIN:.0f} %",
        lambda v: _under(v) & _fed(v),
        lambda v: "producer",
    ),
    (
        "sync",
        "graphics 15-80 % with real kernels (SM >= 0.4 x graphics) and sync stacks >= 10 %",
        lambda v: (v.graphics >= 15) & (v.graphics < 80) & _real_kernels(v) & _sync_seen(v),
        None,
    ),
    (
        "sync",
        "graphics 22-80 % with real kernels (SM >= 0.4 x graphics; NVML-only: memory util >= 1 %), "
        f"steady (< {RAMP_RISE:.0f} points above the previous bin), process CPU >= 50 %, the main thread not "
        "only asleep in the last second's stacks: the host and the GPU take turns, whether or not a stack "
        "sample caught the wait",
        lambda v: (
            (v.graphics >= 22)
            & (v.graphics < 80)
            & (v.rise < RAMP_RISE)
            & _real_kernels(v)
            & (v.proc_cpu >= 50)
            & _main_awake(v)
        ),
        None,
    ),
    (
        "cpu",
        "GPU under-used, main thread busy (CPU >= 50 %)",
        lambda v: _under(v) & (v.proc_cpu >= 50),
        lambda v: v.where(v.has_sm & (v.graphics >= 10) & (v.graphics >= 2 * v.sm0 + 10), "launch", "python"),
    ),
)


# Exit thresholds (hysteresis): the current label holds against the labels listed while its exit
# condition holds, though its entry rule no longer fires. Compute stays down to graphics 75 % /
# SM 60 %, so a dip under the 80 % entry (79.5 % seen on the H100 under a CPU hog) flips nothing;
# at 70 % a sync stall that keeps the GPU 70-71 % busy (seed 7) stayed compute by a hair. Memory
# holds the same way (a bandwidth-bound copy loop dipped to 79 % for one bin, seed 6). A sync
# stall keeps its label down to graphics 10 % with real kernels while a sync wait was seen in the
# last SYNC_HOLD_S or the process is busy (GPM reads of a 27 % stall dipped to 13-21 % for seconds,
# seed 8; the entry needs 22 % without a sync stack). Without GPM it holds while NVML memory util is
# above 0 at all: small kernels of a sync loop read 0-1 % (a bin's mean 0.6 flipped it to CPU-bound
# and back), a launch or Python loop reads 0. With GPM, NVML util of 10 % or more also holds it: GPM
# graphics of a 27 % stall read 9 % for one bin while NVML util stayed at 27 % (seed 8, bins offset).
UNDER_USED = {"sync", "cpu", "input", "other"}

SYNC_HOLD_S = STACK_WINDOW_S
STICKY: dict[str, tuple[set[str], str, Callable[[View], Bool]]] = {
    "compute": (
        UNDER_USED,
        "graphics >= 75 %, SM >= 60 %; or GPM with NVML util >= 95 % (kernels or copies ran all the time)",
        lambda v: ((v.graphics >= 75) & (v.no(v.has_sm) | (v.sm0 >= 60))) | (v.gpm & (v.util0 >= 95)),
    ),
    "memory": (
        UNDER_USED,
        "graphics >= 75 %, DRAM >= 55 % (NVML-only: memory util >= 80 %)",
        lambda v: (v.graphics >= 75) & (v.dram0 >= v.where(v.gpm, 55, NVML_MEMORY_UTIL - 5)),
    ),
    "sync": (
        {"cpu"},
        f"graphics 10-80 % (GPM: or NVML util >= 10 %) with real kernels (NVML-only: memory util > 0), and a "
        f"sync wait within {SYNC_HOLD_S:.0f} s or process CPU >= 50 %",
        lambda v: (
            ((v.graphics >= 10) | (v.gpm & (v.util0 >= 10)))
            & (v.graphics < 80)
            & _real_kernels(v, nvml_min=0.1)
            & ((v.sync_age <= SYNC_HOLD_S) | (v.proc_cpu >= 50))
        ),
    ),
}


# One-bin excursions (hysteresis over bins, after the rules' exit thresholds). A bin holds about one
# host sample (0.5 s): a process's CPU is one reading over that span, so a process paused for part of
# it (in the held-out runs: py-spy --native dumps, 0.06-0.85 s each; bench/RESULTS.md) or a loop that
# waits now and then reads 30-50 % or 0 % for a bin while its phase goes on. Such a bin matches no
# rule, or the idle rule:
# - "no rule matched" keeps the current label (shown settling) for up to OTHER_HOLD_S; it takes
#   the bin after that to show "unclassified" (it was one bin; "other" is never a phase's truth);
# - a busy label gives way to idle only after IDLE_CONFIRM bins in a row, unless the GPU is quiet
#   beyond doubt (`quiet`): its process is gone, or it did nothing at all. The GPU is read 10 times
#   a bin and does not jitter so; the process's CPU, which lags a bin at a phase's end, is not asked;
# - a bin in which the GPU's process read stopped (`Features.stopped`: py-spy --native pauses it for
#   0.06-0.85 s; heldout5/6 had every flip in such a bin, the GPU drained and the CPU reading cut)
#   holds the label for up to STOPPED_HOLD_S: its readings are not the workload's. A process stopped
#   for longer (SIGSTOP, a debugger) is then shown for what the GPU does;
# - compute and memory both say the GPU is saturated; the kernel mix decides which, and a step whose
#   mix lies near the line (resnet50 reads DRAM 53-67 %) crosses it for a bin: a change between the
#   two needs MIX_CONFIRM bins in a row.
OTHER_HOLD_S = 1.0
IDLE_CONFIRM = 2
STOPPED_HOLD_S = 1.0
MIX_CONFIRM = 2
SATURATED = ("compute", "memory")


def quiet_view(v: View) -> Bool:
    return v.no(v.alive) | ((v.graphics < 1) & (v.util0 < 1) & (v.pcie_frac < 0.005))


def quiet(f: Features) -> bool:
    """Idle beyond one reading's doubt: no process left on the GPU, or no kernel, copy or PCIe traffic
    across the bin's GPU samples (10 a second; a tiny step loop still reads NVML util above 0)."""
    return bool(quiet_view(One(f)))


def confirm_bins(raw: str, stable: str, stopped: bool, is_quiet: bool, confirm: int, bin_s: float) -> int:
    """Bins in a row the candidate ``raw`` must win to replace ``stable`` (one-bin excursions above),
    its process read stopped or not, the bin quiet or not (``quiet``)."""
    if stopped:
        return confirm + math.ceil(STOPPED_HOLD_S / bin_s - 1e-9)
    if raw == "other":
        return confirm + math.ceil(OTHER_HOLD_S / bin_s - 1e-9)
    if raw == "idle" and stable not in ("", "idle", "other") and not is_quiet:
        return max(confirm, IDLE_CONFIRM)
    if raw in SATURATED and stable in SATURATED:
        return max(confirm, MIX_CONFIRM)
    return confirm


# Rule ids: RULES' indices, then "no rule matched", then each sticky label's exit threshold
NO_RULE = len(RULES)
EXIT = {lab: NO_RULE + 1 + k for k, lab in enumerate(STICKY)}
RULE_LABEL = tuple(r[0] for r in RULES) + ("other",) + tuple(STICKY)
RULE_TEXT = (
    tuple(r[1] for r in RULES)
    + ("no rule matched",)
    + tuple(f"{lab} exit threshold ({why})" for lab, (_, why, _) in STICKY.items())
)


def first_rule(v: View) -> int:
    """The id of the first rule one bin's view matches (NO_RULE: none)."""
    return next((k for k, r in enumerate(RULES) if r[2](v)), NO_RULE)


def rule_sub(rid: int, v: View) -> Str:
    """The sub-tag rule ``rid`` gives (its function's, over a view of one bin or of many)."""
    sub = RULES[rid][3] if rid < NO_RULE else None
    return sub(v) if sub else ""


def settle(
    rid: int,
    state: tuple[str, str, int],
    warm: bool,
    keeps: Callable[[str], bool],
    stopped: bool,
    is_quiet: bool,
    confirm: int,
    bin_s: float,
) -> tuple[int, tuple[str, str, int]]:
    """One bin's hysteresis: (the rule id that stands, the new (stable, candidate, run)) from the first
    rule that matched (``rid``) and the state before. ``warm``: the bin is past the warm-up;
    ``keeps(label)``: that label's exit threshold holds this bin. The Classifier calls it bin by bin
    live; memtop.analysis.binscan over the rule ids of a whole range: the one definition of the hysteresis."""
    stable, cand, run = state
    raw = RULE_LABEL[rid]
    if stable in STICKY and raw in STICKY[stable][0] and keeps(stable):
        rid, raw = EXIT[stable], stable
    if not warm:
        return rid, ("", raw, 1)
    run = run + 1 if raw == cand else 1
    if not stable or (raw != stable and run >= confirm_bins(raw, stable, stopped, is_quiet, confirm, bin_s)):
        stable = raw
    return rid, (stable, raw, run)


def _confidence(gpm: bool, stacked: bool, settled: bool) -> float:
    conf = 0.9 if gpm else 0.65
    if not stacked:
        conf *= 0.8
    if not settled:  # the rule's label is not (yet) the one shown
        conf *= 0.6
    return round(conf, 2)


CONFIDENCE = {k: _confidence(*k) for k in itertools.product((False, True), repeat=3)}


_T = TypeVar("_T", float, "np.ndarray")

# live mode tracks gaps when it reads them (a paint tick); a classifier not read tracks them every
# so many Frames (what it keeps for them: each Frame's GPU samples, the window's entries popped)
TRACK_FRAMES = 32


def bin_start(t: _T, bin_s: float) -> _T:
    """The start of the bin a time falls in, or of each time of an array: the same float both ways
    (numpy's float floor division is CPython's algorithm: fmod, then the same corrections). Live
    mode, the report's columns, replay's phase runs and the report's stacks all bin by this."""
    return (t // bin_s) * bin_s


@dataclass
class _Bin:
    t: float
    gpu_vals: dict[int, list] = field(default_factory=dict)


class Classifier:
    """Feed Frames in time order; read ``labels`` (per GPU) and ``gaps``.

    ``confirm``: bins a new label must win in a row before it replaces the current one; "no rule
    matched" (other) waits OTHER_HOLD_S more, and idle after a busy label needs IDLE_CONFIRM bins
    unless quiet (`confirm_bins`). One bin was enough for the other labels on the training corpus:
    the rules' exit thresholds (STICKY) are the hysteresis, and two bins cost every phase half a
    second of latency.
    """

    def __init__(
        self,
        bin_s: float = 0.5,
        confirm: int = 1,
        warmup_bins: int = 2,
        use_stacks: bool = True,
        max_bins: int | None = None,
    ):
        self.bin_s = bin_s
        self.confirm = confirm
        self.warmup_bins = warmup_bins
        self.use_stacks = use_stacks
        self.max_bins = max_bins  # live runs keep a bounded history; reports keep all
        self.labels: dict[int, list[Label]] = {}
        self.features: dict[int, list[Features]] = {}
        self._gaps: list[Gap] = []
        self._bin: _Bin | None = None
        self._last: Frame | None = None
        # (sample, (class, file:line, code, owns_gil) of its main thread), computed once per sample
        self._stacks: deque[tuple[StackSample, tuple[str, str, str, bool] | None]] = deque()
        self._seen_stack: set[tuple[int, float]] = set()
        self._state: dict[int, tuple[str, str, int]] = {}  # gpu -> (stable, candidate, run)
        self._nbins: dict[int, int] = {}
        self._gap: dict[int, Span | None] = {}  # each GPU's gap open after its samples tracked so far
        # each GPU's new samples not yet tracked for gaps (after the one tracked last), per Frame
        # since then its GPU samples and the window as it left it (entries popped before it,
        # entries then in the deque), the entries popped since then: for _track
        self._fresh: dict[int, list[GpuSample]] = {}
        self._frames: list[tuple[tuple[GpuSample, ...], int, int]] = []
        self._gone: list[tuple[StackSample, tuple[str, str, str, bool] | None]] = []
        self.jobs: dict[int, str] = {}  # GPU -> job key, as of the newest bin
        self._graphics: dict[int, float] = {}  # each GPU's previous bin's graphics (Features.rise)

    def feed_all(self, frames: Iterable[Frame]) -> Classifier:
        for f in frames:
            self.feed(f)
        self.flush()
        return self

    def feed(self, frame: Frame) -> None:
        b = self.bin_s
        start = bin_start(frame.t, b)
        if self._bin is not None and start > self._bin.t:
            self._close()
            self._bin = None
        if self._bin is None:
            self._bin = _Bin(start)
        # readers hand on the same tuple until a new sample arrives
        new_stacks = () if self._last is not None and frame.stacks is self._last.stacks else frame.stacks
        for s in new_stacks:
            key = (s.pid, s.t)
            if key not in self._seen_stack and s.threads:
                self._seen_stack.add(key)
                self._stacks.append((s, stack_info(s)))
        while self._stacks and self._stacks[0][0].t < frame.t - STACK_WINDOW_S:
            old = self._stacks.popleft()
            self._seen_stack.discard((old[0].pid, old[0].t))
            self._gone.append(old)
        self._frames.append((frame.gpus, len(self._gone), len(self._stacks)))
        fresh, bins = self._fresh, self._bin.gpu_vals
        for g in frame.gpus:
            if g.mode == "lost":
                continue
            vals = bins.get(g.index)
            if vals is None:
                bins[g.index] = [g]
            elif vals[-1].t != g.t:
                vals.append(g)
            got = fresh.get(g.index)
            if got is None:
                fresh[g.index] = [g]
            elif got[-1] is not g:  # a sample a Frame repeats changes no gap
                got.append(g)
        self._last = frame
        if len(self._frames) >= TRACK_FRAMES:
            self._track()

    def flush(self) -> None:
        if self._bin is not None:
            self._close()
            self._bin = None

    # -- gaps ----------------------------------------------------------------------------
    @property
    def gaps(self) -> list[Gap]:
        """The GPU gaps ended so far, in the order of the Frames that ended them: tracked up to the
        newest Frame as they are read (live mode reads them once a paint tick), else every
        TRACK_FRAMES Frames."""
        self._track()
        return self._gaps

    def _track(self) -> None:
        """Each GPU's gaps over its new samples since the last call (``track_gaps``: a call a GPU,
        not one a sample); a gap a sample ends takes its stack from the window as the Frame that
        first held the sample left it, so the gaps are the ones a sample at a time found, in the
        same order. (A GPU's first sample may be the one the call before ended with, held on:
        tracked again, it changes nothing, as a quiet sample again extends a gap to its own time
        and one that is not finds the gap already ended.)"""
        ended = []
        for gpu, got in self._fresh.items():
            # NVML util counts copies too: a gap is neither kernels nor copies running
            quiet = [gap_quiet(math.nan if (b := g.busy) is None else b, bool(g.processes)) for g in got]
            ends, self._gap[gpu] = track_gaps(quiet, [g.t for g in got].__getitem__, self._gap.get(gpu))
            if ends:
                ended += [(*self._held(got[i]), span) for i, span in ends]
            del got[:-1]  # the newest: a later Frame that holds it on holds no new sample
        if ended:
            window = [*self._gone, *self._stacks]
            for k, j, span in sorted(ended):  # in the order of the Frames, then of their GPUs
                _, gone, n = self._frames[k]
                self._gaps.append(gap_event(self._frames[k][0][j].index, span, window[gone : gone + n]))
        self._frames.clear()
        self._gone.clear()

    def _held(self, sample: GpuSample) -> tuple[int, int]:
        """(Frame since the last call, place among its GPUs) of the first Frame to hold ``sample``
        (a gap's end: rare)."""
        return next(
            (k, j) for k, (gpus, _, _) in enumerate(self._frames) for j, g in enumerate(gpus) if g is sample
        )

    # -- bins ----------------------------------------------------------------------------
    def _close(self) -> None:
        assert self._bin is not None and self._last is not None
        last = self._last
        host = last.host
        iowait, procs = (0.0, ()) if host is None else (host.iowait_pct, host.procs)
        found = {}
        for gpu, vals in self._bin.gpu_vals.items():
            f = self._features(gpu, self._bin.t, vals, last.t, iowait, procs)
            if f is not None:
                found[gpu] = f
        self.emit(found, last)

    def emit(self, found: dict[int, Features], last: Frame) -> None:
        """Label one bin's features (per GPU, made for this bin: their peers are set in them) with
        ``last`` the bin's last Frame (its host and GPU processes group the GPUs into jobs)."""
        self.jobs = job_groups(last) if len(found) > 1 else {}  # one GPU has no peers
        if self.jobs:
            _with_peers(found, self.jobs)
        for gpu, f in found.items():
            feats = self.features.setdefault(gpu, [])
            feats.append(f)
            self._label(f)
            if self.max_bins and len(feats) > self.max_bins:
                del feats[: len(feats) - self.max_bins]
                labs = self.labels[gpu]
                del labs[: len(labs) - self.max_bins]

    def _features(
        self, gpu: int, t: float, vals: list, now: float, iowait: float, procs: Sequence
    ) -> Features | None:
        """One GPU's features of the bin starting at ``t`` from its samples ``vals`` (their means, the
        newest one's link, board name and processes) and the host at the bin's last Frame (``now``):
        its iowait and processes (objects with pid, cpu_pct, worker_of, name, state)."""
        graphics = _mean([v.engine for v in vals])
        if graphics is None:
            return None
        # the bin's other means, from one pass over its samples
        means = dict(zip(BIN_MEANS, map(_mean, zip(*map(_BIN_MEANS, vals), strict=True)), strict=True))
        gpm = all(v.mode == "gpm" for v in vals)
        link, name, pids = vals[-1].link, vals[-1].name, {p.pid for p in vals[-1].processes}
        prev = self._graphics.get(gpu, graphics)
        self._graphics[gpu] = graphics
        mains = [p for p in procs if p.pid in pids]
        main = max(mains, key=attrgetter("cpu_pct"), default=None)  # the busiest (the first of equals)
        wk = [p for p in procs if p.worker_of in pids and is_data_worker(p.name)]
        shares, gil, n, top, tops, recent, sync_age = self._stack_shares(pids, now)
        link_bps = (link.bytes_per_s if link else 0.0) or 0.0
        return Features(
            t=t,
            gpu=gpu,
            **gpu_figures(One, gpm, graphics, prev, means, link_bps, nvlink_peak(name)),
            **proc_figures(
                One,
                max((p.cpu_pct for p in mains), default=0.0),
                sum(p.cpu_pct for p in wk),
                len(wk),
                sum(is_asleep(p.state) for p in wk),
                any(is_stopped(p.state) for p in mains),
                iowait,
            ),
            shares=shares,
            gil=gil,
            stack_n=n,
            top=top,
            tops=tops,
            recent=recent,
            sync_age=sync_age,
            alive=bool(pids),
            **({k: getattr(main, k) for k in MAIN_FIELDS} if main else {}),
        )

    def _stack_shares(self, pids: set[int], now: float) -> tuple:
        if not self.use_stacks:
            return {}, 0.0, 0, None, {}, frozenset(), math.inf
        # one pass over the window (a report makes 7,200 bins an hour); sums in the window's order
        n = 0
        c: dict[str, float] = {}  # weights are floats, which typeshed's Counter does not admit
        leaves: dict[tuple[str, str, str], float] = {}
        gil = total = 0.0
        recent: set[str] = set()
        sync_age = math.inf
        since = now - RECENT_S
        exp = math.exp
        for s, info in self._stacks:
            if info is None or s.pid not in pids:
                continue
            klass, where_, code, owns_gil = info
            w = exp(-(now - s.t) / STACK_TAU_S)
            n += 1
            total += w  # one addition at a time (sum() of floats is compensated from Python 3.12)
            c[klass] = c.get(klass, 0.0) + w
            leaf = (klass, where_, code)
            leaves[leaf] = leaves.get(leaf, 0.0) + w
            gil += w * owns_gil
            if s.t >= since:
                recent.add(klass)
            if klass == "sync" and now - s.t < sync_age:
                sync_age = now - s.t
        if not n:
            return {}, 0.0, 0, None, {}, frozenset(), math.inf
        # the top stack of each class; the label picks the one that explains it (stable, as most_common)
        ranked = sorted(leaves, key=leaves.__getitem__, reverse=True)
        tops: dict[str, tuple[str, str, str]] = {}
        for k in ranked:
            tops.setdefault(k[0], k)
        busy = next((k for k in ranked if k[0] != "idle"), ranked[0])
        shares = {k: v / total for k, v in c.items()}
        return shares, gil / total, n, busy, tops, frozenset(recent), sync_age

    def _label(self, f: Features) -> None:
        v = One(f)
        nb = self._nbins.get(f.gpu, 0) + 1
        self._nbins[f.gpu] = nb
        rid, state = settle(
            first_rule(v),
            self._state.get(f.gpu, ("", "", 0)),
            nb > self.warmup_bins,
            lambda lab: bool(STICKY[lab][2](v)),
            f.stopped,
            bool(quiet_view(v)),
            self.confirm,
            self.bin_s,
        )
        self._state[f.gpu] = state
        self.labels.setdefault(f.gpu, []).append(label_of(f, rid, state[0], lambda: str(rule_sub(rid, v))))


def label_of(f: Features, rid: int, stable: str, sub: Callable[[], str]) -> Label:
    """A bin's Label (live mode's, and a report's LabelSeq's): its features, the rule id that stands
    after the hysteresis, the stable label ("" in the warm-up) and the rule's sub-tag, asked for only
    where the label shown is the rule's."""
    raw = RULE_LABEL[rid]
    return Label(
        f.t,
        f.gpu,
        raw,
        stable or "warmup",
        CONFIDENCE[f.gpm, f.stack_n > 0, raw == stable],
        RULE_TEXT[rid],
        f,
        sub() if stable == raw else "",
    )


def gap_event(gpu: int, span: tuple[float, float], window: Iterable[tuple[StackSample, tuple | None]]) -> Gap:
    """A gap on ``gpu`` over ``span``, with the middle one of the stack window's samples taken in it."""
    inside = [info for s, info in window if span[0] <= s.t <= span[1] + 0.5 and info is not None]
    top = None
    if inside:
        klass, w, code, _ = inside[len(inside) // 2]
        top = StackTop(klass, w, code)
    return Gap(gpu, span[0], span[1], top)


def stack_info(s: StackSample) -> tuple[str, str, str, bool] | None:
    """(class, file:line, code, owns_gil) of a sample's main thread, as the stack window holds it."""
    m = s.main
    return None if m is None else (m.klass, *site(m.frames), m.owns_gil)


def _with_peers(found: dict[int, Features], jobs: dict[int, str]) -> None:
    """Give each GPU's features the other GPUs of its job, and which of them are not in a collective.
    In place: ``found`` are the bin's Features ``Classifier._close`` has just made, read by nothing
    yet (``dataclasses.replace`` made each again: 30-50 us a GPU a bin on the loaded 2-core VM,
    about a tenth of the classifier's time on 8 GPUs)."""
    gs = sorted(found)
    got = peers(gs, [jobs.get(g) for g in gs], [not collective(found[g]) for g in gs])
    for g, (mine, away) in zip(gs, got, strict=True):
        if mine:
            object.__setattr__(found[g], "peers", mine)
            object.__setattr__(found[g], "peers_elsewhere", away)


_BIN_MEANS = attrgetter(*BIN_MEANS)


def _mean(xs: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (in order: the same float every time)."""
    got = [x for x in xs if x is not None]
    return sum(got) / len(got) if got else None


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def classify(frames: Iterable[Frame], **kw) -> Classifier:
    return Classifier(**kw).feed_all(frames)
