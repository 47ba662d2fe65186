"""The report's bins over arrays: every bin's Features, rule and label of a range at once.

memtop.analysis.colscan finds which samples each Frame holds; this module gathers each bin's samples over
arrays of all bins of a GPU (the means of a bin's samples summed left to right, the host's processes
matched against the GPU's, the stack window's shares: memtop.analysis.stackwin) and computes from them what
``Classifier`` gives bin by bin, by memtop.analysis.phases' own definitions over a ``ruleview.Cols``: the
features (``gpu_figures``, ``proc_figures``), the rules, then the hysteresis (``phases.settle``). Features and Label objects are built only for the
bins a reader asks for (``LabelSeq``): a report of 8 hours has 57,600 bins a GPU and quotes a few.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, overload

import numpy as np

from memtop.analysis.jobs import peers
from memtop.analysis.labelcols import LabelCols
from memtop.analysis.phases import (
    BIN_MEANS,
    NO_RULE,
    RULE_LABEL,
    RULES,
    STICKY,
    Features,
    Label,
    gpu_figures,
    gpu_in_collective,
    label_of,
    mode_name,
    nvlink_peak,
    proc_figures,
    quiet_view,
    settle,
)
from memtop.analysis.ruleview import Cols
from memtop.analysis.stackwin import Entries, StackCols, stack_columns
from memtop.core.arrays import distinct
from memtop.core.model import BY_MODE, MAIN_FIELDS, PROC_DEFAULTS

_NAN = float("nan")


def seq_sum(values: np.ndarray, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each segment's sum of ``values[first:first + count]``, added left to right from 0.0 (as
    Python's sum of floats does: the same float, where numpy's sum pairs terms)."""
    acc = np.zeros(len(first))
    for d in range(int(count.max(initial=0))):
        on = count > d
        acc[on] += values[first[on] + d]
    return acc


def seq_mean(values: np.ndarray, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """phases._mean of each segment: the mean of its values that are not NaN (None), NaN if none."""
    ok = ~np.isnan(values)
    if ok.all():
        n = count.astype(np.float64)
        s = seq_sum(values, first, count)
    else:  # the segment's values without the holes, in order
        keep = np.flatnonzero(ok)
        cum = np.concatenate([[0], np.cumsum(ok)])
        a, b = cum[first], cum[first + count]
        n = (b - a).astype(np.float64)
        s = seq_sum(values[keep], a, b - a)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.where(n > 0, n, 1.0), _NAN)


