"""The report's wording on real recordings: the command the recording ran (not `python train.py`), the
headline's GPU named once, "the longest N of M gaps", perf rates with units, and no raw py-spy error
for a process whose stacks it cites."""

from __future__ import annotations

import re

from conftest import DATA, REC

from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording


def _text(path) -> tuple[dict, str]:
    rep = build_report(Recording(path))
    return rep, render(rep, "text")


def test_the_command_is_the_one_the_recording_ran_and_the_headline_names_its_gpu_once():
    rep, text = _text(REC[4])  # its process has exited by the last frame
    cmd = rep["gpus"][0]["verdict"]["command"]
    assert "python train.py" not in cmd and "bench/workload.py --markers" in cmd
    assert "\nGPU 0 " in text and "GPU 0 — GPU 0" not in text


def test_gaps_say_which_of_them_are_listed_and_perf_rates_have_units():
    rep, text = _text(REC[4])
    gaps = rep["gpus"][0]["gaps"]
    assert len(gaps) > 5
    head = next(line for line in text.splitlines() if line.startswith("GPU gaps"))
    assert head.endswith(f": {len(gaps)}; the longest 5 of {len(gaps)}:")
    listed = [float(m) for m in re.findall(r"for ([0-9.]+) s:", text)]
    assert sorted(listed) == sorted(sorted((g["duration_s"] for g in gaps), reverse=True)[:5])
    perf = next(line for line in text.splitlines() if line.startswith("perf "))
    assert re.search(r"page-faults \d+/s", perf) and re.search(r"task-clock \d\.\d\d CPUs busy", perf)


def test_no_raw_py_spy_error_for_a_process_whose_stacks_are_cited():
    rep, text = _text(DATA / "heldout2_cupy_s24.memtop")
    assert rep["gpus"][0]["phase_stacks"]  # its stacks are cited
    stacks = [u for u in rep["unavailable"] if u["source"] == "stacks"]
    assert stacks and all(u["detail"].startswith("some stack reads failed") for u in stacks)


def test_the_verdict_names_its_window_as_the_report_s_range():
    """A report of a whole recording said "24 % of the last 0:03:21": a live view's words for a window
    that is the whole run. A range asked for is named by its bounds."""
    whole = build_report(Recording(REC[4]))
    head = whole["gpus"][0]["verdict"]["headline"]
    assert head.endswith(" of the run (0:03:21)") and "of the last" not in head, head
    part = build_report(Recording(REC[4]), t_from=60.0, t_to=120.0)
    head = part["gpus"][0]["verdict"]["headline"]
    assert head.endswith(" of 0:01:00–0:02:00") and "of the last" not in head, head
