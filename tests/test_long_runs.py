"""Long recordings: progress on a terminal only, flat memory in the export, old recordings still open."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tracemalloc

import pytest
from conftest import REC

from memtop import progress
from memtop.export import export_perfetto
from memtop.report import build_report
from memtop.store import Recording


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)


@pytest.mark.parametrize("what", ["report", "export"])
def test_progress_is_drawn_on_a_terminal(what, no_delay, monkeypatch, tmp_path):
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    rec = Recording(REC[0])
    if what == "report":
        build_report(rec)
    else:
        export_perfetto(rec, tmp_path / "t.json")
    out = err.getvalue()
    assert ("reading" if what == "report" else "exporting") in out and "%" in out


@pytest.mark.parametrize("what", ["report", "export"])
def test_progress_is_quiet_when_piped(what, no_delay, monkeypatch, tmp_path):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    rec = Recording(REC[0])
    if what == "report":
        build_report(rec)
    else:
        export_perfetto(rec, tmp_path / "t.json")
    assert err.getvalue() == ""


def test_cli_report_prints_nothing_on_a_piped_stderr():
    p = subprocess.run(
        [sys.executable, "-m", "memtop", "report", str(REC[0]), "--format", "json"],
        capture_output=True,
        check=True,
    )
    assert p.stderr == b"" and json.loads(p.stdout)["gpus"]


def _export_peak(path, out) -> int:
    tracemalloc.start()
    try:
        export_perfetto(Recording(path), out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_export_memory_does_not_grow_with_the_recording(tmp_path):
    """Three times as many seconds (the same real run repeated) take no more memory to export."""
    sys.path.insert(0, str(REC[0].parent.parent.parent / "bench"))
    from long_runs import tile

    long = tmp_path / "long.memtop"
    tile(REC[2], long, 3 * 142)
    one = _export_peak(REC[2], tmp_path / "a.json")
    three = _export_peak(long, tmp_path / "b.json")
    assert Recording(long).duration > 2.9 * Recording(REC[2]).duration
    assert three < 1.3 * one