@dataclass
class GpuBins:
    """One GPU's bins of a scan with the Features ``Classifier._features`` gives them, as columns
    (NaN where the Features hold None)."""

    gpu: int
    t: np.ndarray  # bin starts
    k: np.ndarray  # each bin's last Frame (its host sample and stack window)
    graphics: np.ndarray
    # every other Features field a bin's samples give, by name (phases.gpu_figures, proc_figures,
    # MAIN_FIELDS of the busiest GPU process, alive): a feature added there is carried, viewed by the
    # rules (ruleview.Cols) and read back into Features (``features``) without naming it here
    figs: dict[str, np.ndarray]
    stacks: StackCols
    peers: list[tuple[int, ...]] | None = None  # per bin, where the recording has several GPUs
    away: list[tuple[int, ...]] | None = None

    def __len__(self) -> int:
        return len(self.t)

    def take(self, i: int) -> GpuBins:
        """The bins from the i-th on."""
        return GpuBins(
            self.gpu,
            self.t[i:],
            self.k[i:],
            self.graphics[i:],
            {k: v[i:] for k, v in self.figs.items()},
            self.stacks.take(i),
            None if self.peers is None else self.peers[i:],
            None if self.away is None else self.away[i:],
        )

    @staticmethod
    def concat(parts: list[GpuBins]) -> GpuBins:
        """Consecutive bins of one GPU as one."""
        if len(parts) == 1:
            return parts[0]
        out: dict[str, Any] = {
            "gpu": parts[0].gpu,
            "stacks": parts[0].stacks.concat([p.stacks for p in parts]),
            "figs": {k: np.concatenate([p.figs[k] for p in parts]) for k in parts[0].figs},
        }
        for k in ("peers", "away"):
            got = [getattr(p, k) for p in parts]
            out[k] = (
                None
                if all(x is None for x in got)
                else list(
                    chain.from_iterable(
                        x if x is not None else [()] * len(p) for p, x in zip(parts, got, strict=True)
                    )
                )
            )
        for k in ("t", "k", "graphics"):
            out[k] = np.concatenate([getattr(p, k) for p in parts])
        return GpuBins(**out)

    def view(self) -> Cols:
        st = self.stacks
        return Cols(
            {
                **self.figs,
                "t": self.t,
                "graphics": self.graphics,
                "stack_n": st.n,
                "sync_age": st.sync_age,
                "awake": st.recent_awake,
                "has_peers": self._any(self.peers),
                "has_away": self._any(self.away),
            },
            st.share,
            st.recent_has,
        )

    def _any(self, per_bin: list[tuple[int, ...]] | None) -> np.ndarray:
        if per_bin is None:
            return np.zeros(len(self.t), dtype=bool)
        return np.array([bool(p) for p in per_bin], dtype=bool)

    def features(self, i: int) -> Features:
        shares, gil, n, top, tops, recent, sync_age = self.stacks.at(i)
        return Features(
            t=_scalar(self.t[i]),
            gpu=self.gpu,
            graphics=_scalar(self.graphics[i]),
            **{k: _scalar(v[i]) for k, v in self.figs.items()},
            shares=shares,
            gil=gil,
            stack_n=n,
            top=top,
            tops=tops,
            recent=recent,
            sync_age=sync_age,
            peers=self.peers[i] if self.peers is not None else (),
            peers_elsewhere=self.away[i] if self.away is not None else (),
        )


def _scalar(x: np.generic | str) -> Any:
    """A column's value as the Features hold it: a Python bool, int, float or str, None for NaN
    (a text column is an object array: its items are Python strs already)."""
    v = x if isinstance(x, str) else x.item()
    return None if v != v else v


@dataclass
class Rules:
    """The rules over every bin of a GPU: the first rule each bin matches, each sticky label's exit
    threshold, and what the hysteresis reads besides."""

    rid: np.ndarray
    keeps: dict[str, np.ndarray]
    quiet: np.ndarray
    stopped: np.ndarray
    subs: dict[int, np.ndarray]  # rule id -> its sub-tag per bin (rules with a sub-tag function)

    def take(self, i: int, j: int | None = None) -> Rules:
        """The rules of the bins from the i-th on (to the j-th)."""
        return Rules(
            self.rid[i:j],
            {k: v[i:j] for k, v in self.keeps.items()},
            self.quiet[i:j],
            self.stopped[i:j],
            {k: v[i:j] for k, v in self.subs.items()},
        )

    @staticmethod
    def concat(parts: list[Rules]) -> Rules:
        if len(parts) == 1:
            return parts[0]
        n = [len(p.rid) for p in parts]
        subs = {}
        for k in {k for p in parts for k in p.subs}:  # a part where rule k never fired has no sub-tags
            subs[k] = np.concatenate(
                [p.subs.get(k, np.full(m, "", dtype=object)) for p, m in zip(parts, n, strict=True)]
            )
        return Rules(
            np.concatenate([p.rid for p in parts]),
            {k: np.concatenate([p.keeps[k] for p in parts]) for k in parts[0].keeps},
            np.concatenate([p.quiet for p in parts]),
            np.concatenate([p.stopped for p in parts]),
            subs,
        )

    @classmethod
    def of(cls, bins: GpuBins) -> Rules:
        return cls.over(bins.view(), len(bins), bins.figs["stopped"])

    @classmethod
    def over(cls, v: Cols, n: int, stopped: np.ndarray) -> Rules:
        """The rules over ``n`` bins' view."""
        rid = np.full(n, NO_RULE, dtype=np.int64)
        for k in range(len(RULES) - 1, -1, -1):  # the first rule that matches wins
            rid[np.broadcast_to(RULES[k][2](v), (n,))] = k
        subs = {}
        for k, r in enumerate(RULES):
            if r[3] is not None and (rid == k).any():
                subs[k] = np.broadcast_to(np.asarray(r[3](v)), (n,))
        keeps = {lab: np.broadcast_to(keep(v), (n,)) for lab, (_, _, keep) in STICKY.items()}
        return cls(rid, keeps, np.broadcast_to(quiet_view(v), (n,)), stopped, subs)


