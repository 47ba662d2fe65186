"""Accuracy of today's rules over every labelled H100 recording, replayed from raw stacks.

Floors sit under what bench/accuracy.py measures (bench/RESULTS.md), at the 0.5 s guard band. The
mutation test proves the floors exercise the stack classifier: with `classify` a constant, they fail.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import statistics
import sys
from pathlib import Path

import pytest
from score import GUARD_S, score

from memtop.analysis.phases import Label
from memtop.core import stackclass
from memtop.core.model import Marker

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import accuracy  # noqa: E402

SETS = ("first", "train", "heldout", "heldout2")
# Floors a little under what bench/accuracy.py measured at the 0.5 s guard (bench/RESULTS.md, rules
# frozen at 6d1143b): every recording 0.986 / 0.981 / 0.961; the heldout2 runs alone 0.998 / 0.981 / 0.994
FLOORS = {
    "GPM + stacks": 0.97,
    "NVML-only (GPM dropped on read)": 0.96,
    "GPM, no stacks (stacks dropped on read)": 0.94,
}
HELDOUT2_FLOORS = {
    "GPM + stacks": 0.99,
    "NVML-only (GPM dropped on read)": 0.97,
    "GPM, no stacks (stacks dropped on read)": 0.98,
}
# The heldout3 runs (rules frozen at c800a45) were recorded without py-spy on the device's PATH: they
# hold no stacks, so only the no-stacks modes are measured on them (0.995 and 0.868 at the 0.5 s guard).
# They stay out of SETS: a stack mode on them would score the no-stacks rules under another name.
HELDOUT3_FLOORS = {
    "GPM, no stacks (stacks dropped on read)": 0.985,
    "NVML-only, no stacks (both dropped on read)": 0.85,
}
# The heldout4 runs: the same frozen rules (c800a45), recorded again with py-spy on PATH (3 runs, H100,
# 2026-11-24): 0.994 / 0.985 / 0.990 / 0.937 at the 0.5 s guard, every mode measured.
HELDOUT4_FLOORS = {
    "GPM + stacks": 0.985,
    "NVML-only (GPM dropped on read)": 0.975,
    "GPM, no stacks (stacks dropped on read)": 0.98,
    "NVML-only, no stacks (both dropped on read)": 0.92,
}
# The heldout5 runs (rules frozen at 6ce3395; 5 runs with stacks and sparse native dumps, a memory-bound
# phase in each torch and CuPy run, H100, 2026-11-24): 0.970 / 0.965 / 0.946 / 0.861 at the 0.5 s guard.
HELDOUT5_FLOORS = {
    "GPM + stacks": 0.96,
    "NVML-only (GPM dropped on read)": 0.955,
    "GPM, no stacks (stacks dropped on read)": 0.935,
    "NVML-only, no stacks (both dropped on read)": 0.85,
}
# The heldout6 runs (rules frozen at ca6d729: one-bin excursions held; 5 runs with stacks, H100,
# 2026-11-24): 0.969 / 0.968 / 0.995 / 0.895 at the 0.5 s guard.
HELDOUT6_FLOORS = {
    "GPM + stacks": 0.96,
    "NVML-only (GPM dropped on read)": 0.96,
    "GPM, no stacks (stacks dropped on read)": 0.985,
    "NVML-only, no stacks (both dropped on read)": 0.885,
}
# The heldout7 runs (the same rules, ca6d729; automatic native dumps off by default; 5 runs with stacks,
# H100, 2026-11-24): 0.995 / 0.989 / 0.994 / 0.881 at the 0.5 s guard.
HELDOUT7_FLOORS = {
    "GPM + stacks": 0.99,
    "NVML-only (GPM dropped on read)": 0.985,
    "GPM, no stacks (stacks dropped on read)": 0.99,
    "NVML-only, no stacks (both dropped on read)": 0.875,
}
# The heldout8 runs (rules frozen at b1493d5, declared before recording; 5 runs with stacks, defaults,
# H100, 2026-11-24), scored once: 0.991 / 0.986 / 0.983 / 0.878 at the 0.5 s guard (0.974 without GPM or
# stacks under the ninth freeze, issue #35: a pageable copy told from PCIe and the host CPU in it).
HELDOUT8_FLOORS = {
    "GPM + stacks": 0.985,
    "NVML-only (GPM dropped on read)": 0.98,
    "GPM, no stacks (stacks dropped on read)": 0.975,
    "NVML-only, no stacks (both dropped on read)": 0.87,
}
_CACHE: dict = {}
_LABELS: dict[Path, dict[str, tuple[list[Label], float]]] = {}
_SHARED: list[Path] = []  # this run's folder for labels, shared by the xdist workers


@pytest.fixture(scope="module", autouse=True)
def _shared_labels(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's base sits in the run's own folder (a fresh one each run)
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "accuracy-labels"
    shared.mkdir(exist_ok=True)
    _SHARED[:] = [shared]


def _labelled(paths: list[Path]) -> None:
    """Every mode's labels of each recording, classified once in the whole run: the worker that takes
    a recording's lock first reads its frames once for all the modes and leaves the labels for the
    other, which meanwhile takes the recordings nobody holds."""
    todo = [p for p in paths if p not in _LABELS]
    for wait in (False, True):
        for p in list(todo):
            done = _SHARED[0] / f"{p.name}.pickle"
            with open(_SHARED[0] / f"{p.name}.lock", "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    continue
                if not done.exists():
                    tmp = done.with_suffix(".tmp")
                    tmp.write_bytes(pickle.dumps(accuracy.labelled(p)))
                    tmp.rename(done)
                _LABELS[p] = pickle.loads(done.read_bytes())
            todo.remove(p)


def scored(mode: str, name: str, checked: bool = False) -> list[dict]:
    """Scores of one set in one mode (memoised: several tests read the same replay)."""
    key = (mode, name, checked)
    if key not in _CACHE:
        paths = accuracy.SETS[name]
        _labelled(paths)
        old = accuracy.CHECKED
        accuracy.CHECKED = checked
        try:
            _CACHE[key] = [accuracy.score_labels(p, *_LABELS[p][mode], GUARD_S) for p in paths]
        finally:
            accuracy.CHECKED = old
    return _CACHE[key]


def mean_f1(mode: str, sets=SETS) -> tuple[float, list[dict]]:
    ss = [s for name in sets for s in scored(mode, name)]
    return statistics.mean(s["macro_f1"] for s in ss), ss


def test_every_set_has_recordings():
    assert all(accuracy.SETS[name] for name in SETS)
    assert len(accuracy.SETS["heldout2"]) >= 8
    assert len(accuracy.SETS["heldout3"]) >= 4
    assert len(accuracy.SETS["heldout4"]) >= 3
    assert len(accuracy.SETS["heldout5"]) >= 5
    assert len(accuracy.SETS["heldout6"]) >= 5
    assert len(accuracy.SETS["heldout7"]) >= 5


def test_the_eighth_round_holds_only_the_runs_declared_before_recording():
    """heldout8's names were committed with the freeze; a run recorded under another name (or a second
    try of one) is not part of the held-out set."""
    assert len(accuracy.HELDOUT8) == 5 and len(set(accuracy.HELDOUT8)) == 5
    recorded = {p.stem for p in accuracy.DATA.glob("heldout8_*.memtop")}
    assert recorded <= set(accuracy.HELDOUT8)
    assert [p.stem for p in accuracy.SETS["heldout8"]] == [n for n in accuracy.HELDOUT8 if n in recorded]


@pytest.mark.parametrize("mode", list(FLOORS))
def test_macro_f1_over_every_recording(mode):
    f1, ss = mean_f1(mode)
    assert f1 >= FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT2_FLOORS))
def test_macro_f1_on_the_runs_recorded_after_the_freeze(mode):
    f1, ss = mean_f1(mode, sets=("heldout2",))
    assert f1 >= HELDOUT2_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT3_FLOORS))
def test_macro_f1_on_the_runs_recorded_after_the_third_freeze(mode):
    f1, ss = mean_f1(mode, sets=("heldout3",))
    assert f1 >= HELDOUT3_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT4_FLOORS))
def test_macro_f1_on_the_runs_recorded_after_the_third_freeze_with_stacks(mode):
    f1, ss = mean_f1(mode, sets=("heldout4",))
    assert f1 >= HELDOUT4_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT5_FLOORS))
def test_macro_f1_on_the_runs_recorded_after_the_fifth_freeze(mode):
    f1, ss = mean_f1(mode, sets=("heldout5",))
    assert f1 >= HELDOUT5_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT5_FLOORS))
def test_the_memory_bound_phases_of_the_fifth_round_are_found(mode):
    """The first held-out memory-bound phases (torch mem_stream, CuPy copies): most of their bins."""
    ss = scored(mode, "heldout5")
    found = sum(s["confusion"].get("memory->memory", 0) for s in ss)
    total = sum(v for s in ss for k, v in s["confusion"].items() if k.startswith("memory->"))
    assert total >= 20 and found / total >= 0.9, [s["confusion"] for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT5_FLOORS))
def test_flips_after_detection_on_the_fifth_round_under_the_excursion_hold(mode):
    """0.52/min there under 6ce3395 (target < 0.2): two CPU-bound phases of heldout5_torch_s64 each
    left their label for one bin (an idle bin in hf_tiny, an unclassified one in neg_acc_item). The
    sixth round's hold (phases.confirm_bins) was designed knowing them, so heldout5 is seen data now:
    0.0 in every mode."""
    ss = scored(mode, "heldout5")
    assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2


@pytest.mark.parametrize("mode", list(HELDOUT6_FLOORS))
def test_macro_f1_on_the_runs_recorded_after_the_sixth_freeze(mode):
    f1, ss = mean_f1(mode, sets=("heldout6",))
    assert f1 >= HELDOUT6_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT6_FLOORS))
def test_flips_after_detection_on_the_sixth_round_under_the_stopped_hold(mode):
    """Missed there under ca6d729 (0.39/min with GPM, 0.65 NVML-only; target < 0.2), all in
    heldout6_torch_s75: three sync loops left their label for a bin each while the process stood
    stopped ('t', ~0.5 s: a py-spy dump) and the GPU drained. The eighth freeze's stopped hold
    (phases.confirm_bins, Features.stopped) was designed knowing them, so this is seen data: 0.0."""
    ss = scored(mode, "heldout6")
    assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2


@pytest.mark.parametrize("mode", list(HELDOUT7_FLOORS))
def test_macro_f1_on_the_seventh_round(mode):
    f1, ss = mean_f1(mode, sets=("heldout7",))
    assert f1 >= HELDOUT7_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]


@pytest.mark.parametrize("mode", list(HELDOUT7_FLOORS))
def test_flips_and_false_sync_on_the_seventh_round_under_the_eighth_freeze(mode):
    """Missed there under ca6d729, both in heldout7_torch_s85's resnet50 control: 0.26 flips a minute
    with GPM (one bin of DRAM 67 % read memory-bound) and 0.5 s of false sync-stall in the stack modes
    (its first second, the GPU ramping while the main thread slept). The eighth freeze's rules (a
    compute/memory change needs two bins; the take-turns rule needs the main thread awake) were
    designed knowing them, so this is seen data: 0.0 and 0 s."""
    ss = scored(mode, "heldout7")
    assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2
    assert sum(s["neg_false_sync_s"] for s in ss) == 0


@pytest.mark.parametrize("mode", list(HELDOUT8_FLOORS))
def test_macro_f1_flips_and_false_sync_on_the_eighth_round(mode):
    """Held out under b1493d5 and never tuned on: #18's targets (flips < 0.2 a minute after detection,
    no false sync-stall on the negative controls, median detection <= 1.5 s) measured 0.0-0.13 flips,
    0 s, 0.86-0.89 s."""
    f1, ss = mean_f1(mode, sets=("heldout8",))
    assert len(ss) == 5
    assert f1 >= HELDOUT8_FLOORS[mode], [(s["name"], s["macro_f1"]) for s in ss]
    assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2
    assert sum(s["neg_false_sync_s"] for s in ss) == 0
    assert statistics.median(s["latency_median_s"] for s in ss) <= 1.5


def test_no_stacks_flips_on_the_tuning_runs():
    """#18's flips target in the two no-stacks modes, on every run the rules may be tuned on: a pageable
    copy without GPM or stacks read CPU-bound, then sync, then compute (NVML util counts the copy
    engines); a 27 % sync stall's GPM graphics read 9 % for one bin. Measured 0.0-0.13 since the fix."""
    for mode in ("GPM, no stacks (stacks dropped on read)", "NVML-only, no stacks (both dropped on read)"):
        for name in ("first", "train", "heldout2", "heldout3"):
            ss = scored(mode, name)
            assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2, (mode, name)


