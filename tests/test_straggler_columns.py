"""straggler.episodes by columns: the episodes of a straightforward bin-by-bin judgement (each GPU's
labels of the window before every bin counted and weighed by straggler._judge, as the live pipeline
weighs them) on the recorded DDP runs, and in a fraction of a second for 8 hours of their bins."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA

from memtop.colscan import report_scan
from memtop.jobs import jobs_of
from memtop.labelcols import LabelCols, columns
from memtop.phases import Classifier
from memtop.store import Recording
from memtop.straggler import WINDOW_S, Episode, _fractions, _judge, episodes

RUNS = sorted((DATA / "multi").glob("*.memtop"))
BIN_S = Classifier().bin_s


def _scan(path: Path) -> tuple[dict, dict[int, str]]:
    rec = Recording(path)
    lo, hi = rec.span(None, None)
    labels, _, agg = report_scan(rec, lo, hi, False, True)
    return labels, jobs_of(agg.procs)


def _per_bin(labels: Mapping[int, Sequence], jobs: Mapping[int, str], window_s: float) -> list[Episode]:
    """At every bin start of the job's GPUs, each GPU's labels of (t - window_s, t] in a Counter keyed
    in the order its labels first came (as a sweep's Counter, whose order breaks a tie), judged;
    the flags merged where they are at most a bin apart in one phase."""
    if len(set(jobs.values())) == len(jobs):
        return []
    cols = {g: columns(ls) for g, ls in labels.items() if g in jobs}
    assert all((np.diff(c.t) > 0).all() for c in cols.values())  # so first in time is first in order
    flags: dict[int, list[tuple[float, str, tuple[int, ...]]]] = {}
    for t in np.unique(np.concatenate([c.t for c in cols.values()])).tolist():
        shares = {}
        for g, c in cols.items():
            n: Counter[str] = Counter(dict.fromkeys(c.label.tolist(), 0))
            n.update(c.label[(c.t > t - window_s) & (c.t <= t)].tolist())
            shares[g] = _fractions(n)
        for s in _judge(shares, jobs, window_s):
            flags.setdefault(s.gpu, []).append((t, s.phase, s.peers))
    out = []
    for gpu, fs in sorted(flags.items()):
        run = [fs[0]]
        for f in fs[1:]:
            if f[0] - run[-1][0] > 1.5 * BIN_S or f[1] != run[-1][1]:
                out.append(Episode(gpu, run[0][0], run[-1][0] + BIN_S, run[-1][1], run[-1][2]))
                run = []
            run.append(f)
        out.append(Episode(gpu, run[0][0], run[-1][0] + BIN_S, run[-1][1], run[-1][2]))
    return out


@pytest.mark.parametrize("window_s", [1.0, WINDOW_S, 10.0])
@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_episodes_are_the_bin_by_bin_judgement(path, window_s):
    labels, jobs = _scan(path)
    got = episodes(labels, jobs, BIN_S, window_s)
    assert got == _per_bin(labels, jobs, window_s)
    assert got or window_s == 10.0  # (a 10 s window lags these runs' 8 s phases)


def test_episodes_of_live_labels():
    """Labels as Label objects (live mode's form) give the episodes their columns give."""
    labels, jobs = _scan(RUNS[0])
    live = {g: list(ls) for g, ls in labels.items()}
    assert episodes(live, jobs, BIN_S) == episodes(labels, jobs, BIN_S) != []


class _Tiled(Sequence):
    """A GPU's label columns repeated end to end (only columns() is read)."""

    def __init__(self, c: LabelCols, times: int):
        step = BIN_S * (round((c.t[-1] - c.t[0]) / BIN_S) + 1)
        t = np.concatenate([c.t + i * step for i in range(times)])
        self.cols = LabelCols(t, *(np.tile(a, times) for a in (c.label, c.raw, c.mode)))

    def columns(self) -> LabelCols:
        return self.cols

    def __len__(self) -> int:
        return len(self.cols.t)

    def __getitem__(self, i):  # type: ignore[override]
        raise NotImplementedError


def test_eight_hours_of_bins_repeat_the_tiles_episodes():
    """Eight hours of a real run's labels (tiled columns): each tile's episodes again (its time is
    the report's, measured in bench/long_runs.py, not here)."""
    labels, jobs = _scan(RUNS[0])
    one = episodes(labels, jobs, BIN_S)
    span = max(len(ls) for ls in labels.values()) * BIN_S
    times = int(8 * 3600 / span) + 1
    long = {g: _Tiled(columns(ls), times) for g, ls in labels.items()}
    got = episodes(long, jobs, BIN_S)
    assert len(got) >= times * len(one) - times  # (an episode at a seam may join the next tile's)