Settled = tuple[tuple[str, str, int], int]  # the hysteresis' state after a GPU's first bins, and their count


def settle_more(
    rules: Rules,
    warmup_bins: int,
    confirm: int,
    bin_s: float,
    at: Settled = (("", "", 0), 0),
    trail: list[tuple[str, str, int]] | None = None,
    meet: Sequence[tuple[str, str, int]] = (),
) -> tuple[np.ndarray, list[str], Settled]:
    """The hysteresis over a GPU's bins (``rules``) from where the bins before left it (``at``; by
    default the start): (the rule id that stands per bin, the stable label per bin ("" in the
    warm-up), where these leave it), a range of bins at a time (the export's windows, the chunks).
    ``trail``: given the state after each of the first GUESS_BINS bins (``settle_guess``); ``meet``:
    such states, the loop stopping after the first bin whose state is its own (the bins it settled
    are the result's length)."""
    state, before = at
    rids = rules.rid.tolist()
    keeps = {lab: k.tolist() for lab, k in rules.keeps.items()}
    quiet, stopped = rules.quiet.tolist(), rules.stopped.tolist()
    out = [0] * len(rids)
    stable_of: list[str] = [""] * len(rids)
    watch = GUESS_BINS if trail is not None else len(meet)
    i = 0

    def held(lab: str) -> bool:  # that label's exit threshold at bin i (the loop's)
        return keeps[lab][i]

    for i, rid in enumerate(rids):
        out[i], state = settle(
            rid,
            state,
            before + i >= warmup_bins,
            held,
            stopped[i],
            quiet[i],
            confirm,
            bin_s,
        )
        stable_of[i] = state[0]
        if i < watch:
            if trail is not None:
                trail.append(state)
            elif meet[i] == state:
                del out[i + 1 :], stable_of[i + 1 :]
                return np.array(out, dtype=np.int64), stable_of, (state, before + i + 1)
    return np.array(out, dtype=np.int64), stable_of, (state, before + len(rids))


# a later chunk's hysteresis is run in its own process from a fresh state (``settle_guess``); the join
# runs the true one from the chunk before's state until the two meet, within this many bins (a state
# repeats at each change of the rules' label: a few bins), and takes the guess's from there
GUESS_BINS = 4096
Guess = tuple[np.ndarray, list[str], Settled, list[tuple[str, str, int]]]


def settle_guess(rules: Rules, warmup_bins: int, confirm: int, bin_s: float) -> Guess:
    """A later chunk's hysteresis as if its bins came after the warm-up, from a fresh state: its
    labels from the bin where the true run, from the state the chunks before leave, meets it
    (``settle_from``), with the state after each of its first GUESS_BINS bins to meet it at."""
    trail: list[tuple[str, str, int]] = []
    return (*settle_more(rules, warmup_bins, confirm, bin_s, (("", "", 0), warmup_bins), trail), trail)


def settle_from(
    rules: Rules, warmup_bins: int, confirm: int, bin_s: float, at: Settled, guess: Guess | None
) -> tuple[np.ndarray, list[str], Settled]:
    """``settle_more(rules, ..., at)``, the same labels and state: where the chunk's ``guess`` holds
    and every bin is past the warm-up, the true run goes on only until its state is the guess's
    (from there each bin's inputs and state are the same, so its labels are)."""
    if guess is None or at[1] < warmup_bins:
        return settle_more(rules, warmup_bins, confirm, bin_s, at)
    g_rid, g_stable, (g_state, _), trail = guess
    # (over the bins the trail covers: the lists settle_more makes of the rest are not needed)
    rid, stable, (state, _) = settle_more(
        rules.take(0, len(trail)), warmup_bins, confirm, bin_s, at, meet=trail
    )
    m = len(rid)
    if not m or state != trail[m - 1]:  # never met: the true run over every bin
        return settle_more(rules, warmup_bins, confirm, bin_s, at)
    return np.concatenate([rid, g_rid[m:]]), stable + g_stable[m:], (g_state, at[1] + len(g_rid))


