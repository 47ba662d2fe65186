"""The verdict and the report say which evidence is missing and what it costs, on real H100 runs."""

from __future__ import annotations

from pathlib import Path

from memtop.analysis.phases import classify
from memtop.analysis.verdict import verdict
from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording

DATA = Path(__file__).parent / "data"


def test_nothing_is_missing_with_gpm_and_stacks():
    rec = Recording(DATA / "heldout2_cupy_s24.memtop")
    v = verdict(classify(rec.frames()).labels[0], window_s=1e9)
    assert v.missing == ""


def test_a_run_without_stacks_says_what_stacks_would_add():
    rec = Recording(DATA / "heldout2_cupy_s24.memtop")
    v = verdict(classify(rec.frames(), use_stacks=False).labels[0], window_s=1e9)
    assert v.missing.startswith("missing stacks:") and "0.983" in v.missing and "0.991" in v.missing


def test_an_nvml_only_recording_reports_the_missing_gpm_and_its_cost():
    rep = build_report(Recording(DATA / "labelled_s2_nogpm.memtop"))
    assert rep["gpus"][0]["verdict"]["missing"].startswith("missing GPM:")
    for fmt, head in (
        ("text", "missing evidence: missing GPM"),
        ("markdown", "**Missing evidence:** missing GPM"),
    ):
        assert head in render(rep, fmt)


def test_an_idle_gpu_claims_no_missing_evidence_and_its_next_phase_does():
    """Nothing runs in an idle window, so no source is missing there; the CPU-bound phase after it, read
    without stacks, says what stacks would add (real H100 run)."""
    labs = classify(Recording(DATA / "heldout2_cupy_s24.memtop").frames(), use_stacks=False).labels[0]
    first_busy = next(i for i, lab in enumerate(labs) if lab.label not in ("idle", "warmup"))
    assert verdict(labs[:first_busy], window_s=1e9).missing == ""
    assert verdict(labs[: first_busy + 10], window_s=1e9).missing.startswith("missing stacks:")
