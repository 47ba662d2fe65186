"""The engine's behaviour: each feature's contract on either backend (phases.One, a bin's scalars in
live mode; ruleview.Cols, arrays of bins in the report), the stack window's, the gap tracker's (one
form, run on each GPU's samples of a bin live and of a chunk in the report), and the report's
labels scored against the markers of the held-out recordings."""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from score import GUARD_S, score

from memtop.analysis import colscan
from memtop.analysis.phases import (
    BIN_MEANS,
    GAP_BUSY,
    GAP_MIN_S,
    RECENT_S,
    STACK_WINDOW_S,
    Classifier,
    One,
    gap_quiet,
    gpu_figures,
    proc_figures,
    stack_info,
    track_gaps,
)
from memtop.analysis.ruleview import Cols
from memtop.analysis.stackwin import Entries, stack_columns
from memtop.core.model import StackFrame, StackSample, ThreadStack
from memtop.storage.store import Recording

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import accuracy  # noqa: E402
from test_accuracy import HELDOUT2_FLOORS, HELDOUT8_FLOORS  # noqa: E402

MISSING = {One: None, Cols: math.nan}


def _on(o, *xs):
    """Values as backend ``o`` takes them: scalars (None for missing) or one-bin arrays (NaN)."""
    if o is One:
        return xs if len(xs) > 1 else xs[0]
    out = tuple(np.array([math.nan if x is None else x]) for x in xs)
    return out if len(xs) > 1 else out[0]


def _got(o, x):
    """A backend's answer as a Python scalar (missing: None)."""
    if o is One:
        return x
    v = np.asarray(x).reshape(-1)[0].item()
    return None if v != v else v


BACKENDS = pytest.mark.parametrize("o", [One, Cols], ids=["one", "cols"])
maybe = st.one_of(st.none(), st.floats(0, 1e12, allow_nan=False))


@BACKENDS
@settings(max_examples=60, deadline=None)
@given(x=maybe, a=st.floats(0, 1e12), b=st.one_of(st.just(0.0), st.floats(1e-3, 1e12)), cond=st.booleans())
def test_the_backends_operations_keep_their_contract(o, x, a, b, cond):
    """A missing value reads 0, a ratio over 0 is 0, ``unless`` makes a value missing."""
    assert _got(o, o.nz(_on(o, x))) == (x or 0.0)
    got = _got(o, o.ratio(*_on(o, a, b)))
    assert got == (0.0 if b == 0 else a / b)
    c = np.array([cond]) if o is Cols else cond
    assert _got(o, o.unless(c, _on(o, x))) == (x if cond else None)


def _figures(o, gpm=True, graphics=50.0, prev=40.0, link=32e9, peak=900e9, **means):
    m = {k: means.get(k) for k in BIN_MEANS}
    args = _on(o, graphics, prev, link, peak)
    mm = {k: _on(o, v) for k, v in m.items()}
    g = np.array([gpm]) if o is Cols else gpm
    return {k: _got(o, v) for k, v in gpu_figures(o, g, args[0], args[1], mm, args[2], args[3]).items()}


@BACKENDS
def test_pcie_counts_both_directions_against_one_directions_link(o):
    f = _figures(o, pcie_rx=8e9, pcie_tx=8e9, link=32e9)
    assert f["pcie_bps"] == 16e9 and f["pcie_frac"] == 0.5
    assert _figures(o, pcie_rx=8e9, link=32e9)["pcie_bps"] == 8e9  # a direction unread moved nothing
    assert _figures(o, pcie_rx=8e9, link=0.0)["pcie_frac"] == 0.0  # an unknown link: no fraction


@BACKENDS
def test_gpm_figures_are_missing_without_gpm(o):
    f = _figures(o, gpm=False, sm=40.0, tensor=10.0, nvlink_rx=100e9, bandwidth=30.0, util=70.0)
    assert f["sm"] is None and f["tensor"] is None and f["nvlink_frac"] == 0.0
    assert f["dram"] == 30.0 and f["util"] == 70.0  # (NVML's memory util stands in for DRAM)
    g = _figures(o, gpm=True, sm=40.0, nvlink_rx=450e9, nvlink_tx=450e9, peak=900e9)
    assert g["sm"] == 40.0 and g["nvlink_frac"] == 1.0