class LabelSeq(Sequence[Label]):
    """A GPU's labels of a range as columns; a Label (and its Features) is built when read."""

    def __init__(self, bins: GpuBins, rules: Rules, rid: np.ndarray, stable: list[str], start: int = 0):
        self.bins, self.rules = bins, rules
        self.start = start  # the first bin the result holds (those before warmed the classifier up)
        self.rid = rid[start:]
        raw = np.array(RULE_LABEL, dtype=object)[self.rid]
        self.stable = np.array(stable[start:], dtype=object)
        self.raw = raw
        self.label = np.where(self.stable == "", "warmup", self.stable)
        self.t = bins.t[start:]

    def __len__(self) -> int:
        return len(self.rid)

    @overload
    def __getitem__(self, i: int) -> Label: ...
    @overload
    def __getitem__(self, i: slice) -> list[Label]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        b = self.start + i
        f = self.bins.features(b)
        rid = int(self.rid[i])
        subs = self.rules.subs
        return label_of(f, rid, str(self.stable[i]), lambda: str(subs[rid][b]) if rid in subs else "")

    def __iter__(self) -> Iterator[Label]:
        return (self[i] for i in range(len(self)))

    def columns(self) -> LabelCols:
        gpm = self.bins.figs["gpm"][self.start :]
        stacked = self.bins.stacks.n[self.start :] > 0
        names = [mode_name(g, s) for g in (False, True) for s in (False, True)]
        mode = np.array(names, dtype=object)[2 * gpm.astype(np.int64) + stacked.astype(np.int64)]
        return LabelCols(self.t, self.label, self.raw, mode)


def gpu_bins(
    g: Any,  # a colscan._Gpu
    hosts: Any,  # a colscan._Hosts
    entries: Entries,
    ft: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    bin_of: np.ndarray,
    gpm_code: int,
    use_stacks: bool = True,
) -> tuple[GpuBins, np.ndarray] | None:
    """One GPU's bins with Features (the bins whose samples give a graphics mean), and which of the
    scan's bins they are; None if it has none."""
    r, valid = g.r, g.valid
    new = np.ones(len(r), dtype=bool)
    new[1:] = (bin_of[1:] != bin_of[:-1]) | (r[1:] != r[:-1])
    at = np.flatnonzero(valid & new)  # Frames that append a sample to their bin (feed's vals)
    rows, e_bin, e_state = r[at], bin_of[at], g.s[at]
    first = np.searchsorted(e_bin, np.arange(len(ends) + 1), "left")
    f0, cnt = first[:-1], np.diff(first)
    gpm_s = g.code[rows] == gpm_code
    cols = {c: v[rows] for c, v in g.cols.items() if c != "clock_events"}

    def figure(name: str) -> np.ndarray:  # a GpuSample figure of each sample (fallbacks: model.BY_MODE)
        if name not in BY_MODE:
            return cols[name]
        gpm_field, nvml_field = BY_MODE[name]
        return np.where(gpm_s, cols[gpm_field], cols[nvml_field])

    graphics = seq_mean(figure("engine"), f0, cnt)
    sel = np.flatnonzero(~np.isnan(graphics))
    if not len(sel):
        return None
    f0, cnt, graphics = f0[sel], cnt[sel], graphics[sel]
    mean = {c: seq_mean(figure(c), f0, cnt) for c in BIN_MEANS}
    not_gpm = np.concatenate([[0], np.cumsum(~gpm_s)])
    gpm = not_gpm[f0 + cnt] == not_gpm[f0]
    # the newest sample's state: link, board name and processes
    st = e_state[f0 + cnt - 1]
    states = [g.state(s) for s in range(len(g.states))] + [g.state(-1)]
    st = np.where(st < 0, len(g.states), st)
    link_bps = np.array([(x[3].bytes_per_s if x[3] else 0.0) or 0.0 for x in states], dtype=np.float64)
    peak = np.array([nvlink_peak(x[1]) for x in states], dtype=np.float64)
    pidsets = [frozenset(p.pid for p in x[4]) for x in states]
    k = ends[sel]
    prev = np.concatenate([graphics[:1], graphics[:-1]])
    figs = {
        **gpu_figures(Cols, gpm, graphics, prev, mean, link_bps[st], peak[st]),
        "alive": np.array([bool(p) for p in pidsets])[st],
        **_host_procs(hosts, k, st, pidsets),
    }
    del figs["graphics"]  # (a field of its own: the bins a label's run reads)
    bins = GpuBins(
        g.index, starts[k], k, graphics, figs, stack_columns(entries, ft, k, st, pidsets, use_stacks)
    )
    return bins, sel


