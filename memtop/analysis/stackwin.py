"""The classifier's stack-window features (``Classifier._stack_shares``) of every bin at once.

The column scan (memtop.analysis.colscan) knows the stack window's entries in the order the classifier's deque
takes them and each bin's last Frame and GPU processes; from those this module gives, per bin, the
7-tuple ``_stack_shares`` returns: the same weights (``exp`` of the same IEEE arguments, numpy's over
the array where live mode takes ``math.exp`` of each) summed one at a time in window order, the leaves
ranked as ``sorted(..., reverse=True)`` ranks them (weight, then first appearance). numpy's exp is the
C library's (math.exp's) on a CPU without AVX-512, so the floats are live mode's; where numpy has its
own AVX-512 exp a weight may differ from math.exp's in its last bit. An 8-hour report has 57,529 bins
of ~11 samples each, which the per-bin Python walks one sample at a time (1.4 CPU-s); here the (bin,
sample) pairs are arrays (0.15 CPU-s, half of it the exps a call each until 2026-11-28; bench/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memtop.analysis.phases import RECENT_S, STACK_TAU_S, STACK_WINDOW_S

Info = tuple[str, str, str, bool]
Leaf = tuple[str, str, str]


@dataclass(frozen=True, eq=False)
class StackCols:
    """Per bin (rows) and stack class (columns, ``classes``) what ``_stack_shares`` returns."""

    classes: tuple[str, ...]
    leaves: tuple[Leaf, ...]  # the (class, file:line, code) that ``top`` and ``busy`` index
    n: np.ndarray  # int64: samples counted
    gil: np.ndarray  # float64: share of their weight holding the GIL (0.0 without samples)
    sync_age: np.ndarray  # float64: seconds since the newest sync sample (inf: none)
    shares: np.ndarray  # float64 [bins, classes]: the class's share of the weight, 0.0 where absent
    first: np.ndarray  # int32 [bins, classes]: the class's first place in the window (-1: absent)
    recent: np.ndarray  # bool [bins, classes]: a sample of the class in the last RECENT_S
    top: np.ndarray  # int32 [bins, classes]: the class's top leaf (-1: absent)
    top_w: np.ndarray  # float64 [bins, classes]: its weight
    top_d: np.ndarray  # int32 [bins, classes]: its first place in the window
    busy: np.ndarray  # int32: the top leaf that is not idle, else the idle one (-1: no samples)

    def __len__(self) -> int:
        return len(self.n)

    def at(self, i: int) -> tuple:
        """Bin i's (shares, gil, n, busy top, tops, recent classes, sync_age) as _stack_shares gives
        it, the dicts in its insertion order (classes by first appearance, tops by rank)."""
        n = int(self.n[i])
        if not n:
            return {}, 0.0, 0, None, {}, frozenset(), math.inf
        cls, leaves = self.classes, self.leaves
        first = self.first[i].tolist()
        here = [c for c, f in enumerate(first) if f >= 0]
        share = self.shares[i].tolist()
        shares = {cls[c]: share[c] for c in sorted(here, key=first.__getitem__)}
        top, top_w, top_d = self.top[i].tolist(), self.top_w[i].tolist(), self.top_d[i].tolist()
        tops = {cls[c]: leaves[top[c]] for c in sorted(here, key=lambda c: (-top_w[c], top_d[c]))}
        recent = frozenset(cls[c] for c in np.flatnonzero(self.recent[i]).tolist())
        busy = leaves[int(self.busy[i])]
        return shares, float(self.gil[i]), n, busy, tops, recent, float(self.sync_age[i])

    def _col(self, klass: str) -> int | None:
        return self.classes.index(klass) if klass in self.classes else None

    def share(self, klass: str) -> np.ndarray:
        """Each bin's share of ``klass`` (shares.get(klass, 0.0))."""
        c = self._col(klass)
        return np.zeros(len(self)) if c is None else self.shares[:, c].copy()

    def recent_has(self, klass: str) -> np.ndarray:
        """Whether ``klass`` is among each bin's recent classes."""
        c = self._col(klass)
        return np.zeros(len(self), dtype=bool) if c is None else self.recent[:, c].copy()

    @property
    def recent_awake(self) -> np.ndarray:
        """phases._main_awake: no recent sample, or one of a class other than idle."""
        awake = [c for c, k in enumerate(self.classes) if k != "idle"]
        return np.logical_or(~self.recent.any(axis=1), self.recent[:, awake].any(axis=1))

    @classmethod
    def empty(cls, bins: int) -> StackCols:
        """``bins`` bins without samples (no stacks)."""
        return _build((), (), np.zeros(bins, np.int64))

    def take(self, i: int) -> StackCols:
        """The bins from the i-th on."""
        return StackCols(
            self.classes,
            self.leaves,
            *(getattr(self, f.name)[i:] for f in dataclasses.fields(self)[2:]),
        )

    @classmethod
    def concat(cls, parts: Sequence[StackCols]) -> StackCols:
        """The bins of ``parts`` one after another (their class and leaf tables merged)."""
        classes = tuple(dict.fromkeys(k for p in parts for k in p.classes))
        leaves = tuple(dict.fromkeys(lf for p in parts for lf in p.leaves))
        at = {lf: j for j, lf in enumerate(leaves)}
        out = _build(classes, leaves, np.concatenate([np.zeros(0, np.int64), *(p.n for p in parts)]))
        row = 0
        for p in parts:
            cm = [classes.index(k) for k in p.classes]
            lm = np.array([at[lf] for lf in p.leaves] + [-1], dtype=np.int32)  # -1 stays -1
            rows = slice(row, row + len(p))
            out.gil[rows], out.sync_age[rows], out.busy[rows] = p.gil, p.sync_age, lm[p.busy]
            for name in ("shares", "first", "recent", "top_w", "top_d"):
                getattr(out, name)[rows, cm] = getattr(p, name)
            out.top[rows, cm] = lm[p.top]
            row += len(p)
        return out