@BACKENDS
def test_rise_is_against_the_previous_bin(o):
    assert _figures(o, graphics=75.0, prev=5.0)["rise"] == 70.0
    assert _figures(o, graphics=5.0, prev=75.0)["rise"] == -70.0


@BACKENDS
def test_workers_figures_are_means_and_zero_without_workers(o):
    def figs(*a):
        return {k: _got(o, v) for k, v in proc_figures(o, *_on(o, *a)).items()}

    f = figs(90.0, 150.0, 3, 1, False, 2.0)
    assert f["proc_cpu"] == 90.0 and f["workers"] == 3
    assert f["worker_cpu"] == 50.0 and f["worker_sleeping"] == pytest.approx(1 / 3)
    none = figs(90.0, 0.0, 0, 0, False, 2.0)
    assert none["worker_cpu"] == 0.0 and none["worker_sleeping"] == 0.0


@BACKENDS
def test_a_gap_is_a_quiet_sample_of_a_gpu_that_holds_a_process(o):
    def quiet(busy, alive):
        b = _on(o, math.nan if busy is None else busy)
        return bool(_got(o, gap_quiet(b, np.array([alive]) if o is Cols else alive)))

    assert quiet(0.0, True) and quiet(GAP_BUSY - 0.1, True)
    assert not quiet(GAP_BUSY, True)
    assert not quiet(0.0, False)  # the job is gone: not a gap in its work
    assert not quiet(None, True)  # not read: no evidence of one


def test_a_gap_is_a_run_of_quiet_samples_ended_by_one_that_is_not():
    t = [0.0, 0.1, 0.2, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4]
    q = [False, True, True, True, False, True, True, False, True, True]
    ends, open_ = track_gaps(q, t.__getitem__, None)
    assert ends == [(4, (0.1, 0.8))]  # 0.7 s, ended by sample 4; the 0.1 s one after it is no gap
    assert open_ == (1.3, 1.4)  # still open after the last sample: the next call goes on with it
    more, still = track_gaps([True, False], [1.9, 2.0].__getitem__, open_)
    assert more == [(1, (1.3, 1.9))] and still is None
    assert track_gaps([False], [5.0].__getitem__, (4.0, 4.0 + GAP_MIN_S))[0] == [(0, (4.0, 4.5))]  # GAP_MIN_S
    assert track_gaps([], [].__getitem__, (1.0, 2.0)) == ([], (1.0, 2.0))


