"""Properties of the phase rules over any bin (hypothesis draws the features): what each label
promises, and the design's negative controls. The rules are memtop.analysis.phases.RULES as the engine
evaluates them for one bin (phases.One)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtop.analysis import binscan
from memtop.analysis.binscan import Rules, settle_from, settle_guess, settle_more
from memtop.analysis.phases import RULE_LABEL, STICKY, Features, One, first_rule, settle

CLASSES = ("sync", "copy", "data", "comm", "other", "idle")
pct = st.floats(0.0, 100.0)
frac = st.floats(0.0, 1.0)


@st.composite
def features(draw: st.DrawFn, gpm: bool | None = None, stacked: bool | None = None) -> Features:
    gpm = draw(st.booleans()) if gpm is None else gpm
    stacked = draw(st.booleans()) if stacked is None else stacked
    shares: dict[str, float] = {}
    if stacked:
        w = draw(st.lists(frac, min_size=len(CLASSES), max_size=len(CLASSES)))
        total = sum(w) or 1.0
        shares = {k: x / total for k, x in zip(CLASSES, w, strict=True) if x}
    workers = draw(st.integers(0, 8))
    pcie_frac = draw(frac)
    return Features(
        t=0.0,
        gpu=0,
        gpm=gpm,
        graphics=draw(pct),
        sm=draw(pct) if gpm else None,
        tensor=draw(pct) if gpm else None,
        dram=draw(pct),
        pcie_bps=pcie_frac * 64e9,
        pcie_frac=pcie_frac,
        proc_cpu=draw(st.floats(0.0, 400.0)),
        workers=workers,
        worker_cpu=draw(pct) if workers else 0.0,
        worker_sleeping=draw(frac) if workers else 0.0,
        iowait=draw(pct),
        shares=shares,
        gil=draw(frac) if stacked else 0.0,
        stack_n=draw(st.integers(1, 60)) if stacked else 0,
        top=None,
        recent=frozenset(draw(st.sets(st.sampled_from(CLASSES)))) if stacked else frozenset(),
        sync_age=draw(st.floats(0.0, 6.0)) if stacked and "sync" in shares else float("inf"),
        util=draw(pct),
        nvlink_bps=0.0,
        nvlink_frac=draw(frac) if gpm else 0.0,
        rise=draw(st.floats(-100.0, 100.0)),
        alive=draw(st.booleans()),
        stopped=draw(st.booleans()),
    )


def _label(f: Features) -> str:
    return RULE_LABEL[first_rule(One(f))]


@settings(max_examples=400, deadline=None)
@given(features())
def test_every_label_holds_what_its_name_says(f):
    """idle: the GPU does nothing (graphics < 5 %, PCIe < 2 % of the link); compute and memory: the
    graphics engine busy >= 80 %; sync: a GPU neither idle nor saturated (15-80 %); input, cpu:
    an under-used GPU (< 80 %); comm: only with GPM."""
    lab = _label(f)
    if lab == "idle":
        assert f.graphics < 5 and f.pcie_frac < 0.02
    if lab in ("compute", "memory"):
        assert f.graphics >= 80
    if lab == "sync":
        assert 15 <= f.graphics < 80
    if lab in ("input", "cpu"):
        assert f.graphics < 80
    if lab == "comm":
        assert f.gpm


@settings(max_examples=400, deadline=None)
@given(features(gpm=True), st.floats(80.0, 100.0), st.floats(70.0, 100.0), st.floats(0.0, 59.9))
def test_a_saturated_gpu_is_compute_whatever_the_host_does(f, graphics, sm, dram):
    """Negative controls: compute with a per-step .item() (sync stacks), busy DataLoader workers or
    a busy main thread beside a saturated GPU is compute-bound, never a stall or the input pipeline."""
    f = replace(f, graphics=graphics, sm=sm, dram=dram, pcie_frac=min(f.pcie_frac, 0.49), pcie_bps=0.0)
    assert _label(f) == "compute"


@settings(max_examples=400, deadline=None)
@given(features(stacked=False))
def test_without_stacks_only_the_host_figures_name_a_host_phase(f):
    """Without stack samples the rules that read them cannot fire (DESIGN: "without stacks, rules 5-6
    cannot fire"): a sync-stall then needs a busy process (the host and the GPU taking turns), the
    input pipeline DataLoader workers or a busy feeder beside a waiting main thread, and a transfer
    its PCIe traffic (a share of the link, or >= 1 GB/s with the process's CPU in the copy)."""
    lab = _label(f)
    if lab == "sync":
        assert f.proc_cpu >= 50
    if lab == "input":
        assert f.workers > 0 or f.feeder_cpu >= 50
    if lab == "transfer":
        assert f.pcie_frac >= 0.1 or (f.gpm and f.graphics < 5) or (f.pcie_bps >= 1e9 and f.proc_cpu >= 50)


@settings(max_examples=200, deadline=None)
@given(st.lists(features(), min_size=1, max_size=30), st.integers(1, 3))
def test_the_hysteresis_shows_only_labels_a_rule_gave(fs, confirm):
    """settle never invents a label: the one shown is a rule's label of some bin so far, or an exit
    threshold keeping the label shown (warm-up: none)."""
    state = ("", "", 0)
    seen: set[str] = set()
    for k, f in enumerate(fs):
        v = One(f)
        rid, state = settle(
            first_rule(v),
            state,
            k >= 2,
            lambda lab, v=v: bool(STICKY[lab][2](v)),
            f.stopped,
            False,
            confirm,
            0.5,
        )
        seen.add(RULE_LABEL[first_rule(v)])
        assert state[0] in seen | {""}
        assert RULE_LABEL[rid] in seen | set(STICKY)


@st.composite
def rules(draw: st.DrawFn, n: int) -> Rules:
    """``n`` bins' rules: rule ids (few distinct, so labels repeat and the hysteresis holds and
    changes), exit thresholds, quiet and stopped flags."""
    ids = draw(st.lists(st.sampled_from(range(len(RULE_LABEL))), min_size=1, max_size=4))
    rid = np.array(draw(st.lists(st.sampled_from(ids), min_size=n, max_size=n)), dtype=np.int64)
    flags = st.lists(st.booleans(), min_size=n, max_size=n)
    keeps = {lab: np.array(draw(flags), dtype=bool) for lab in STICKY}
    return Rules(rid, keeps, np.array(draw(flags), dtype=bool), np.array(draw(flags), dtype=bool), {})


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 80), st.integers(0, 80), st.integers(1, 3), st.sampled_from([2, 3, 8]))
def test_a_later_chunks_guess_gives_the_labels_of_one_pass(data, a, b, confirm, guess_bins):
    """A later chunk's hysteresis guessed from a fresh state in its own process (settle_guess), taken
    from where the true run meets it (settle_from), gives the labels and state of one pass over both
    chunks, whether the runs meet or not, inside the warm-up or after it."""
    whole = data.draw(rules(a + b))
    head = Rules(
        whole.rid[:a], {k: v[:a] for k, v in whole.keeps.items()}, whole.quiet[:a], whole.stopped[:a], {}
    )
    rest = whole.take(a)
    one = settle_more(whole, 2, confirm, 0.5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(binscan, "GUESS_BINS", guess_bins)
        rid, stable, at = settle_more(head, 2, confirm, 0.5)
        more = settle_from(rest, 2, confirm, 0.5, at, settle_guess(rest, 2, confirm, 0.5))
    assert np.concatenate([rid, more[0]]).tolist() == one[0].tolist()
    assert stable + more[1] == one[1]
    assert more[2] == one[2]
