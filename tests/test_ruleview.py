"""The phase rules give the same answer one bin at a time (ruleview.One: live mode) and over arrays
of bins (ruleview.Cols: the report), on every bin of real recordings and on edge values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from conftest import DATA
from onebin import evaluate

from memtop.binscan import Rules
from memtop.phases import (
    EXIT,
    RULE_LABEL,
    RULE_TEXT,
    STICKY,
    Features,
    classify,
    first_rule,
    quiet_view,
    rule_sub,
)
from memtop.ruleview import Cols, One
from memtop.store import Recording


def _cols(fs: list[Features]) -> Cols:
    """The features as arrays, with None as NaN -> 0 beside a has_ flag, as binscan.GpuBins.view."""

    def a(get, dtype=np.float64):
        return np.array([get(f) for f in fs], dtype=dtype)

    def opt(get):
        return np.nan_to_num(a(lambda f: math.nan if get(f) is None else get(f)))

    return Cols(
        graphics=a(lambda f: f.graphics),
        gpm=a(lambda f: f.gpm, bool),
        has_sm=a(lambda f: f.sm is not None, bool),
        sm0=opt(lambda f: f.sm),
        tensor0=opt(lambda f: f.tensor),
        dram0=opt(lambda f: f.dram),
        util0=opt(lambda f: f.util),
        pcie_bps=a(lambda f: f.pcie_bps),
        pcie_frac=a(lambda f: f.pcie_frac),
        nvlink_frac=a(lambda f: f.nvlink_frac),
        proc_cpu=a(lambda f: f.proc_cpu),
        workers=a(lambda f: f.workers, np.int64),
        worker_cpu=a(lambda f: f.worker_cpu),
        worker_sleeping=a(lambda f: f.worker_sleeping),
        stack_n=a(lambda f: f.stack_n, np.int64),
        rise=a(lambda f: f.rise),
        awake=a(lambda f: not f.recent or bool(f.recent - {"idle"}), bool),
        sync_age=a(lambda f: f.sync_age),
        has_peers=a(lambda f: bool(f.peers), bool),
        has_away=a(lambda f: bool(f.peers_elsewhere), bool),
        alive=a(lambda f: f.alive, bool),
        stopped=a(lambda f: f.stopped, bool),
        main_cpu=a(lambda f: f.main_cpu),
        feeder_cpu=a(lambda f: f.feeder_cpu),
        wait=a(lambda f: f.wait, object),
        shares=lambda k: a(lambda f: f.shares.get(k, 0.0)),
        recent=lambda k: a(lambda f: k in f.recent, bool),
    )


def _agree(fs: list[Features]) -> None:
    cols = _cols(fs)
    rules = Rules.over(cols, len(fs), cols.stopped)
    for i, f in enumerate(fs):
        one = One(f)
        rid = first_rule(one)
        assert rules.rid[i] == rid, (i, f)
        if rid in rules.subs:
            assert rules.subs[rid][i] == rule_sub(rid, one)
        for lab, (_, _, keep) in STICKY.items():
            assert rules.keeps[lab][i] == bool(keep(one)), (lab, f)
        assert rules.quiet[i] == bool(quiet_view(one))
        for current in STICKY:  # the exit thresholds as evaluate applies them
            got, text, _ = evaluate(f, current)
            held = RULE_LABEL[rid] in STICKY[current][0] and rules.keeps[current][i]
            assert got == (current if held else RULE_LABEL[rid])
            assert text == RULE_TEXT[EXIT[current] if held else rid]


@pytest.mark.parametrize(
    "name",
    [
        "labelled_s2.memtop",
        "labelled_s2_nogpm.memtop",
        "heldout_torch_s3.memtop",
        "multi/train_ddp_s1.memtop",
    ],
)
def test_every_bin_of_real_runs(name):
    clf = classify(Recording(DATA / name).frames())
    fs = [f for feats in clf.features.values() for f in feats]
    assert len(fs) > 200
    _agree(fs)


_EDGE = [0.0, 0.5, 0.9, 1.0, 5.0, 9.9, 10.0, 15.0, 22.0, 29.9, 30.0, 50.0, 55.0, 60.0, 70.0, 75.0, 79.9]
_EDGE += [80.0, 85.0, 95.0, 100.0]
_FRAC = [0.0, 0.004, 0.005, 0.019, 0.02, 0.1, 0.2, 0.49, 0.5, 0.9]
_CLASSES = ["sync", "copy", "data", "comm", "idle", "other"]


def _features(r: random.Random) -> Features:
    """Features drawn from the rules' edge values, None where a source may be missing."""
    gpm = r.random() < 0.5

    def opt(values):
        return None if r.random() < 0.2 else r.choice(values)

    return Features(
        t=0.0,
        gpu=0,
        gpm=gpm,
        graphics=r.choice(_EDGE),
        sm=opt(_EDGE) if gpm else None,
        tensor=opt(_EDGE) if gpm else None,
        dram=opt(_EDGE),
        pcie_bps=r.choice([0.0, 0.99e9, 1e9, 5e9]),
        pcie_frac=r.choice(_FRAC),
        proc_cpu=r.choice(_EDGE),
        workers=r.randint(0, 3),
        worker_cpu=r.choice(_EDGE),
        worker_sleeping=r.choice([0.0, 0.5, 1.0]),
        iowait=0.0,
        shares={k: r.choice([0.05, 0.1, 0.2, 0.5]) for k in r.sample(_CLASSES, r.randint(0, 3))},
        gil=0.0,
        stack_n=r.choice([0, 3]),
        top=None,
        recent=frozenset(r.sample(["data", "idle", "sync"], r.randint(0, 2))),
        sync_age=r.choice([0.5, 6.0, 6.5, math.inf]),
        util=opt(_EDGE),
        nvlink_frac=r.choice(_FRAC) if gpm else 0.0,
        peers=r.choice([(), (1,)]),
        peers_elsewhere=r.choice([(), (1,)]),
        rise=r.choice([-5.0, 14.9, 15.0, 30.0]),
        alive=r.random() < 0.8,
        stopped=r.random() < 0.2,
        main_cpu=r.choice([-1.0, 0.0, 49.9, 50.0]),
        feeder_cpu=r.choice([0.0, 49.9, 50.0, 200.0]),
        wait=r.choice(["", "lock", "sleep", "pipe", "io", "tty"]),
    )


def test_edge_values():
    r = random.Random(21)
    fs = [_features(r) for _ in range(12_000)]
    assert len({first_rule(One(f)) for f in fs}) == len(RULE_LABEL) - len(STICKY)  # every rule and none
    _agree(fs)