@pytest.mark.parametrize(
    ("mode", "name"),
    [
        ("GPM + stacks", "heldout4"),
        ("NVML-only (GPM dropped on read)", "heldout4"),
        ("GPM + stacks", "heldout2"),
        ("NVML-only (GPM dropped on read)", "heldout2"),
        *((mode, "heldout3") for mode in HELDOUT3_FLOORS),
    ],
)
def test_flips_after_detection_on_the_held_out_runs(mode, name):
    """NVML-only flickered between sync and CPU-bound (0.53/min on heldout2 under 6d1143b) where a
    sync loop's small kernels left NVML memory util at 0-1 %; measured 0.0 since c800a45."""
    ss = scored(mode, name)
    assert statistics.mean(s["flips_after_detection_per_min"] for s in ss) < 0.2


def test_false_sync_stall_on_negative_controls_with_stacks():
    """None on the training runs, nor on the first held-out runs without the phases whose own numbers
    contradict their label (accuracy.HELDOUT_UNSOUND, listed when they were first scored: no known
    truth). The heldout2 runs had 2.5 s under 6d1143b (a resnet50 control's first second while the
    GPU ramped up, an overlapped-copy loop's dip); none since c800a45, which was tuned with them in
    view (spent). The heldout3 runs, recorded after it, have none in either mode they can measure, nor
    the heldout4, heldout5 and heldout6 runs (with stacks) in any mode; nor the heldout7 runs since the
    eighth freeze (0.5 s before it, in the stack modes)."""
    ss = scored("GPM + stacks", "train") + scored("GPM + stacks", "first")
    ss += scored("GPM + stacks", "heldout", checked=True)
    ss += scored("GPM + stacks", "heldout2")
    ss += [s for mode in HELDOUT3_FLOORS for s in scored(mode, "heldout3")]
    ss += [s for mode in HELDOUT4_FLOORS for s in scored(mode, "heldout4")]  # every mode, with stacks
    ss += [s for mode in HELDOUT5_FLOORS for s in scored(mode, "heldout5")]
    ss += [s for mode in HELDOUT6_FLOORS for s in scored(mode, "heldout6")]
    ss += [s for mode in HELDOUT7_FLOORS for s in scored(mode, "heldout7")]
    assert sum(s["neg_false_sync_s"] for s in ss) == 0, [(s["name"], s["confusion"]) for s in ss]


