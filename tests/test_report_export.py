"""`memtop report` and `memtop export` on the committed H100 recordings."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from conftest import DATA, REC

from memtop.analysis.phases import classify
from memtop.cli import main
from memtop.outputs.export import GPU_PID_BASE, export_perfetto
from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording

SCHEMA = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_report_snapshot(fmt, snapshot):
    rep = build_report(Recording(REC[0]))
    rep["recording"]["path"] = "labelled_s0.memtop"
    rep["recording"]["started"] = "<start>"  # local time zone of the machine
    assert render(rep, fmt) == snapshot


GOLDEN = ("labelled_s2_nogpm", "heldout8_torch_s91", "multi/heldout_ddp_s11")


@pytest.mark.parametrize("name", GOLDEN)
def test_report_json_golden(name, snapshot):
    """The whole JSON report of a few real recordings (NVML-only; a held-out run recorded after the
    rules froze; two GPUs of a DDP job with straggler episodes): the engine's answer, pinned. A change
    to a rule, a feature or an aggregate shows here; accept it with `pytest --snapshot-update`."""
    rep = build_report(Recording(DATA / f"{name}.memtop"))
    rep["recording"]["path"] = f"{name}.memtop"
    rep["recording"]["started"] = "<start>"  # local time zone of the machine
    assert render(rep, "json") == snapshot


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


ALLOWED_PH = {"M", "C", "X", "i", "B", "E"}


def _strict(text: str) -> dict:
    def bad(token: str):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=bad)


def test_perfetto_export_follows_the_trace_event_format(tmp_path):
    out = tmp_path / "t.json"
    rec = Recording(REC[0])
    n = export_perfetto(rec, out)
    doc = _strict(out.read_text())
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


def test_counter_tracks_come_from_the_metrics_table(tmp_path):
    from memtop.core.metrics import METRICS

    out = tmp_path / "t.json"
    export_perfetto(Recording(REC[0]), out)
    names = {
        e["name"]
        for e in _strict(out.read_text())["traceEvents"]
        if e["ph"] == "C" and e["pid"] >= GPU_PID_BASE
    }
    assert {n.split(" ")[0] for n in names - {"PCIe GB/s"}} <= {
        m.title.split(" ")[0] for m in METRICS if m.counter
    }
    assert {"SM %", "tensor %", "DRAM %", "graphics %", "util %", "power W", "SM clock MHz"} <= names


def test_stacks_export_as_a_flame_chart_and_as_samples(tmp_path):
    out = tmp_path / "t.json"
    rec = Recording(REC[0])
    export_perfetto(rec, out)
    doc = _strict(out.read_text())
    frames, samples = doc["stackFrames"], doc["samples"]
    assert samples and all(str(s["sf"]) in frames for s in samples)
    assert all(str(f["parent"]) in frames for f in frames.values() if "parent" in f)
    n_main = len(
        {(s.pid, s.t) for f in rec.frames() for s in f.stacks if s.main is not None and s.main.frames}
    )
    assert len(samples) == n_main
    # the leaf of each sample is the leaf of that recorded stack
    leaf = {
        (round(s.t * 1e6, 1), s.main.tid): s.main.frames[0]
        for f in rec.frames()
        for s in f.stacks
        if s.main is not None and s.main.frames
    }
    for smp in samples:
        fr = leaf[(smp["ts"], smp["tid"])]
        assert frames[str(smp["sf"])]["name"] == f"{fr.name} {fr.file.rsplit('/', 1)[-1]}:{fr.line}"
    # B/E slices nest properly on each thread: every E closes the innermost open B of the same name
    open_: dict = {}
    last_ts: dict = {}
    for e in doc["traceEvents"]:
        if e["ph"] not in ("B", "E"):
            continue
        key = (e["pid"], e["tid"])
        assert e["ts"] >= last_ts.get(key, 0)
        last_ts[key] = e["ts"]
        st = open_.setdefault(key, [])
        if e["ph"] == "B":
            st.append(e["name"])
        else:
            assert st and st.pop() == e["name"]
    assert all(not st for st in open_.values()) and open_


def test_export_range_and_gpu_and_gzip(tmp_path):
    import gzip

    rec = Recording(REC[0])
    full, part, gz = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json.gz"
    assert main(["export", str(REC[0]), "--perfetto", str(full)]) == 0
    assert (
        main(["export", str(REC[0]), "--perfetto", str(part), "--from", "30", "--to", "60", "--gpu", "0"])
        == 0
    )
    assert main(["export", str(REC[0]), "--perfetto", str(gz)]) == 0
    a, b = _strict(full.read_text()), _strict(part.read_text())
    assert _strict(gzip.decompress(gz.read_bytes()).decode()) == a
    assert gz.stat().st_size < full.stat().st_size / 5
    ts = [e["ts"] for e in b["traceEvents"] if e["ph"] == "C"]
    assert ts and min(ts) >= (rec.t0 + 30) * 1e6 - 1 and max(ts) <= (rec.t0 + 60) * 1e6 + 1
    assert 0 < len(b["traceEvents"]) < len(a["traceEvents"]) / 3
    assert b["metadata"]["range_s"] == [30.0, 60.0]


@pytest.mark.parametrize(
    ("extra", "msg"),
    [(["--gpu", "3"], "no GPU 3"), (["--from", "900"], "empty time range"), (["--to", "nan"], "finite")],
)
def test_export_bad_choice_is_one_line_and_leaves_no_file(tmp_path, extra, msg, capsys):
    out = tmp_path / "t.json"
    try:
        rc = main(["export", str(REC[0]), "--perfetto", str(out), *extra])
    except SystemExit as e:  # a flag argparse refuses
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("{}")
    assert main(["export", str(REC[0]), "--perfetto", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "{}"
    assert main(["export", str(REC[0]), "--perfetto", "/nonexistent/dir/t.json"]) == 2
    assert main(["export", str(REC[0]), "--perfetto", str(out), "--force"]) == 0
    assert _strict(out.read_text())["traceEvents"] and (out.stat().st_mode & 0o777) == 0o600


def test_export_never_writes_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "t.json"
    link.symlink_to(victim)
    assert main(["export", str(REC[0]), "--perfetto", str(link)]) == 2  # exists: refused
    assert main(["export", str(REC[0]), "--perfetto", str(link), "--force"]) == 0
    assert victim.read_text() == "keep" and not link.is_symlink()
    assert (link.stat().st_mode & 0o777) == 0o600 and _strict(link.read_text())["traceEvents"]
    dangling = tmp_path / "d.json"
    dangling.symlink_to(tmp_path / "nowhere")
    assert main(["export", str(REC[0]), "--perfetto", str(dangling)]) == 2
    assert not (tmp_path / "nowhere").exists()


def test_a_failed_export_leaves_nothing(tmp_path, monkeypatch):
    from memtop.outputs import export

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "_window", boom)
    out = tmp_path / "t.json"
    assert main(["export", str(REC[0]), "--perfetto", str(out)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_export_json_is_strict_when_values_are_not_finite(tmp_path):
    import shutil
    import sqlite3

    bad = tmp_path / "bad.memtop"
    shutil.copy(REC[0], bad)
    db = sqlite3.connect(bad)
    db.execute("UPDATE meta SET value='1e999' WHERE key='wall_offset'")  # json.loads gives inf
    db.execute("UPDATE marker SET facts='{\"x\": NaN}'")
    db.commit()
    db.close()
    out = tmp_path / "t.json"
    assert main(["export", str(bad), "--perfetto", str(out)]) == 0
    doc = _strict(out.read_text())
    assert doc["metadata"]["wall_offset_s"] is None


def test_events_are_time_ordered_per_counter_track(tmp_path):
    out = tmp_path / "t.json"
    export_perfetto(Recording(REC[2]), out)
    ev = _strict(out.read_text())["traceEvents"]
    ts = [e["ts"] for e in ev if e["ph"] == "C" and e["name"] == "SM %"]
    assert ts == sorted(ts)


def test_whole_report_same_serial_or_parallel(monkeypatch):
    from memtop.analysis import colscan

    rec = Recording(REC[1])
    monkeypatch.setattr(colscan, "CHUNK_MIN_S", 1e9)
    serial = [build_report(rec), build_report(rec, t_from=20.0)]
    monkeypatch.setattr(colscan, "CHUNK_MIN_S", 25.0)
    monkeypatch.setattr(
        colscan, "os", type("os", (), {"cpu_count": staticmethod(lambda: 4)})
    )  # 4 chunks here too
    assert [build_report(rec), build_report(rec, t_from=20.0)] == serial
    assert render(serial[0], "text") == render(build_report(rec), "text")


def test_reads_made_while_chunks_are_scanned_keep_their_damage_notes(monkeypatch, tmp_path):
    """The health, energy and roofline reads a report makes while its other chunks are scanned
    (report._Reads) give what they give after a serial scan, their damage noted after the scan's."""
    import shutil
    import sqlite3

    from memtop.analysis import colscan

    path = tmp_path / "r.memtop"
    shutil.copy(REC[1], path)
    db = sqlite3.connect(path)
    t = db.execute("SELECT max(t) FROM frame").fetchone()[0]
    db.execute("CREATE TABLE IF NOT EXISTS health(t REAL NOT NULL, gpu INTEGER NOT NULL, data TEXT NOT NULL)")
    db.execute("INSERT INTO health VALUES (?, 0, ?)", (t - 1.0, "[" * 5000))
    db.commit()
    db.close()
    monkeypatch.setattr(colscan, "CHUNK_MIN_S", 1e9)
    serial = build_report(Recording(path))
    called = []
    parallel = colscan._parallel
    monkeypatch.setattr(colscan, "_parallel", lambda *a: called.append(a[-1]) or parallel(*a))
    monkeypatch.setattr(colscan, "CHUNK_MIN_S", 25.0)
    assert build_report(Recording(path)) == serial
    assert called and called[0] is not None and "damaged health data skipped" in serial["damage"]


