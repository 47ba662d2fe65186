"""memtop.stackwin gives every bin's stack-window features (Classifier._stack_shares) at once, equal to
the per-bin Python float for float, on real recordings: the window colscan's scan holds at each bin's
last Frame, with the GPU processes it asked about."""

from __future__ import annotations

import bisect
import math
import pickle
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from hostile import HOSTILE

from memtop import colscan
from memtop.phases import STACK_WINDOW_S, Classifier
from memtop.stackwin import Entries, StackCols, stack_columns, window_bounds
from memtop.store import Recording

LABELLED = DATA / "labelled_s2.memtop"  # a training run: sync, copy, data, idle phases
WORKERS = DATA / "heldout_torch_s3.memtop"  # 20 DataLoader workers beside the main process
TWO_GPUS = DATA / "multi" / "heldout_ddp_s11.memtop"  # two ranks, one GPU each
NO_STACKS = DATA / "heldout3_cupy_s34.memtop"  # recorded without stacks


class _Scan:
    """A recording's stack window as colscan's scan holds it (its entries, the Frame times), and per
    bin and GPU, as the Classifier fed every Frame asks it (in the order asked), the GPU's processes,
    the bin's last Frame and the answer."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, frozenset[int], float, tuple]] = []
        held: list[colscan._Stacks] = []
        calls = self.calls

        class Asked(Classifier):
            def bin_features(self, gpu, *args, **kw):
                self._gpu = gpu
                return super().bin_features(gpu, *args, **kw)

            def _stack_shares(self, pids, now):
                got = super()._stack_shares(pids, now)
                calls.append((self._gpu, frozenset(pids), now, got))
                return got

        class Kept(colscan._Stacks):
            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, **kw)
                held.append(self)

        monkeypatch.setattr(colscan, "_Stacks", Kept)
        rec = Recording(path)
        try:
            colscan._scan(rec, None, rec.t0, rec.t1, None)
            Asked().feed_all(rec.frames())
        finally:
            rec.close()
        self.window = held[0].window
        self.frames = held[0].frames
        assert self.calls

    def inputs(self, gpu: int | None = None) -> tuple:
        """(bin_frame, bin_pidset, pidsets, answers) of the bins asked (of one GPU, or all)."""
        asked = [c for c in self.calls if gpu is None or c[0] == gpu]
        sets = list(dict.fromkeys(c[1] for c in asked))
        # colscan's now is frames[k] of the bin's last Frame k: the last Frame at that time
        k = np.array([bisect.bisect_right(self.frames, c[2]) - 1 for c in asked], dtype=np.int64)
        return k, np.array([sets.index(c[1]) for c in asked], dtype=np.int64), sets, [c[3] for c in asked]


def _bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).view(np.int64)


def _same(cols: StackCols, want: list[tuple]) -> None:
    """cols gives every answer: the tuple equal (dicts in the same order), the arrays bit for bit."""
    assert len(cols) == len(want)
    every = cols.tuples()
    for i, w in enumerate(want):
        for got in (cols.at(i), every[i]):
            assert got == w, i
            assert list(got[0]) == list(w[0]) and list(got[4]) == list(w[4]), i  # insertion order too
    for klass in {*cols.classes, "sync", "comm", "nothing"}:
        assert np.array_equal(_bits(cols.share(klass)), _bits([w[0].get(klass, 0.0) for w in want]))
        assert cols.recent_has(klass).tolist() == [klass in w[5] for w in want]
    assert cols.n.tolist() == [w[2] for w in want]
    assert np.array_equal(_bits(cols.gil), _bits([w[1] for w in want]))
    assert np.array_equal(_bits(cols.sync_age), _bits([w[6] for w in want]))
    assert cols.recent_awake.tolist() == [not w[5] or bool(w[5] - {"idle"}) for w in want]


@pytest.mark.parametrize("path", [LABELLED, WORKERS, TWO_GPUS, NO_STACKS], ids=lambda p: p.stem)
def test_every_bin_as_the_classifier_computes_it(path, monkeypatch):
    scan = _Scan(path, monkeypatch)
    k, ps, sets, want = scan.inputs()
    _same(stack_columns(scan.window, scan.frames, k, ps, sets), want)
    if path == NO_STACKS:
        assert not scan.window and all(w[2] == 0 for w in want)
    else:
        assert sum(w[2] > 0 for w in want) > 0.5 * len(want)  # most bins have samples to weigh
        assert len({w[3] for w in want}) > 1  # and the busy stack changes


def test_each_gpu_of_a_job_by_itself(monkeypatch):
    """Per GPU, as the column scan asks: only the samples of that GPU's process count."""
    scan = _Scan(TWO_GPUS, monkeypatch)
    entries = Entries.of(scan.window)  # one pass over the entries for both GPUs
    gpus = sorted({c[0] for c in scan.calls})
    assert len(gpus) == 2
    pids = set()
    for g in gpus:
        k, ps, sets, want = scan.inputs(g)
        pids |= set().union(*sets)
        _same(stack_columns(entries, np.array(scan.frames), k, ps, sets), want)
    assert len(pids) == 2