def test_the_cost_of_missing_evidence_on_screen_is_what_was_measured():
    """The verdict's "missing ..." line states held-out macro-F1 per evidence mode: heldout8's (recorded
    with the defaults after the b1493d5 freeze) as scored then, to the third decimal."""
    from memtop.analysis.verdict import FULL_F1, MISSING_COST

    modes = {
        "GPM, no stacks": "GPM, no stacks (stacks dropped on read)",
        "NVML-only + stacks": "NVML-only (GPM dropped on read)",
        "NVML-only, no stacks": "NVML-only, no stacks (both dropped on read)",
    }
    assert set(modes) == set(MISSING_COST)
    assert abs(mean_f1("GPM + stacks", sets=("heldout8",))[0] - FULL_F1) <= 0.0005
    for ev, mode in modes.items():
        assert abs(mean_f1(mode, sets=("heldout8",))[0] - MISSING_COST[ev][1]) <= 0.0005, ev


def test_the_declared_soundness_check_finds_the_phases_judged_unsound_by_hand():
    """The check declared for heldout2 before recording it (the driver's NVML util, the workload's own
    wait fraction) agrees with the judgments made by hand on the first held-out runs."""
    from memtop.storage.store import Recording

    found = set()
    for p in accuracy.SETS["heldout"]:
        rec = Recording(p)
        found |= {m.name for m in rec.markers() if accuracy.unsound(rec, m)}
    assert found == set(accuracy.HELDOUT_UNSOUND)


