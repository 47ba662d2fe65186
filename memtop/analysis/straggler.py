"""Stragglers among the GPUs of one job on this node: the rank the others wait for.

In a synchronous job (DDP, FSDP) every rank meets the others in each collective, so one slow rank
shows as its peers' GPUs in `comm` while its own GPU computes, loads data or sits under host work.
Pure functions over Frames and per-GPU labels; the pipeline turns a finding into that GPU's verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memtop.analysis.jobs import peers
from memtop.analysis.labelcols import LabelCols, codes, columns
from memtop.analysis.phases import LABELS
from memtop.analysis.ruleview import Num
from memtop.core.timefmt import length

if TYPE_CHECKING:
    import numpy as np

    from memtop.analysis.phases import Label
else:
    from memtop.lazy import Lazy

    np = Lazy("numpy")  # (the report's; live mode never reads it)

# a straggler is judged over this much of the newest labels: 2 s gave straggler F1 0.965 on the
# training 2-GPU runs (1 s 0.998 but two bins of evidence; 10 s 0.45: it lags an 8 s phase)
WINDOW_S = 2.0
PEER_COMM_MIN = 0.5  # its peers spend at least this share of the window in comm...
OWN_COMM_MAX = 0.2  # ...while it spends at most this share there
OWN_WORK_MIN = 0.5  # ...and at least this share in one phase of its own work
# phases of a rank doing its own work: every label but idle (a finished or hung rank is another
# story), comm (waiting for the others) and other (no rule matched), so a new phase counts as work
WORK = tuple(lab for lab in LABELS if lab not in ("idle", "comm", "other"))


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
    c = Counter(lab.label for lab in labels if lab.t > since and lab.label != "warmup")
    n = c.total()
    return {k: v / n for k, v in c.items()} if n else {}


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
    gs = sorted(shares)
    out = []
    for g, others in zip(gs, _peers(gs, [jobs[g] if shares[g] else None for g in gs]), strict=True):
        if not others:
            continue
        own = shares[g]
        peer_comm = sum(shares[p].get("comm", 0.0) for p in others) / len(others)
        phase, share = max(
            ((k, v) for k, v in own.items() if k in WORK), key=lambda kv: kv[1], default=("", 0.0)
        )
        if late(share, own.get("comm", 0.0), peer_comm):
            out.append(Straggler(g, phase, share, others, peer_comm, window_s))
    return out


def late(share: Num, own_comm: Num, peer_comm: Num) -> Num:
    """The judgement, of one instant (floats: live mode) or of many (arrays: the report): a GPU's
    own work phase holds ``share`` of the window and comm ``own_comm`` while its peers wait in comm
    ``peer_comm`` of it on average."""
    return (share >= OWN_WORK_MIN) & (own_comm <= OWN_COMM_MAX) & (peer_comm >= PEER_COMM_MIN)


def _peers(gs: list[int], job: list[str | None]) -> list[tuple[int, ...]]:
    """Each GPU's others of its job (jobs.peers: the report's peers and live mode's are the same)."""
    return [ps for ps, _ in peers(gs, job, [False] * len(gs))]


@dataclass(frozen=True)
class Episode:
    """A stretch of bins in which one GPU was flagged as its job's straggler."""

    gpu: int
    t0: float
    t1: float  # the end of its last flagged bin
    phase: str  # its own work phase while flagged
    peers: tuple[int, ...]


def episodes(labels: Mapping[int, Sequence[Label]], jobs: Mapping[int, str], bin_s: float) -> list[Episode]:
    """Every straggler flag of a recording, judged at each bin on the labels as they stood then (as
    the live pipeline flags), merged into episodes per GPU: a gap of one bin, or another own phase
    (the rank late for another reason), splits them.

    At each instant any GPU of a job has a bin, each GPU's labels newer than the instant's end -
    WINDOW_S are counted as stragglers() counts them and judged as _judge() judges them, by columns
    over all instants at once (an 8-hour recording has 57,600 bins a GPU)."""
    if len(set(jobs.values())) == len(jobs):  # no job spans two GPUs
        return []
    cols = {g: columns(ls) for g, ls in labels.items() if g in jobs}
    at = np.unique(np.concatenate([np.empty(0), *(c.t for c in cols.values())]))
    win = {g: _Window(g, c, at, WINDOW_S) for g, c in cols.items()}
    gs = sorted(win)
    out = []
    for g, ps in zip(gs, _peers(gs, [jobs[g] for g in gs]), strict=True):
        if not ps:
            continue
        own, others = win[g], [win[p] for p in ps]
        peer = np.array([o.active for o in others], dtype=bool).reshape(len(others), len(at))
        n_peers = peer.sum(axis=0)
        peer_sum = np.zeros(len(at))  # summed in _judge's order: adding 0.0 changes no float
        for o in others:
            peer_sum += np.where(o.active, o.comm, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            peer_comm = peer_sum / n_peers
        # (share 0 where it has no bins; peer_comm NaN where no peer has)
        (at_i,) = np.nonzero((n_peers > 0) & late(own.share, own.comm, peer_comm))
        if not len(at_i):
            continue
        t, phase = at[at_i], own.phase[at_i]
        # a flag ends its episode where the next is over a bin later or in another phase
        (ends,) = np.nonzero(np.append((np.diff(t) > 1.5 * bin_s) | (np.diff(phase) != 0), True))
        starts = np.append(0, ends[:-1] + 1)
        ts, names, on = t.tolist(), own.names, peer[:, at_i].T.tolist()
        for a, b, ph in zip(starts.tolist(), ends.tolist(), phase[ends].tolist(), strict=True):
            waited = tuple(o.gpu for o, x in zip(others, on[b], strict=True) if x)
            out.append(Episode(g, ts[a], ts[b] + bin_s, names[ph], waited))
    return out  # (by GPU, each GPU's in time order)


class _Window:
    """One GPU's labels counted over the window_s up to each instant of ``at``, as stragglers()
    counts them (labels with t > instant - window_s), as the shares _judge() weighs."""

    def __init__(self, gpu: int, cols: LabelCols, at: np.ndarray, window_s: float):
        self.gpu = gpu
        order = np.argsort(cols.t, kind="stable")
        t, label = cols.t[order], cols.label[order]
        hi = np.searchsorted(t, at, side="right")
        lo = np.searchsorted(t, at - window_s, side="right")
        counts: dict[str, np.ndarray] = {}
        first: dict[str, float] = {}
        code, names = codes(label)
        for j, name in enumerate(names):
            seen = code == j
            first[name] = float(t[np.argmax(seen)])
            cum = np.concatenate(([0], np.cumsum(seen)))
            counts[name] = cum[hi] - cum[lo]
        zero = np.zeros(len(at), dtype=np.int64)
        n = hi - lo - counts.get("warmup", zero)
        self.active = n > 0  # it has labels to judge
        safe = np.maximum(n, 1)
        self.comm = counts.get("comm", zero) / safe
        # its largest work phase; a tie goes to the phase it had first, as a Counter's key order
        # breaks it (a sweep meets labels by time, then name)
        work = sorted((k for k in counts if k in WORK), key=lambda k: (first[k], k))
        self.names = ["", *work]
        best = np.stack([zero, *(counts[k] for k in work)])
        self.phase = np.argmax(best, axis=0)  # 0: no work in the window
        self.share = best.max(axis=0) / safe