@settings(max_examples=200, deadline=None)
@given(
    q=st.lists(st.booleans(), max_size=60),
    steps=st.lists(st.floats(0.01, 1.0), min_size=60, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_gaps_tracked_piece_by_piece_are_the_gaps_of_the_whole(q, steps, cuts):
    """Live mode calls the tracker on each bin's samples, the report on a chunk's: any cut of the
    samples, the open gap carried from one piece to the next, finds the same gaps."""
    t = list(itertools.accumulate(steps[: len(q)]))
    whole = track_gaps(q, t.__getitem__, None)
    got, gap, lo = [], None, 0
    for hi in [*sorted(c for c in cuts if c <= len(q)), len(q)]:
        ends, gap = track_gaps(q[lo:hi], t[lo:hi].__getitem__, gap)
        got += [(lo + i, span) for i, span in ends]
        lo = hi
    assert (got, gap) == whole
    assert all(b - a >= GAP_MIN_S and not q[i] and q[i - 1] for i, (a, b) in got)
    # the samples between a run's first and its last change nothing (the report tells it no others)
    told = [i for i in range(len(q)) if i in (0, len(q) - 1) or q[i] != q[i - 1] or q[i] != q[i + 1]]
    ends, gap = track_gaps([q[i] for i in told], [t[i] for i in told].__getitem__, None)
    assert ([(told[i], span) for i, span in ends], gap) == whole


@pytest.mark.parametrize("name", ["multi/heldout_ddp_s11.memtop", "labelled_s0.memtop"])
def test_live_mode_and_the_report_find_the_same_gaps_with_the_same_stacks(name):
    """Gaps of up to 22 s (longer than the stack window: the samples in them leave it before they
    end), on two GPUs and on one with stacks: live mode tracks them as each bin closes, with the
    window as the Frame of the sample that ends them left it; the report over a chunk's samples."""
    rec = Recording(DATA / name)
    live = Classifier().feed_all(rec.frames()).gaps
    _, report, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    assert live == report
    assert max(g.duration_s for g in live) > STACK_WINDOW_S and all(g.stack for g in live)


# --- the stack window, on either backend ------------------------------------------------------------


def _sample(t: float, pid: int, fn: str, gil: bool = False) -> StackSample:
    frame = StackFrame(fn, "train.py", 10, "")
    klass = {"sync": "sync", "load": "data", "sleep": "idle"}.get(fn, "other")
    return StackSample(t, pid, (ThreadStack(pid, "MainThread", True, gil, (frame,), klass),))


def _window(samples: list[StackSample], now: float, pids: set[int], o) -> tuple:
    """(shares, gil, n, top, tops, recent, sync_age) of the window at ``now``."""
    if o is One:
        clf = Classifier()
        clf._stacks.extend((s, stack_info(s)) for s in samples if s.t >= now - STACK_WINDOW_S)
        return clf._stack_shares(pids, now)
    frames = np.array([*(s.t for s in samples), now])
    infos = list(dict.fromkeys(stack_info(s) for s in samples))
    n = len(samples)
    entries = Entries(
        np.arange(n),  # each sample enters the window at its own Frame
        np.array([s.t for s in samples]),
        np.array([s.pid for s in samples]),
        np.array([infos.index(stack_info(s)) for s in samples]),
        tuple(infos),
    )
    cols = stack_columns(entries, frames, np.array([n]), np.zeros(1, np.int64), [pids])
    return cols.at(0)


@BACKENDS
def test_the_window_weighs_recent_samples_more_and_forgets_old_ones(o):
    now = 100.0
    samples = [
        _sample(now - 8.0, 1, "sync"),  # out of the window
        _sample(now - 4.0, 1, "compute"),
        _sample(now - 3.0, 2, "sync"),  # another process
        _sample(now - 2.0, 1, "sync", gil=True),
        _sample(now - 0.5, 1, "load"),
    ]
    shares, gil, n, top, tops, recent, sync_age = _window(samples, now, {1}, o)
    assert n == 3
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["data"] > shares["sync"] > shares["other"]  # the newer, the heavier
    assert 0 < gil < shares["sync"] + 1e-12  # only the sync sample held the GIL
    assert sync_age == pytest.approx(2.0)
    assert recent == frozenset({"data"})  # within RECENT_S
    assert top is not None and top[0] == "data" and set(tops) == {"data", "sync", "other"}


@BACKENDS
def test_an_empty_window_has_no_shares_and_no_sync(o):
    got = _window([_sample(90.0, 1, "sync")], 100.0, {1}, o)
    assert got[:3] == ({}, 0.0, 0) and got[6] == math.inf
    got = _window([_sample(99.9, 2, "sync")], 100.0, {1}, o)  # another process's only
    assert got[2] == 0 and got[5] == frozenset()


@BACKENDS
def test_a_sample_at_the_recent_edge_counts_as_recent(o):
    got = _window([_sample(100.0 - RECENT_S, 1, "sleep")], 100.0, {1}, o)
    assert got[5] == frozenset({"idle"})


# --- the report's labels on the held-out recordings --------------------------------------------------


def _report_f1(paths: list[Path]) -> float:
    """The mean macro-F1 of the labels `memtop report` computes (the column scan), GPM + stacks."""
    f1 = []
    for p in paths:
        rec = Recording(p)
        labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
        f1.append(
            score(list(labels[0]), accuracy.markers_of(rec, p), GUARD_S, Classifier().bin_s)["macro_f1"]
        )
    return statistics.mean(f1)


@pytest.mark.parametrize(
    ("name", "floor"),
    [("heldout2", HELDOUT2_FLOORS["GPM + stacks"]), ("heldout8", HELDOUT8_FLOORS["GPM + stacks"])],
)
def test_the_reports_labels_meet_the_held_out_floors(name, floor):
    """The report's own labels (not live mode's) score at least the floors tests/test_accuracy.py
    holds live mode's to, on the runs recorded after the rules froze."""
    assert _report_f1(accuracy.SETS[name]) >= floor


def test_a_ddp_jobs_gpus_are_each_others_peers_in_the_report():
    rec = Recording(DATA / "multi/heldout_ddp_s11.memtop")
    labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    assert sorted(labels) == [0, 1]
    peers = [{lab.t: lab.features.peers for lab in labels[g]} for g in (0, 1)]
    together = [t for t, p in peers[0].items() if p]
    assert len(together) > 0.7 * len(peers[0])  # while the job runs (not before its ranks start)
    assert all(peers[0][t] == (1,) and peers[1][t] == (0,) for t in together)


# Features a rule reads through the view's own (share, recent_has, has_peers, has_away) or not at all
_NOT_BY_NAME = {"gpu", "shares", "gil", "top", "tops", "recent", "peers", "peers_elsewhere"}


def test_a_rule_reads_every_feature_by_its_name_live_and_in_the_report():
    """A feature is declared once, as a Features field: the rules' view of one bin (One) and of a
    report's bins (Cols) both hold it by that name, with the value the bin's Features hold."""
    from memtop.analysis.phases import Features

    rec = Recording(DATA / "multi/heldout_ddp_s11.memtop")
    labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    bins = labels[1].bins
    cols = bins.view()
    names = [n for n in Features.__dataclass_fields__ if n not in _NOT_BY_NAME]
    for i in (0, len(bins) // 2, len(bins) - 1):
        f = bins.features(i)
        one = One(f)
        for n in names:
            x = getattr(cols, n)[i]
            x = x.item() if isinstance(x, np.generic) else x
            assert getattr(one, n) == getattr(f, n), n
            assert (None if x != x else x) == getattr(f, n), n
    assert any(bins.features(i).peers for i in range(len(bins)))  # (peers: the view's has_peers)


@pytest.fixture(scope="module")
def throttled(tmp_path_factory):
    """labelled_s2's first 20 s written again with its GPU held back (samples 0.1 s apart): hardware
    slowdown over [2, 4] s, [4.3, 5] s and [5.8, 6.5] s, then thermal over (6.5, 7.5] s."""
    from dataclasses import replace

    from conftest import REC, cut

    from memtop.storage.store import Writer

    d = tmp_path_factory.mktemp("throttled")
    rec = Recording(cut(REC[2], d / "cut.memtop", 20.0))
    out, t0 = d / "throttled.memtop", rec.t0

    def events(t: float) -> int:
        s = t - t0
        slow = 2.0 <= s <= 4.0 or 4.3 <= s <= 5.0 or 5.8 <= s <= 6.5
        return 0x8 if slow else 0x20 if 6.5 < s <= 7.5 else 0x1  # (0x1, GPU idle: not held back)

    w = Writer(out, rec.meta, force=True)
    for f in rec.frames():
        w.add(replace(f, gpus=tuple(replace(g, clock_events=events(g.t)) for g in f.gpus)))
    w.close()
    return out


def test_throttled_samples_join_into_spans_of_one_reason_and_no_gap_over_half_a_second(throttled):
    from memtop.outputs.report import build_report

    (gpu,) = build_report(Recording(throttled))["gpus"]
    # a hole of 0.3 s joins, one of 0.8 s splits, and so does another reason
    assert [t["reasons"] for t in gpu["throttle"]] == [["hw slowdown"], ["hw slowdown"], ["sw thermal"]]
    spans = [(t["at_s"], t["at_s"] + t["duration_s"]) for t in gpu["throttle"]]
    want = [(2.0, 5.1), (5.8, 6.6), (6.6, 7.6)]  # (a span's last sample counts 0.1 s)
    assert all(abs(a - x) <= 0.15 and abs(b - y) <= 0.15 for (a, b), (x, y) in zip(spans, want, strict=True))