def test_a_constant_stack_classifier_fails_the_accuracy_floor(monkeypatch):
    """CI tests today's rules: stacks are classified on read, so breaking classify() shows."""
    monkeypatch.setattr(stackclass, "classify", lambda frames, active, gil=None: "other")
    ss = accuracy.scores(accuracy.SETS["train"], "GPM + stacks", GUARD_S)
    assert statistics.mean(s["macro_f1"] for s in ss) < FLOORS["GPM + stacks"]


def _labels(seq: str, bin_s: float = 0.5) -> list[Label]:
    names = {"c": "compute", "s": "sync"}
    return [Label(i * bin_s, 0, names[ch], names[ch], 0.9, "", None) for i, ch in enumerate(seq)]  # type: ignore[arg-type]


def test_guard_band_is_half_a_second_and_counts_bins_past_it():
    assert GUARD_S == 0.5
    m = [Marker(0.0, 10.0, "sync", "x", {})]
    # a wrong label from 0.5 s to 1.5 s: outside a 1 s guard it would be half hidden; at 0.5 s it counts
    s = score(_labels("sccssssssssssssssssss"), m, bin_s=0.5)
    assert s["guard_s"] == 0.5 and s["confusion"].get("sync->compute") == 2


def test_macro_f1_counts_a_predicted_class_that_was_never_true():
    m = [Marker(0.0, 10.0, "sync", "x", {})]
    s = score(_labels("ssssscssssssssssssss"), m, bin_s=0.5)
    assert "compute" in s["classes"] and s["macro_f1"] <= 0.5


def test_latency_counts_a_phase_that_repeats_the_previous_label_and_a_missed_one():
    m = [
        Marker(0.0, 5.0, "sync", "a", {}),
        Marker(5.0, 10.0, "sync", "b", {}),
        Marker(10.0, 15.0, "compute", "c", {}),
        Marker(15.0, 20.0, "compute", "d", {}),
    ]
    s = score(_labels("s" * 40), m, bin_s=0.5)
    # the repeated sync phase is detected at once; the two missed phases count their whole length
    assert s["missed_phases"] == 2 and s["latency_median_s"] == 2.75