def test_bins_in_parts_join(monkeypatch):
    """A range of bins needs no bin before it; parts join (their class and leaf tables merged)."""
    scan = _Scan(WORKERS, monkeypatch)
    k, ps, sets, want = scan.inputs()
    whole = stack_columns(scan.window, scan.frames, k, ps, sets)
    cut = [0, 40, len(k) // 2, len(k) - 3, len(k)]
    parts = [stack_columns(scan.window, scan.frames, k[a:b], ps[a:b], sets) for a, b in zip(cut, cut[1:])]
    assert parts[0].classes != whole.classes or len(parts[0].leaves) < len(whole.leaves)  # tables differ
    joined = StackCols.concat([pickle.loads(pickle.dumps(p)) for p in parts])  # as chunks hand them back
    _same(joined, want)
    assert StackCols.concat([parts[1], parts[3]]).at(len(parts[1])) == parts[3].at(0)
    for name in ("n", "gil", "sync_age"):
        assert np.array_equal(getattr(joined, name), getattr(whole, name))


def test_without_stacks_every_bin_is_empty(monkeypatch):
    scan = _Scan(LABELLED, monkeypatch)
    k, ps, sets, _ = scan.inputs()
    cols = stack_columns(scan.window, scan.frames, k, ps, sets, use_stacks=False)
    clf = Classifier(use_stacks=False)
    _same(cols, [clf._stack_shares(set(sets[p]), scan.frames[i]) for i, p in zip(k, ps, strict=True)])
    assert cols.at(0) == ({}, 0.0, 0, None, {}, frozenset(), math.inf)


def _most(sets: list, ps: np.ndarray) -> frozenset[int]:
    """The pid set asked most (the training process)."""
    return sets[int(np.bincount(ps).argmax())]


def _replayed(window: list, frames: list[float], k: np.ndarray, pids: set[int]) -> list[tuple]:
    """The per-bin Python: the deque as colscan's scan advances it, asked at each bin."""
    clf = Classifier()
    got, nxt = [], 0
    for kk in k.tolist():
        while nxt < len(window) and window[nxt][0] <= kk:
            clf._stacks.append(window[nxt][1:])
            nxt += 1
        while clf._stacks and clf._stacks[0][0].t < frames[kk] - STACK_WINDOW_S:
            clf._stacks.popleft()
        got.append(clf._stack_shares(pids, frames[kk]))
    return got


def test_hostile_stack_text_passes_through_unchanged(monkeypatch):
    """Escape sequences in a stack's file and code come back as they went in: sanitising them is the
    display's job (memtop.sanitize), and a changed string would be another leaf."""
    scan = _Scan(LABELLED, monkeypatch)
    k, ps, sets, _ = scan.inputs()
    bad = {}
    for _, _s, info in scan.window:
        if info is not None and info not in bad:
            h = HOSTILE[len(bad) % len(HOSTILE)]
            bad[info] = (info[0], f"{info[1]}{h}", f"{h}{info[2]}", info[3])
    window = [(kk, s, bad.get(info)) for kk, s, info in scan.window]
    pids = set(_most(sets, ps))
    want = _replayed(window, scan.frames, k, pids)
    cols = stack_columns(window, scan.frames, k, np.zeros(len(k), np.int64), [pids])
    _same(cols, want)
    shown = {leaf for w in want for leaf in w[4].values()}
    assert len(shown) > 2 and all(any(h in leaf[1] for h in HOSTILE) for leaf in shown)
    assert shown <= set(cols.leaves) <= {info[:3] for info in bad.values()}


def test_samples_without_info_occupy_the_window(monkeypatch):
    """A sample without a main thread (info None) counts for nothing but holds the window's front as
    the deque does (popping stops at it)."""
    scan = _Scan(LABELLED, monkeypatch)
    k, ps, sets, _ = scan.inputs()
    window = [(kk, s, None if j % 3 == 0 else info) for j, (kk, s, info) in enumerate(scan.window)]
    pids = set(_most(sets, ps))
    want = _replayed(window, scan.frames, k, pids)
    _same(stack_columns(window, scan.frames, k, np.zeros(len(k), np.int64), [pids]), want)
    assert [w[2] for w in want] != [w[2] for w in _replayed(scan.window, scan.frames, k, pids)]


def test_any_bins_and_process_sets(monkeypatch):
    """Bins need not be consecutive, and each may ask for any processes (none, one rank, both): the
    window's front and the samples counted are the deque's for each."""
    scan = _Scan(TWO_GPUS, monkeypatch)
    k, _, sets, _ = scan.inputs()
    rng = np.random.default_rng(21)
    pick = np.sort(rng.choice(len(k), size=len(k) // 3, replace=False))
    ranks = sorted({p for s in sets for p in s})
    choices = [frozenset(), frozenset(ranks[:1]), frozenset(ranks[1:]), frozenset(ranks)]
    ps = rng.integers(0, len(choices), size=len(pick))
    want = []
    for kk, p in zip(k[pick].tolist(), ps.tolist(), strict=True):
        want += _replayed(scan.window, scan.frames, np.array([kk]), set(choices[p]))
    _same(stack_columns(scan.window, scan.frames, k[pick], ps, choices), want)
    assert {w[2] > 0 for w in want} == {True, False}


def test_window_bounds_are_the_deque_at_every_frame(monkeypatch):
    """Popping the deque's front at every Frame (Classifier.feed) leaves, at each Frame, the window
    window_bounds gives from that Frame alone; also for Frames picked sparsely."""
    scan = _Scan(WORKERS, monkeypatch)
    window, frames = scan.window, scan.frames
    entries = Entries.of(window)
    every = np.arange(len(frames))
    front, count = window_bounds(entries, np.array(frames), every)
    held: deque = deque()
    nxt = 0
    for k in every.tolist():
        while nxt < len(window) and window[nxt][0] <= k:
            held.append(window[nxt])
            nxt += 1
        while held and held[0][1].t < frames[k] - STACK_WINDOW_S:
            held.popleft()
        assert list(held) == window[front[k] : count[k]], k
    sparse = every[::37]
    assert [*map(tuple, window_bounds(entries, np.array(frames), sparse))] == [
        tuple(front[sparse]),
        tuple(count[sparse]),
    ]
    assert (count - front).max() > 20
