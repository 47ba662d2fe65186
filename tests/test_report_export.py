"""`memtop report` and `memtop export` on the committed H100 recordings."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from conftest import REC, REC_NOGPM

from memtop.cli import main
from memtop.export import GPU_PID_BASE, events, export_perfetto
from memtop.phases import classify
from memtop.report import build_report, render
from memtop.store import Recording

SCHEMA = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_report_snapshot(fmt, snapshot):
    rep = build_report(Recording(REC[0]))
    rep["recording"]["path"] = "labelled_s0.memtop"
    rep["recording"]["started"] = "<start>"  # local time zone of the machine
    assert render(rep, fmt) == snapshot


def test_report_json_validates_against_its_schema():
    for seed in (0, 2):
        rep = json.loads(render(build_report(Recording(REC[seed])), "json"))
        jsonschema.validate(rep, SCHEMA)
        g = rep["gpus"][0]
        assert abs(sum(p["share"] for p in g["phases"].values()) - 1.0) < 0.01
        assert g["pcie"]["link"] == "Gen5 x16" and g["pcie"]["peak_pct_link"] > 85
        assert len(rep["markers"]) == 19


def test_report_names_the_sync_line_and_pinned_memory():
    rep = build_report(Recording(REC[0]))
    stacks = rep["gpus"][0]["phase_stacks"]
    assert any(".item()" in s["code"] for s in stacks["sync"])
    assert any("copy_" in s["code"] for s in stacks["transfer"])


def test_report_time_range_and_gpu_filter():
    rec = Recording(REC[0])
    m = next(m for m in rec.markers() if m.name == "memory")
    rep = build_report(rec, gpu=0, t_from=m.t0 - rec.t0 + 1, t_to=m.t1 - rec.t0)
    assert max(rep["gpus"][0]["phases"], key=lambda k: rep["gpus"][0]["phases"][k]["share"]) == "memory"


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["report", str(REC[0]), "--gpu", "5"], "no GPU 5"),
        (["report", str(REC[0]), "--from", "900"], "empty time range"),
        (["report", "/nonexistent.memtop"], "no such file"),
    ],
)
def test_report_bad_input_is_one_line_exit_2(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


ALLOWED_PH = {"M", "C", "X", "i"}


def test_perfetto_export_follows_the_trace_event_format(tmp_path):
    out = tmp_path / "t.json"
    rec = Recording(REC[0])
    n = export_perfetto(rec, out)
    doc = json.loads(out.read_text())
    ev = doc["traceEvents"]
    assert len(ev) == n and doc["metadata"]["clock"] == "CLOCK_MONOTONIC"
    for e in ev:  # strict checks against the Trace Event Format
        assert e["ph"] in ALLOWED_PH and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["name"], str) and e["name"]
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] > 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
    counts = Counter((e["ph"], e["name"]) for e in ev)
    n_gpu_rows = rec.summary()["rows"]["gpu"]
    assert counts[("C", "SM %")] == n_gpu_rows  # one counter sample per recorded GPU row
    labels = [lab.label for lab in classify(Recording(REC[0]).frames()).labels[0] if lab.label != "warmup"]
    runs = sum(1 for a, b in zip(labels, labels[1:]) if a != b) + 1
    slices = [e for e in ev if e["ph"] == "X" and e["pid"] == GPU_PID_BASE and e["tid"] == 1]
    assert len(slices) == runs
    assert len([e for e in ev if e["ph"] == "X" and e["tid"] == 2]) == 19  # markers


def test_export_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("{}")
    assert main(["export", str(REC[0]), "--perfetto", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["export", str(REC[0]), "--perfetto", "/nonexistent/dir/t.json"]) == 2


def test_events_are_time_ordered_per_counter_track():
    ev = events(Recording(REC[2]))
    ts = [e["ts"] for e in ev if e["ph"] == "C" and e["name"] == "SM %"]
    assert ts == sorted(ts)


def _labels(labels: dict) -> dict:
    return {
        g: [(lab.t, lab.label, lab.raw, lab.rule, lab.confidence, lab.sub) for lab in ls]
        for g, ls in labels.items()
    }


@pytest.mark.parametrize("path", [REC[0], REC_NOGPM])
def test_report_scanned_in_parallel_chunks_equals_one_serial_pass(path, monkeypatch):
    from memtop import scan

    rec = Recording(path)
    serial = scan.scan(rec, rec.t0, rec.t1, False, workers=1)
    resumed = []
    real = scan._resume
    monkeypatch.setattr(scan, "_resume", lambda *a: resumed.append(1) or real(*a))
    for warm in (scan.WARM_S, 1.0):  # 1 s is too short to catch up: chunks must resume from the real state
        monkeypatch.setattr(scan, "WARM_S", warm)
        par = scan.scan(rec, rec.t0, rec.t1, False, workers=3, chunk_s=20)
        assert _labels(par[0]) == _labels(serial[0])
        assert par[1] == serial[1]
        a, b = par[2], serial[2]
        assert (dict(a.throttle), dict(a.perf), a.procs, a.caps, a.links) == (
            dict(b.throttle),
            dict(b.perf),
            b.procs,
            b.caps,
            b.links,
        )
        assert a.stacks.keys() == b.stacks.keys() and dict(a.peaks) == dict(b.peaks) and a.last == b.last
    assert any(resumed)  # the resume path ran (in this process) and still matched


def test_whole_report_same_serial_or_parallel(monkeypatch):
    from memtop import scan

    rec = Recording(REC[1])
    monkeypatch.setattr(scan, "CHUNK_MIN_S", 1e9)
    serial = [build_report(rec), build_report(rec, t_from=20.0)]
    monkeypatch.setattr(scan, "CHUNK_MIN_S", 25.0)
    monkeypatch.setattr(
        scan, "os", type("os", (), {"cpu_count": staticmethod(lambda: 4)})
    )  # 4 chunks here too
    assert [build_report(rec), build_report(rec, t_from=20.0)] == serial
    assert render(serial[0], "text") == render(build_report(rec), "text")