def _host_procs(hosts: Any, k: np.ndarray, st: np.ndarray, pidsets: list[frozenset[int]]) -> dict:
    """Each bin's figures of the host's processes at its last Frame: the GPU's processes' CPU
    (the busiest), its DataLoader workers' count, mean CPU and share asleep, whether one is stopped,
    and the host's iowait, as ``Classifier._features`` takes them from the processes in order."""
    h_of = hosts.at[k]
    hs = distinct(h_of[h_of >= 0])
    fig = hosts.figures(hs.tolist())
    hb = np.searchsorted(hs, h_of)  # the bin's sample among hs; a bin without one: none of its rows
    found = h_of >= 0
    iow = np.where(found, fig.iowait[np.minimum(hb, len(hs) - 1)] if len(hs) else 0.0, 0.0)
    count = np.where(found, fig.rows[np.minimum(hb, len(hs) - 1)] if len(hs) else 0, 0)
    start = fig.start[np.minimum(hb, len(hs) - 1)] if len(hs) else np.zeros(len(k), dtype=np.int64)
    # which pids are each state's GPU processes: a table over the states' pids, and a column that is
    # False for every state for the other pids (a search among a few pids, not a sort of every row's)
    flat = np.array([p for ps in pidsets for p in ps], dtype=np.int64)
    known = distinct(flat)
    member = np.zeros((len(pidsets), len(known) + 1), dtype=bool)
    member[np.repeat(np.arange(len(pidsets)), [len(ps) for ps in pidsets]), np.searchsorted(known, flat)] = (
        True
    )
    pid_id = _ids(known, fig.pid)
    wof_id = np.where(fig.has_parent, _ids(known, fig.worker_of), len(known))  # no parent: the False column
    # every (bin, process row) pair at once, each bin's rows in order
    n = len(k)
    bin_ = np.repeat(np.arange(n), count)
    row = np.arange(len(bin_)) + np.repeat(start - (np.cumsum(count) - count), count)
    s_p, cpu = st[bin_], fig.cpu_pct[row]
    main = member[s_p, pid_id[row]]
    # the busiest GPU process: the first row of the largest CPU (a NaN or -inf one is never taken)
    cand = np.flatnonzero(main & (cpu > -math.inf))
    best = np.full(n, -math.inf)
    np.maximum.at(best, bin_[cand], cpu[cand])
    top = cand[cpu[cand] == best[bin_[cand]]]
    b_top, first = np.unique(bin_[top], return_index=True)
    best_row = np.full(n, -1, dtype=np.int64)
    best_row[b_top] = row[top[first]]
    stopped = np.zeros(n, dtype=bool)
    stopped[bin_[main & fig.stopped[row]]] = True
    wk = fig.data_worker[row] & member[s_p, wof_id[row]]
    # (np.bincount adds each bin's weights in the pairs' order from 0.0, as the features' sum does;
    # adding 0.0 for the other rows leaves a sum as it is)
    wsum = np.bincount(bin_, np.where(wk, cpu, 0.0), n)
    wn = np.bincount(bin_[wk], minlength=n)
    wsd = np.bincount(bin_[wk & fig.asleep[row]], minlength=n)
    busiest = np.where(best == -math.inf, 0.0, best)
    return {**proc_figures(Cols, busiest, wsum, wn, wsd, stopped, iow), **_main_fields(fig, best_row)}


