"""Long recordings: progress on a terminal only, flat memory in the export, old recordings still open."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tracemalloc

import pytest
from conftest import DATA, REC, REC_NOGPM

from memtop import progress
from memtop.outputs.export import export_perfetto
from memtop.outputs.report import build_report
from memtop.storage.store import Recording


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)


def _read(what: str, tmp_path) -> None:
    rec = Recording(REC[0])
    if what == "report":
        build_report(rec)
    else:
        export_perfetto(rec, tmp_path / "t.json")


@pytest.mark.parametrize("what", ["report", "export"])
def test_progress_is_drawn_on_a_terminal(what, no_delay, monkeypatch, tmp_path):
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    _read(what, tmp_path)
    out = err.getvalue()
    assert ("reading" if what == "report" else "exporting") in out and "%" in out


@pytest.mark.parametrize("what", ["report", "export"])
def test_progress_is_quiet_when_piped(what, no_delay, monkeypatch, tmp_path):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    _read(what, tmp_path)
    assert err.getvalue() == ""


def test_cli_report_prints_nothing_on_a_piped_stderr():
    p = subprocess.run(
        [sys.executable, "-m", "memtop", "report", str(REC[0]), "--format", "json"],
        capture_output=True,
        check=True,
    )
    assert p.stderr == b"" and json.loads(p.stdout)["gpus"]


def _export_peak(path, out) -> int:
    from memtop.outputs.export import private_output, write_trace

    tracemalloc.start()
    try:
        with private_output(out, False) as fh:
            write_trace(Recording(path), fh)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_export_memory_does_not_grow_with_the_recording(tmp_path, monkeypatch):
    """More seconds (the same real run repeated) take no more memory to export, a window at a time
    (windows of 100 s here): from rows, the run and three times it; from column blocks, three and
    six times it (column blocks cover five minutes each: the shorter needs one whole block)."""
    import sqlite3

    sys.path.insert(0, str(REC[0].parent.parent.parent / "bench"))
    from long_runs import tile

    from memtop.outputs import export

    monkeypatch.setattr(export, "WINDOW_S", 100.0)
    monkeypatch.setattr(export, "PHASE_WORKER", False)  # (both passes traced in this process)
    files = {1: REC[2]}
    for n in (3, 6):
        files[n] = tmp_path / f"x{n}.memtop"
        tile(REC[2], files[n], n * 142)
    assert Recording(files[6]).duration > 1.9 * Recording(files[3]).duration
    assert Recording(files[3]).duration > 2.9 * Recording(files[1]).duration
    rows = tmp_path / "rows3.memtop"
    rows.write_bytes(files[3].read_bytes())
    with contextlib.closing(sqlite3.connect(rows)) as db, db:
        assert db.execute("DELETE FROM block").rowcount
    for a, b in ((files[1], rows), (files[3], files[6])):
        one = _export_peak(a, tmp_path / f"{a.stem}.json")
        more = _export_peak(b, tmp_path / f"{b.stem}.json")
        assert more < 1.2 * one, (a, one, b, more)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """The real run written again by this version's Writer (chained host blobs, integer series)."""
    sys.path.insert(0, str(REC[0].parent.parent.parent / "bench"))
    from long_runs import rewrite

    out = tmp_path_factory.mktemp("rw") / "s0.memtop"
    rewrite(REC[0], out)  # seed 0 ships as recorded (schema 1): the others were rewritten 2026-11-28
    return out


def test_rewritten_recording_reads_back_the_same(rewritten):
    old, new = list(Recording(REC[0]).frames()), list(Recording(rewritten).frames())
    assert len(old) == len(new)
    for a, b in zip(old, new):
        assert (a.t, a.gpus, a.host, a.perf) == (b.t, b.gpus, b.host, b.perf)
    series = [(a.series, b.series) for a, b in zip(old, new) if a.series]
    assert series
    for sa, sb in series:
        for ca, cb in zip(*(sorted(x, key=lambda c: (c.gpu, c.metric)) for x in (sa, sb)), strict=True):
            assert (ca.gpu, ca.metric, len(ca.t)) == (cb.gpu, cb.metric, len(cb.t))
            assert max(abs(x - y) for x, y in zip(ca.t, cb.t)) <= 0.0006  # kept to the millisecond
            assert max(abs(x - y) for x, y in zip(ca.v, cb.v)) <= 0.051  # at the store scale (0.1)


def test_seek_into_chained_host_blobs_lands_on_the_same_frame(rewritten):
    rec = Recording(rewritten)
    frames = list(rec.frames())
    for k in (0, 1, 19, 20, 21, 333, 777, len(frames) - 1):
        f = rec.seek(frames[k].t)
        assert (f.t, f.gpus, f.host) == (frames[k].t, frames[k].gpus, frames[k].host)
        assert next(rec.frames(start=frames[k].t)).host == frames[k].host


def test_rewritten_recording_is_smaller_and_reports_the_same(rewritten):
    from memtop.outputs.report import build_report

    assert rewritten.stat().st_size < 0.8 * REC[0].stat().st_size
    a, b = build_report(Recording(REC[0])), build_report(Recording(rewritten))
    for r in (a, b):
        r["recording"]["path"] = ""
    assert a == b


@pytest.mark.parametrize(
    "path", [REC[2], REC_NOGPM, DATA / "heldout_shared_s6.memtop", DATA / "heldout_cupy_s5.memtop"]
)
def test_report_reads_every_metric_the_classifier_uses(path):
    """The report reads only the GPU metrics the classifier reads (memtop.analysis.scan.REPORT_READS):
    every label, feature and gap must be what the classifier makes of the whole Frames."""
    from memtop.analysis.phases import Classifier
    from memtop.analysis.scan import REPORT_READS
    from memtop.core.metrics import METRICS

    _SKIP = frozenset(m.name for m in METRICS) - REPORT_READS

    rec = Recording(path)
    whole, lean = (Classifier().feed_all(rec.frames(skip=skip)) for skip in (frozenset(), _SKIP))
    assert any(m in _SKIP for m in ("temp_c", "mem_used"))  # the lean scan does leave some out
    assert sum(map(len, whole.labels.values())) > 50
    for g, labels in whole.labels.items():
        assert [(a.raw, a.label, a.rule, a.features) for a in labels] == [
            (b.raw, b.label, b.rule, b.features) for b in lean.labels[g]
        ]
    assert whole.gaps == lean.gaps


@pytest.mark.parametrize("start", [None, 33.3])
def test_frames_do_not_depend_on_the_read_window(start, monkeypatch):
    """Frames are read a window of rows at a time, sorted per window: edges that cut through every
    second (and a window wider than the recording) must give the same Frames, stacks and host chains."""
    from memtop.storage import store

    rec = Recording(REC_NOGPM)
    t = None if start is None else rec.t0 + start
    seen = []
    for window in (0.37, 1e6):
        monkeypatch.setattr(store, "READ_WINDOW_S", window)
        seen.append([repr(f) for f in rec.frames(t)])
    assert len(seen[0]) > 500 and seen[0] == seen[1]