def _build(classes: tuple[str, ...], leaves: tuple[Leaf, ...], n: np.ndarray) -> StackCols:
    """A StackCols of len(n) bins with nothing counted yet (the caller fills it in)."""
    bins, nc = len(n), len(classes)
    return StackCols(
        classes,
        leaves,
        n,
        np.zeros(bins),
        np.full(bins, math.inf),
        np.zeros((bins, nc)),
        np.full((bins, nc), -1, np.int32),
        np.zeros((bins, nc), dtype=bool),
        np.full((bins, nc), -1, np.int32),
        np.full((bins, nc), -math.inf),
        np.full((bins, nc), -1, np.int32),
        np.full(bins, -1, np.int32),
    )


_BLOCK = 1 << 16


@dataclass(frozen=True, eq=False)
class Entries:
    """The window's entries as arrays (one pass over them; a scan of several GPUs makes it once)."""

    k: np.ndarray  # int64: the Frame each enters the window at
    t: np.ndarray  # float64: its sample's time
    pid: np.ndarray  # int64
    info: np.ndarray  # int64: index into ``infos``, -1 without one (it counts for nothing)
    infos: tuple[Info, ...]  # distinct by value

    def __len__(self) -> int:
        return len(self.k)


def window_bounds(entries: Entries, frames: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(front, count): the window as the classifier's deque holds it after Frame ``k[i]`` (``k`` in
    time order) is ``entries`` [front[i], count[i]) (colscan's ``_Stacks.entries``)."""
    # The window after Frame k: the entries that entered by then (count), less those popped from its
    # front while the front sample is older than frames[k] - STACK_WINDOW_S. colscan and
    # Classifier.feed also pop at the Frames between; that leaves the same front: those edges are no
    # later and those counts no larger, so each such pop stops at or before the front this edge
    # reaches, and every entry between the two has t below this edge. So entry j is gone at i iff
    # i >= pop[j], the first i whose count includes j and whose edge passes its time, and no sooner
    # than the entry before it (a cumulative max).
    count = np.searchsorted(entries.k, k, "right")
    edge = np.asarray(frames, dtype=np.float64)[k] - STACK_WINDOW_S
    n = len(entries.t)
    pop = np.maximum(np.searchsorted(edge, entries.t, "right"), np.searchsorted(count, np.arange(n), "right"))
    return np.searchsorted(np.maximum.accumulate(pop), np.arange(len(k)), "right"), count


def stack_columns(
    entries: Entries,
    frames: Sequence[float] | np.ndarray,
    bin_frame: np.ndarray,
    bin_pidset: np.ndarray,
    pidsets: Sequence[set[int] | frozenset[int]],
    use_stacks: bool = True,
) -> StackCols:
    """Each bin's ``Classifier._stack_shares(pidsets[bin_pidset[i]], frames[bin_frame[i]])`` with the
    window as it stands after Frame ``bin_frame[i]`` (bins in time order; ``frames`` best as the
    float64 array colscan has).

    ``entries``: the window's samples in its order (memtop.analysis.colscan ``_Stacks.entries``); those
    without info occupy the window but count for nothing."""
    bin_frame = np.asarray(bin_frame, dtype=np.int64)
    bin_pidset = np.asarray(bin_pidset, dtype=np.int64)
    bins = len(bin_frame)
    if not use_stacks or not bins or not len(entries):
        return StackCols.empty(bins)
    en = entries
    codes = {x: j for j, x in enumerate(en.infos)}
    frames = np.asarray(frames, dtype=np.float64)
    now = frames[bin_frame]

    t = en.t
    front, count = window_bounds(en, frames, bin_frame)

    # Only samples with info whose pid is among the bin's GPU's count: each run of bins with one pid
    # set keeps those of its span of entries (V), so each bin's window is a range [a, b) of V.
    uniq, which = np.unique(bin_pidset, return_inverse=True)
    sets = [frozenset(pidsets[p]) for p in uniq.tolist()]
    canon = {s: j for j, s in enumerate(dict.fromkeys(sets))}  # pid sets equal by value are one
    run_set = np.array([canon[s] for s in sets], dtype=np.int64)[which]
    cuts = [0, *(np.flatnonzero(run_set[1:] != run_set[:-1]) + 1).tolist(), bins]
    counted = en.info >= 0
    parts, a, b = [], np.empty(bins, np.int64), np.empty(bins, np.int64)
    off = 0
    for lo, hi in itertools.pairwise(cuts):
        s0, s1 = int(front[lo]), int(count[hi - 1])
        members = np.array(sorted(sets[which[lo]]), dtype=np.int64)
        v = np.flatnonzero(counted[s0:s1] & np.isin(en.pid[s0:s1], members)) + s0
        a[lo:hi] = np.searchsorted(v, front[lo:hi]) + off
        b[lo:hi] = np.searchsorted(v, count[lo:hi]) + off
        parts.append(v)
        off += len(v)
    n = b - a
    ve = np.concatenate(parts)
    v_code = en.info[ve]
    # the classes and leaves of the samples counted (a part of a recording names only its own)
    infos = [en.infos[i] for i in np.flatnonzero(np.bincount(v_code, minlength=len(en.infos))).tolist()]
    classes = tuple(dict.fromkeys(x[0] for x in infos))
    leaves = tuple(dict.fromkeys(x[:3] for x in infos))
    out = _build(classes, leaves, n)
    if not n.any():
        return out
    i_cls = np.full(len(en.infos), -1, np.int64)
    i_leaf = np.full(len(en.infos), -1, np.int64)
    i_gil = np.zeros(len(en.infos))
    for x in infos:
        j = codes[x]
        i_cls[j], i_leaf[j], i_gil[j] = classes.index(x[0]), leaves.index(x[:3]), bool(x[3])
    v_cls, v_leaf, v_gil, v_t = i_cls[v_code], i_leaf[v_code], i_gil[v_code], t[ve]
    # each sample's previous one of the same leaf in V (one before its window's start is out of it)
    order = np.argsort(v_leaf, kind="stable")
    same = np.flatnonzero(v_leaf[order[1:]] == v_leaf[order[:-1]])
    gap = np.full(len(ve), len(ve))  # places back to the previous sample of the same leaf
    gap[order[same + 1]] = order[same + 1] - order[same]

    # bins in blocks of about _BLOCK pairs: each block's arrays stay in the CPU's cache
    per = max(1, _BLOCK * bins // max(1, int(n.sum())))
    for lo in range(0, bins, per):
        rows = slice(lo, min(lo + per, bins))
        _weigh(out, rows, n[rows], a[rows], now[rows], v_t, v_cls, v_leaf, v_gil, gap)
    return out


def _weigh(
    out: StackCols,
    rows: slice,
    n: np.ndarray,
    a: np.ndarray,
    now: np.ndarray,
    v_t: np.ndarray,
    v_cls: np.ndarray,
    v_leaf: np.ndarray,
    v_gil: np.ndarray,
    gap: np.ndarray,
) -> None:
    """Fill ``out``'s rows of the bins ``rows`` (``n``, ``a``, ``now`` theirs: window lengths, starts
    in V, times) from V's samples (time, class, leaf, GIL, ``gap`` to the leaf's previous)."""
    classes = out.classes
    nc = len(classes)
    # The pairs (bin, sample of its window), bin by bin, each bin's in window order. np.bincount adds
    # the weights of each key one at a time in the pairs' order (a plain C loop, `dans[numbers[i]] +=
    # weights[i]`), so every sum below is the Python's: the same floats added in the same order from
    # 0.0 (adding 0.0, as gil does for a sample without the GIL, leaves a sum as it is).
    bins = len(n)
    offs = np.concatenate([[0], np.cumsum(n)])
    npairs = int(offs[-1])
    bin_of = np.repeat(np.arange(bins), n)
    vv = np.arange(npairs) + np.repeat(a - offs[:-1], n)  # the pair's sample in V
    d_of = vv - np.repeat(a, n)  # its place in the window
    t_p = v_t[vv]
    age = np.repeat(now, n) - t_p
    w = np.exp(-age / STACK_TAU_S)
    cls = v_cls[vv]
    key_c = bin_of * nc + cls
    total = np.bincount(bin_of, w, bins)
    gil = np.bincount(bin_of, w * v_gil[vv], bins)  # gil += w * owns_gil
    acc_c = np.bincount(key_c, w, bins * nc)
    safe = np.where(n > 0, total, 1.0)
    out.gil[rows] = gil / safe
    out.shares[rows] = (acc_c / np.repeat(safe, nc)).reshape(bins, nc)  # 0.0 / total where absent
    recent = np.zeros(bins * nc, dtype=bool)
    recent[key_c[t_p >= np.repeat(now - RECENT_S, n)]] = True  # s.t >= since
    out.recent[rows] = recent.reshape(bins, nc)
    if "sync" in classes:  # the least age of a sync sample (a min: the same whatever the order)
        at = np.flatnonzero(cls == classes.index("sync"))
        np.minimum.at(out.sync_age[rows], bin_of[at], age[at])

    # A leaf's weight sums at its first pair in the bin: each pair takes the first pair of its leaf's
    # previous sample in the window (``gap`` places back), place by place; at place d, the bins whose
    # window is longer than d (a prefix of them by length, longest first)
    g = gap[vv]
    up = np.arange(npairs)
    prev = np.where(g <= d_of, up - g, up)  # the pair of the previous sample (itself: none)
    by_len = np.argsort(-n, kind="stable")
    at_d = offs[by_len]
    longer = np.searchsorted(-n[by_len], -np.arange(int(n.max())), "left").tolist()
    for d in range(1, len(longer)):
        pd = at_d[: longer[d]] + d
        up[pd] = up[prev[pd]]
    acc_l = np.bincount(up, w, npairs)

    # each class's top leaf: most weight, then first appearance (sorted(..., reverse=True) is stable)
    fo = np.flatnonzero(up == np.arange(npairs))
    k_f, w_f, d_f = key_c[fo], acc_l[fo], d_of[fo]
    best_w = out.top_w[rows].reshape(-1)
    np.maximum.at(best_w, k_f, w_f)
    won = np.flatnonzero(w_f == best_w[k_f])
    first, best_d = np.full(bins * nc, npairs), np.full(bins * nc, npairs)
    np.minimum.at(first, k_f, d_f)
    np.minimum.at(best_d, k_f[won], d_f[won])
    won = won[d_f[won] == best_d[k_f[won]]]  # one leaf per class and bin
    out.top[rows].reshape(-1)[k_f[won]] = v_leaf[vv[fo[won]]]
    out.top_d[rows].reshape(-1)[k_f[won]] = d_f[won]
    here = (first < npairs).reshape(bins, nc)
    out.first[rows] = np.where(here, first.reshape(bins, nc), -1)
    # busy: the first ranked leaf not idle, else the first (then all are idle)
    awake = here & np.array([k != "idle" for k in classes])
    pick = np.where(awake.any(axis=1, keepdims=True), awake, here)
    w_pick = np.where(pick, out.top_w[rows], -math.inf)
    best = pick & (w_pick == w_pick.max(axis=1, keepdims=True))
    col = np.argmin(np.where(best, out.top_d[rows], np.iinfo(np.int32).max), axis=1)
    out.busy[rows] = np.where(n > 0, out.top[rows][np.arange(bins), col], -1)