def _ids(known: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """Each pid's index in ``known`` (ascending), len(known) for one not in it."""
    i = np.searchsorted(known, pids)
    hit = i < len(known)
    hit[hit] = known[i[hit]] == pids[hit]
    return np.where(hit, i, len(known))


def _main_fields(fig: Any, row: np.ndarray) -> dict[str, np.ndarray]:
    """Each bin's model.MAIN_FIELDS of its busiest GPU process's row (``row``; -1: none, the
    Features' defaults)."""
    out = {}
    for k in MAIN_FIELDS:
        col, default = getattr(fig, k), PROC_DEFAULTS[k]
        padded = np.append(col, np.array([default], dtype=col.dtype))  # the default at index -1
        out[k] = padded[row]
    return out


def with_peers(
    bins: dict[int, tuple[GpuBins, np.ndarray]],
    nbins: int,
    jobs_at: Callable[[np.ndarray], dict[int, np.ndarray]],
) -> None:
    """Each GPU's peers per bin (``Classifier.emit``'s ``_with_peers``): the other GPUs of its job
    with features in the same bin, and which of them are not in a collective. ``jobs_at``: each GPU's
    job (an id, -1 for none) in the given bins, as ``jobs.job_groups`` finds it at their last Frame."""
    if len(bins) < 2:
        return
    gs = sorted(bins)
    where = np.full((nbins, len(gs)), -1, dtype=np.int64)  # each GPU's bin of each scan bin
    for j, g in enumerate(gs):
        b, sel = bins[g]
        where[sel, j] = np.arange(len(sel))
        b.peers, b.away = [()] * len(sel), [()] * len(sel)
    n = np.flatnonzero((where >= 0).sum(axis=1) > 1)  # the bins two or more GPUs are in
    if not len(n):
        return
    at = where[n]
    jobs = jobs_at(n)
    job = np.stack([np.where(at[:, j] >= 0, jobs[g], -1) for j, g in enumerate(gs)], axis=1)
    coll = np.stack(
        [
            np.broadcast_to(gpu_in_collective(bins[g][0].view()), (len(bins[g][1]),))[at[:, j]]
            for j, g in enumerate(gs)
        ],
        axis=1,
    )  # (where a GPU is absent, a value the job test below leaves out)
    # jobs.peers once for each distinct row of (which GPUs share a job, which are in a collective)
    pairs = [
        (job[:, j] == job[:, k]) & (job[:, j] >= 0) for j in range(len(gs)) for k in range(j + 1, len(gs))
    ]
    first, inv = distinct_rows(np.stack([*pairs, *coll.T], axis=1))
    found = [
        peers(gs, [x if x >= 0 else None for x in job[r].tolist()], (~coll[r]).tolist())
        for r in first.tolist()
    ]
    for j, g in enumerate(gs):
        b = bins[g][0]
        assert b.peers is not None and b.away is not None
        for i, u in zip(at[:, j].tolist(), inv.tolist(), strict=True):
            if i >= 0:
                b.peers[i], b.away[i] = found[u][j]


def distinct_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where a matrix's distinct rows first are and each row's index among them, as np.unique(m,
    axis=0, return_index=True, return_inverse=True) but in another order: each row as one integer,
    its columns' codes (a bool as itself, another value by its rank) as the digits, made small again
    by a np.unique before they would pass 62 bits (np.unique sorts rows as opaque values: a tenth of
    a long multi-GPU scan)."""
    inv = np.zeros(len(m), dtype=np.int64)
    size = 1  # the values inv may take
    for col in m.T:
        if col.dtype == bool:
            code, base = col.astype(np.int64), 2
        else:
            _, code = np.unique(col, return_inverse=True)
            code, base = code.reshape(-1), len(m) + 1
        if size * base >= 1 << 62:
            _, inv = np.unique(inv, return_inverse=True)
            inv, size = inv.reshape(-1), len(m) + 1
        inv, size = inv * base + code, size * base
    _, first, inv = np.unique(inv, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)