def test_from_and_to_take_times_as_replay_shows_them(capsys, tmp_path):
    """--from/--to take h:mm:ss, 62m, 90s or seconds (replay's go-to), for report and export alike."""
    assert main(["report", str(REC[0]), "--format", "json", "--from", "60", "--to", "90"]) == 0
    want = capsys.readouterr().out
    assert main(["report", str(REC[0]), "--format", "json", "--from", "0:01:00", "--to", "1m30s"]) == 0
    assert capsys.readouterr().out == want
    out = tmp_path / "t.json"
    assert main(["export", str(REC[0]), "--perfetto", str(out), "--from", "1:00", "--to", "90s"]) == 0
    assert json.loads(out.read_text())["metadata"]["range_s"] == [60.0, 90.0]
    capsys.readouterr()
    for bad, said in (
        ("1:75", "not a time"),
        ("2h", "empty time range: the recording covers 0:00:00–0:02:23"),
    ):
        rc = None
        try:
            rc = main(["report", str(REC[0]), "--from", bad])
        except SystemExit as e:  # argparse's refusal
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err


def test_phase_stacks_counts_each_gpu_process_sample_under_its_bin_label():
    """The report's stacks per phase: a GPU process's samples with a main thread, under the label of
    the bin each falls in; two dumps of one site are one entry; labels and sites in the order met."""
    import numpy as np

    from memtop.analysis.scan import Stacks
    from memtop.core.model import StackFrame, ThreadStack
    from memtop.outputs.report import _phase_stacks

    def dump(line: int, klass: str) -> tuple:
        frame = StackFrame(name="step", file="/w/train.py", line=line, code=f"x{line}()")
        return ((ThreadStack(7, "main", True, True, (frame,), klass),), None)

    dumps = [dump(10, "sync"), dump(10, "sync"), dump(20, "copy"), ((), "no threads")]
    # samples (pid, t, dump): pid 9 is no GPU process; t 9.5 lies in no labelled bin
    rows = [
        (7, 2.2, 2),
        (7, 0.5, 0),
        (8, 0.7, 1),
        (9, 0.6, 0),
        (7, 1.1, 3),
        (8, 2.9, 2),
        (7, 9.5, 0),
        (7, 1.4, 1),
    ]
    pid, t, kind = (np.array(c) for c in zip(*rows, strict=True))
    stacks = Stacks(pid.astype(np.int64), t.astype(np.float64), kind.astype(np.int64), dumps)
    got = _phase_stacks(
        stacks, {7, 8}, np.array([0.0, 1.0, 2.0]), np.array(["data", "sync", "data"]), 1.0, {}
    )
    sync, copy = ("sync", "train.py:10", "x10()"), ("copy", "train.py:20", "x20()")
    assert [(lab, list(c.items())) for lab, c in got.items()] == [
        ("data", [(copy, 2), (sync, 2)]),
        ("sync", [(sync, 1)]),
    ]
    assert _phase_stacks(stacks, {9}, np.zeros(0), np.zeros(0, dtype=str), 1.0, {}) == {}


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1.5, -0.0, 1e16, 1e-7, 5e-324, 2**70, -3], "c": {}, "d": [], "e": [[], {}, [{}]]},
        {'ü€😀\x00\n"\\': 'ü€😀\x00\t"\\', 7: True, 2.5: False, None: None, False: (1, (2, 3))},
        [{"gaps": [{"at_s": 1.0, "stack": None}, {"at_s": 2.0, "stack": {"frames": ["x", "y"]}}]}],
    ],
)
def test_json_report_text_is_the_json_module_s(value):
    """The report's JSON is json.dumps(indent=2) of it, byte for byte, written faster."""
    assert render(value, "json") == json.dumps(value, indent=2, allow_nan=False)


def test_json_report_leaves_what_is_not_plain_json_to_the_json_module():
    # NaN and a lone surrogate made strict; a Counter (a dict subclass) as json writes it
    assert json.loads(render({"x": float("nan"), "s": "a\ud800"}, "json")) == {"x": None, "s": "a\ufffd"}
    value = {"c": Counter(a=2), "f": [float("inf")]}
    assert render(value, "json") == json.dumps({"c": {"a": 2}, "f": [None]}, indent=2)
