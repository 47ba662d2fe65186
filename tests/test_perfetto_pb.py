"""`memtop export --perfetto OUT.pftrace`: Perfetto's protobuf, read back field by field here and held
against the JSON export of the same recording (what each holds, event for event)."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

import pytest
from conftest import DATA, REC

from memtop.cli import main
from memtop.outputs import perfetto_pb as pb
from memtop.outputs.export import trace_format


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        v |= (c & 0x7F) << shift
        i += 1
        if c < 0x80:
            return v, i
        shift += 7


def fields(b: bytes) -> list[tuple[int, object]]:
    """A message's (field number, value): an int, 8 bytes (fixed64) or bytes (length-delimited)."""
    out: list[tuple[int, object]] = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            out.append((num, v))
        elif wire == 1:
            out.append((num, b[i : i + 8]))
            i += 8
        elif wire == 2:
            n, i = _varint(b, i)
            out.append((num, b[i : i + n]))
            i += n
        else:
            raise AssertionError(f"wire type {wire} at {i}")
    assert i == len(b), "a field runs past its message"
    return out


def one(msg: list[tuple[int, object]], num: int, default: object = None) -> object:
    return next((v for n, v in msg if n == num), default)


def read_trace(path: Path) -> dict:
    """What a protobuf trace holds: counter values per track name, slices (begin/end balanced per
    track), instants by name; every event's track described before it, every name iid defined."""
    names: dict[int, str] = {}
    iids: dict[int, str] = {}
    counters: Counter[str] = Counter()
    depth: Counter[int] = Counter()
    slices, instants = Counter(), Counter()
    last_ts: dict[int, int] = {}
    for num, packet in fields(path.read_bytes()):
        assert num == 1  # Trace.packet
        p = fields(packet)  # type: ignore[arg-type]
        assert one(p, 10) == 1  # one sequence
        if (d := one(p, 60)) is not None:
            desc = fields(d)  # type: ignore[arg-type]
            sub = one(desc, 3) or one(desc, 4)
            label = one(desc, 2) or one(fields(sub), 6 if one(desc, 3) else 5)  # type: ignore[arg-type]
            names[one(desc, 1)] = label.decode()  # type: ignore[union-attr,index]
        for n, interned in p:
            if n == 12:
                for k, name in fields(interned):  # type: ignore[arg-type]
                    assert k == 2  # event_names
                    e = fields(name)  # type: ignore[arg-type]
                    iids[one(e, 1)] = one(e, 2).decode()  # type: ignore[union-attr,index]
        if (te := one(p, 11)) is None:
            continue
        ev = fields(te)  # type: ignore[arg-type]
        track, kind, ts = one(ev, 11), one(ev, 9), one(p, 8)
        assert track in names, "an event on a track not described before it"
        assert ts >= last_ts.get(track, 0) or kind == pb.COUNTER  # type: ignore[operator]
        last_ts[track] = ts  # type: ignore[assignment]
        name = iids.get(one(ev, 10)) if one(ev, 10) is not None else None  # type: ignore[arg-type]
        if kind == pb.COUNTER:
            counters[names[track]] += 1  # type: ignore[index]
            assert len(one(ev, 44)) == 8  # type: ignore[arg-type]
        elif kind == pb.SLICE_BEGIN:
            assert name is not None
            depth[track] += 1  # type: ignore[index]
            slices[name] += 1
        elif kind == pb.SLICE_END:
            depth[track] -= 1  # type: ignore[index]
            assert depth[track] >= 0  # type: ignore[index]
        else:
            assert kind == pb.INSTANT and name is not None
            instants[name] += 1
    assert not any(depth.values()), "a slice left open"
    return {"counters": counters, "slices": slices, "instants": instants}


def read_json(path: Path) -> dict:
    """``read_trace``'s figures of the JSON form; a counter's values counted as its steps (a value
    equal to the one before on its track is no step: the protobuf leaves it out)."""
    doc = json.loads(path.read_text())
    counters: Counter[str] = Counter()
    last: dict[tuple, object] = {}
    slices, instants = Counter(), Counter()
    for ev in doc["traceEvents"]:
        if ev["ph"] == "C":  # (Perfetto's JSON importer names a counter of several args "name arg")
            for k, v in ev["args"].items():
                name = ev["name"] if k == "value" else f"{ev['name']} {k}"
                track = (ev["pid"], name)
                if track not in last or last[track] != v:
                    counters[name] += 1
                last[track] = v
        elif ev["ph"] in "BX":
            slices[ev["name"]] += 1
        elif ev["ph"] == "i":
            instants[ev["name"]] += 1
    return {"counters": counters, "slices": slices, "instants": instants}


@pytest.mark.parametrize(
    "rec", [REC[0], DATA / "heldout2_torch_s21.memtop", DATA / "multi/heldout_ddp_s11.memtop"]
)
def test_protobuf_holds_what_the_json_holds(rec, tmp_path):
    """Counters per track, slices (phases, markers, stack frames) and instants by name: the same in
    both forms; the protobuf's one extra instant is its metadata."""
    js, pf = tmp_path / "t.json", tmp_path / "t.pftrace"
    assert main(["export", str(rec), "--perfetto", str(js)]) == 0
    assert main(["export", str(rec), "--perfetto", str(pf)]) == 0
    a, b = read_json(js), read_trace(pf)
    assert b["instants"].pop("memtop trace") == 1
    assert a == b
    assert sum(a["counters"].values()) > 1000 and a["slices"] and a["instants"]
    assert pf.stat().st_size < js.stat().st_size / 2  # the point of the format, with its fidelity
    assert pf.stat().st_mode & 0o777 == 0o600


def test_a_range_of_one_gpu_and_gzip(tmp_path):
    import gzip

    out, gz = tmp_path / "t.pftrace", tmp_path / "t.pftrace.gz"
    args = ["export", str(REC[0]), "--from", "30", "--to", "60", "--gpu", "0"]
    assert main([*args, "--perfetto", str(out)]) == 0
    assert main([*args, "--perfetto", str(gz)]) == 0
    assert gzip.decompress(gz.read_bytes()) == out.read_bytes()
    got = read_trace(out)
    full = read_trace(_export(REC[0], tmp_path / "full.pftrace"))
    assert 0 < sum(got["counters"].values()) < sum(full["counters"].values()) / 2


def _export(rec: Path, out: Path) -> Path:
    assert main(["export", str(rec), "--perfetto", str(out)]) == 0
    return out


def test_the_name_picks_the_format_and_the_flag_overrides_it(tmp_path):
    assert [trace_format(Path(n)) for n in ("a.json", "a.json.gz", "a.pftrace", "a", "a.gz")] == [
        "json",
        "json",
        "proto",
        "proto",
        "proto",
    ]
    out = tmp_path / "t.trace"
    assert main(["export", str(REC[0]), "--perfetto", str(out), "--format", "json"]) == 0
    assert json.loads(out.read_text())["traceEvents"]
    assert main(["export", str(REC[0]), "--perfetto", str(out), "--format", "proto", "--force"]) == 0
    assert read_trace(out)["counters"]


def test_odd_argument_values_are_encoded(tmp_path):
    """A NaN, a nested value and an int beyond int64 in a slice's arguments: JSON text (null for the
    NaN), never an error; a negative int as protobuf's 64-bit two's complement."""
    buf = tmp_path / "t.pftrace"
    with open(buf, "wb") as fh:
        w = pb.TraceWriter(fh)
        proc = w.process(7, "p")
        track = w.track(proc, "markers")
        odd = {"x": float("nan"), "y": {"z": [1, 2]}, "big": 1 << 70, "neg": -3, "ok": True}
        w.event(track, w.stamp(1.0), pb.SLICE_BEGIN, "a", pb.debug_args(odd))
        w.event(track, w.stamp(2.0), pb.SLICE_END)
        w.flush()
    assert read_trace(buf)["slices"] == {"a": 1}
    packets = [fields(p) for _, p in fields(buf.read_bytes())]  # type: ignore[arg-type]
    ann = [fields(v) for n, v in fields(one(packets[3], 11)) if n == 4]  # type: ignore[arg-type]
    got = {one(a, 10).decode(): a[1] for a in ann}  # type: ignore[union-attr]
    assert got["x"] == (9, b"null") and got["y"] == (9, b'{"z": [1, 2]}')
    assert got["neg"] == (4, (1 << 64) - 3) and got["ok"] == (2, 1) and got["big"][0] == 9
    assert struct.unpack("<d", pb.double(5, 0.5)[1:])[0] == 0.5


def test_overlapping_markers_go_on_lanes(tmp_path):
    """Slices on one track must nest: a marker overlapping the ones before it goes on the first lane
    free at its start."""
    from memtop.outputs.export import _Proto

    out = tmp_path / "t.pftrace"
    with open(out, "wb") as fh:
        sink = _Proto(fh)
        sink.process(1_000_000, "GPU 0")
        sink.track(1_000_000, 2, "markers")
        for t0, t1 in ((1.0, 3.0), (2.0, 4.0), (3.5, 5.0), (2.5, 2.6)):
            sink.span(1_000_000, 2, "m", t0, t1, {})
        sink.flush()
    got = read_trace(out)  # (read_trace asserts nesting and time order per track)
    assert got["slices"]["m"] == 4
    tracks = [one(fields(d), 2) for n, d in fields(out.read_bytes()) for k, d in fields(d) if k == 60]  # type: ignore[arg-type]
    assert b"markers 2" in tracks and b"markers 3" in tracks and b"markers 4" not in tracks


def test_varint():
    assert [pb.varint(v) for v in (0, 1, 127, 128, 300)] == [
        b"\x00",
        b"\x01",
        b"\x7f",
        b"\x80\x01",
        b"\xac\x02",
    ]
    assert len(pb.varint(-1)) == 10 and _varint(pb.varint((1 << 63) - 1), 0)[0] == (1 << 63) - 1
    assert pb.TraceWriter.stamp(float("nan")) == b"\x40\x00"


def test_live_mode_imports_no_numpy():
    """numpy (~15 MiB resident) is the report's: live mode's modules do not load it."""
    import subprocess
    import sys

    code = (
        "import sys; import memtop.commands.local, memtop.tui.app, memtop.live.sampler, memtop.live.pipeline, "
        "memtop.collectors.nvml, memtop.collectors.host, memtop.collectors.stacks; "
        "print('numpy' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_both_forms_count_the_same_events(tmp_path, capsys):
    """The line `export` prints counts the JSON's events in both forms (a PCIe sample is two counters
    in the protobuf, a phase two slice events, a track's name a descriptor: counted as the JSON's one)."""
    lines = []
    for name in ("t.json", "t.pftrace"):
        assert main(["export", str(REC[0]), "--perfetto", str(tmp_path / name)]) == 0
        lines.append(capsys.readouterr().err.split(" trace events")[0])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert lines[0] == lines[1] == f"wrote {len(doc['traceEvents'])}"


def test_counters_at_once_are_the_packets_of_one_at_a_time():
    """``TraceWriter.counters`` (an array's rows) writes the bytes ``counter`` writes per value, at
    every varint length of a timestamp and the stamps' edge cases (negative, NaN, past int64)."""
    import io

    import numpy as np

    t = [0.0, 1e-9, 1.27e-7, 1.28e-7, 2.5e-9, 16384e-9, 3.3, 123456.789012345, 2e9, -1.0, float("nan"), 1e10]
    v = [float(k) * 1.5 - 3 for k in range(len(t))]
    v[4] = v[5] = v[6] = v[3]  # repeats: left out, in both (the step they draw is v[3]'s)
    got = []
    for at_once in (False, True):
        fh = io.BytesIO()
        w = pb.TraceWriter(fh)
        uuid = w.counter_track(w.process(1, "p"), "c")
        if at_once:  # (in two calls: the value before a call's first is its track's last)
            w.counters(uuid, np.array(t[:5]), np.array(v[:5]))
            w.counters(uuid, np.array(t[5:]), np.array(v[5:]))
        else:
            for x, y in zip(t, v, strict=True):
                w.counter(uuid, w.stamp(x), y)
        w.flush()
        got.append((fh.getvalue(), w.n, w.repeats))
    assert got[0] == got[1]
    assert got[0][1:] == (len(t) - 3, 3)


_PRISTINE: dict[Path, tuple[int, dict]] = {}  # whole exports of tests/data files, read only by the tests


def _events(rec: Path, **kw) -> tuple[int, dict]:
    """The events ``rec``'s trace holds, counted. A file of tests/data exported whole (at the default
    window) is exported once per module (three tests compare against blocks_s11's, two the DDP run's)."""
    if not kw and rec.is_relative_to(DATA):
        if rec not in _PRISTINE:
            _PRISTINE[rec] = _exported(rec)
        return _PRISTINE[rec]
    return _exported(rec, **kw)


def _exported(rec: Path, **kw) -> tuple[int, dict]:
    import io

    from memtop.outputs.export import write_trace
    from memtop.storage.store import Recording

    buf = io.StringIO()
    n = write_trace(Recording(rec), buf, progress=False, **kw)
    doc = json.loads(buf.getvalue())
    doc["traceEvents"] = Counter(json.dumps(e, sort_keys=True) for e in doc["traceEvents"])
    doc["samples"] = Counter(json.dumps(e, sort_keys=True) for e in doc["samples"])
    return n, doc


@pytest.mark.parametrize(
    ("name", "span", "window"),
    [
        ("blocks_s11.memtop", {}, 60.0),
        ("schema3_torch_s13.memtop", {}, 45.0),
        ("blocks_s11.memtop", {"t_from": 100.0, "t_to": 250.0}, 30.0),
        ("labelled_s2.memtop", {}, 40.0),
        ("multi/heldout_ddp_s11.memtop", {"t_from": 10.0}, 20.0),
    ],
)
def test_windows_write_the_events_of_one_window(name, span, window, monkeypatch):
    """Read a window at a time (each phase run's last bin read again in its window, the hysteresis
    carried), a trace holds every event one window over the whole range writes (in another order),
    its stacks and samples too; from column blocks and from rows alike."""
    from memtop.outputs import export

    whole = _exported(DATA / name, whole=True, **span)
    monkeypatch.setattr(export, "WINDOW_S", window)
    windows = _exported(DATA / name, **span)  # (made here: a whole export kept by _events has another window)
    assert windows == whole
    n, doc = windows
    kinds = Counter(json.loads(e)["ph"] for e in doc["traceEvents"].elements())
    assert n == sum(kinds.values()) and kinds["C"] > 1000 and kinds["B"] and kinds["X"] and kinds["i"]


def _without_blocks(src: Path, dst: Path) -> Path:
    """``src`` with its column blocks deleted: its rows alone, as a recording from before them."""
    import shutil
    import sqlite3

    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    assert db.execute("DELETE FROM block").rowcount > 0
    db.commit()
    db.close()
    return dst


@pytest.mark.parametrize("name", ["blocks_s11.memtop", "blocks_killed_s11.memtop"])
def test_blocks_or_rows_the_export_is_the_same(name, tmp_path):
    """Column blocks covering the recording, covering its start only (a recorder killed before its
    blocks reached its end), or none: the one reader gives the same rows, the trace the same events."""
    n, doc = _events(DATA / name)
    assert _events(_without_blocks(DATA / name, tmp_path / "rows.memtop")) == (n, doc)
    assert n > 30000 and doc["samples"]


def test_a_gpu_is_a_filter_of_the_whole_export():
    """--gpu N writes the whole export's events of GPU N (counters, phases, markers), the host's
    counters, and the stacks of the processes on GPU N (in its state, or host processes with a
    context on it); nothing of another GPU."""
    from memtop.outputs.export import GPU_PID_BASE, HOST_PID
    from memtop.storage.store import Recording

    rec = DATA / "multi/heldout_ddp_s11.memtop"
    _, full = _events(rec)
    procs: dict[int, set[int]] = {0: set(), 1: set()}  # (its state's processes, or the host's on it)
    for f in Recording(rec).frames():
        for g in f.gpus:
            procs[g.index] |= {p.pid for p in g.processes}
        for p in f.host.procs if f.host else ():
            for g in p.gpus:
                procs[g].add(p.pid)
    assert all(procs.values()) and not procs[0] & procs[1]

    def unnumbered(events: Counter, keep: set[int]) -> Counter:  # (stack frames are numbered per trace)
        return Counter(
            json.dumps({k: v for k, v in e.items() if k != "sf"}, sort_keys=True)
            for e in map(json.loads, events.elements())
            if e["pid"] in keep
        )

    for gpu, pids in procs.items():
        _, one = _events(rec, gpu=gpu)
        keep = {GPU_PID_BASE + gpu, HOST_PID, *pids}
        assert unnumbered(one["traceEvents"], keep) == unnumbered(full["traceEvents"], keep)
        assert {json.loads(e)["pid"] for e in one["traceEvents"]} == keep
        assert one["samples"] and all(json.loads(s)["tid"] in pids for s in one["samples"])


def test_the_phases_are_the_reports(tmp_path):
    """The phase slices are the runs of the report's labels (the column scan), whatever the reader
    of the rows (here: rows alone), on a two-GPU job whose labels read its peers."""
    from memtop.analysis import colscan
    from memtop.analysis.phases import TITLES
    from memtop.outputs.export import GPU_PID_BASE
    from memtop.storage.store import Recording

    rec = DATA / "multi/heldout_ddp_s11.memtop"
    _, doc = _events(rec)
    r = Recording(rec)
    labels, _, _ = colscan.scan_columns(r, None, r.t0, r.t1, workers=1)
    for gpu, labs in labels.items():
        runs = [lab.label for k, lab in enumerate(labs) if k == 0 or lab.label != labs[k - 1].label]
        slices = sorted(
            (e["ts"], e["name"])
            for e in map(json.loads, doc["traceEvents"].elements())
            if e["ph"] == "X" and e["tid"] == 1 and e["pid"] == GPU_PID_BASE + gpu
        )
        assert [n for _, n in slices] == [TITLES.get(x, x) for x in runs if x != "warmup"]
        assert len(slices) > 3


@pytest.mark.parametrize("blocks", [True, False])
def test_a_damaged_part_is_skipped_and_said(blocks, tmp_path):
    """A host sample that does not inflate: its counters are left out, with those of the samples
    deflated against it (the host samples the Frames no longer hold), the rest exported; the trace's
    metadata names what was skipped, as the report does; from the blocks or the rows."""
    import shutil
    import sqlite3

    from memtop.outputs.export import HOST_PID
    from memtop.storage.store import Recording

    path = tmp_path / "d.memtop"
    if blocks:
        shutil.copy(DATA / "blocks_s11.memtop", path)
    else:
        _without_blocks(DATA / "blocks_s11.memtop", path)
    db = sqlite3.connect(path)
    t = db.execute("SELECT t FROM host ORDER BY t LIMIT 1 OFFSET 40").fetchone()[0]
    db.execute("UPDATE host SET data = X'00' WHERE t = ?", (t,))
    db.commit()
    db.close()
    _, good = _events(DATA / "blocks_s11.memtop")
    _, doc = _events(path)
    assert doc["metadata"]["damage"] == ["damaged host data skipped"]
    assert "damage" not in good["metadata"]

    def counters(events: Counter) -> Counter:  # (the phases' evidence reads the host's figures too)
        return Counter({e: n for e, n in events.items() if json.loads(e)["ph"] != "X"})

    lost = [json.loads(e) for e in (counters(good["traceEvents"]) - counters(doc["traceEvents"])).elements()]
    assert not counters(doc["traceEvents"]) - counters(good["traceEvents"])
    held = [{f.host.t for f in Recording(p).frames() if f.host} for p in (DATA / "blocks_s11.memtop", path)]
    gone = {round(x * 1e6, 1) for x in held[0] - held[1]}
    assert round(t * 1e6, 1) in gone and {e["ts"] for e in lost} == gone
    assert all(e["pid"] == HOST_PID and e["ph"] == "C" for e in lost)


@pytest.mark.parametrize("name", ["blocks_s11.memtop", "schema3_torch_s13.memtop"])
def test_the_protobuf_by_columns_holds_what_the_json_holds(name, tmp_path):
    rec = DATA / name
    a, b = read_json(_export(rec, tmp_path / "t.json")), read_trace(_export(rec, tmp_path / "t.pftrace"))
    assert b["instants"].pop("memtop trace") == 1
    assert a == b


def test_the_host_cpu_mean_in_the_blocks_exports_as_the_host_json_does(tmp_path, monkeypatch):
    """The Writer keeps each host sample's CPU mean in its host block (store.WRITTEN_STREAMS), and the
    export draws the host's CPU from it; the same file with its host blocks as an older memtop wrote
    them (no mean) exports the same bytes and JSON, from each sample's JSON instead."""
    import io
    import sqlite3

    from conftest import write_again

    from memtop.outputs import export
    from memtop.storage import colblock
    from memtop.storage.decode import BLOCK_STREAMS
    from memtop.storage.store import WRITTEN_STREAMS, Recording

    new = write_again(DATA / "blocks_s11.memtop", tmp_path / "new.memtop")
    means = {f.host.t: sum(f.host.cpu_pct) / max(1, len(f.host.cpu_pct)) for f in Recording(new).frames()}
    old = tmp_path / "old.memtop"
    old.write_bytes(new.read_bytes())
    db = sqlite3.connect(old)
    blocks = db.execute("SELECT seq, data FROM block WHERE stream='host' ORDER BY seq").fetchall()
    assert len(blocks) > 1
    written = {}
    for seq, data in blocks:
        n, cols, _ = colblock.decode(WRITTEN_STREAMS["host"], data)
        written.update(zip(cols["t"].tolist(), cols["cpu_mean"].tolist(), strict=True))
        rows = list(zip(*(cols[c].tolist() for c, _ in BLOCK_STREAMS["host"]), strict=True))
        db.execute(
            "UPDATE block SET data=? WHERE stream='host' AND seq=?",
            (colblock.encode(BLOCK_STREAMS["host"], rows), seq),
        )
    db.commit()
    db.close()
    assert written == means and len(means) > 300

    def trace(path: Path, proto: bool) -> bytes | str:
        rec = Recording(path)
        if proto:
            buf = io.BytesIO()
            export.write_proto(rec, buf, progress=False)
            return buf.getvalue()
        text = io.StringIO()
        export.write_trace(rec, text, progress=False)
        return text.getvalue()

    original, decoded = export._cpu_mean, []

    def counted(raw: bytes) -> float:
        decoded.append(raw)
        return original(raw)

    monkeypatch.setattr(export, "_cpu_mean", counted)
    for proto in (True, False):
        got = trace(new, proto)
        assert not decoded  # (the blocks' means: no host JSON inflated for them)
        assert trace(old, proto) == got
        assert len(decoded) == len(means)
        decoded.clear()


def test_rounding_over_arrays_is_pythons_round_bit_for_bit():
    """``rounded`` (the counters' CPU % and PCIe GB/s, over arrays) gives the float ``round(x, n)``
    gives: at decimal ties and next to them, the sign of a zero, past 2**52, where not finite."""
    import numpy as np

    from memtop.outputs.export import gbps, rounded, tenths

    ties = np.array([k / 2000 for k in range(-4000, 4000)] + [k / 20 for k in range(-400, 400)])
    odd = [0.0, -0.0, -0.0004, 2.675, 1.005, 5e-324, 1e15 + 0.5, 4503599627370.4995, 1e300, -1e300]
    odd += [1.7976931348623157e308, float("inf"), float("-inf"), float("nan")]
    rng = np.random.default_rng(0)
    v = np.concatenate([ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf), odd])
    v = np.concatenate([v, rng.uniform(-1e4, 1e4, 5000), rng.integers(0, 10**11, 5000) / 1e6])
    for n in (1, 3):
        want = np.array([round(x, n) for x in v.tolist()])
        assert rounded(v, n).view(np.int64).tolist() == want.view(np.int64).tolist()
    rates = rng.integers(0, 64 * 10**9, 5000).astype(np.float64)
    rates[:4] = [0.0, 5e5, 1.5e6, 2.5e6]  # (ties in GB/s)
    assert gbps(rates).tolist() == [round(x / 1e9, 3) for x in rates.tolist()]
    assert tenths([0.05, 0.15, 99.95]).tolist() == [round(x, 1) for x in (0.05, 0.15, 99.95)]


def test_stamps_at_once_are_the_stamps_one_at_a_time():
    """The stack samples' stamps, made over a window's times at once, are each sink's ``stamp``."""
    from memtop.outputs.export import _Json

    t = [0.0, -0.0, 1e-9, 1.27e-7, 1.28e-7, 2.5e-9, 16384e-9, 3.3, 123456.789012345, 28833.971670061]
    t += [2e9, 1e10, 9.3e9, 9.3e10, -1.0, float("nan"), 1e300]
    assert pb.TraceWriter.stamps(t) == [pb.TraceWriter.stamp(x) for x in t]
    assert _Json.stamps(t) == [_Json.stamp(x) for x in t]


@pytest.mark.parametrize("blocks", [True, False])
def test_main_only_stack_dumps_hold_each_samples_main_thread(blocks, tmp_path):
    """``stack_dumps(main_only=True)`` (the export's: it draws main threads only) gives every sample
    of the whole read, each with the whole dump's main thread alone (the thread with the pid's id,
    else the first), a dump that failed as one, fewer dumps to decode; from the blocks and the rows,
    and where no thread has the pid's id and a main thread's row is damaged (those rows changed: the
    blocks stand for the old ones)."""
    import math
    import shutil
    import sqlite3

    from memtop.storage import parts
    from memtop.storage.store import Recording

    path = tmp_path / "r.memtop"
    shutil.copy(DATA / "schema3_torch_s13.memtop", path)
    if not blocks:
        db = sqlite3.connect(path)
        pid = db.execute("SELECT pid FROM stack_sample WHERE tid = pid LIMIT 1").fetchone()[0]
        assert db.execute("UPDATE stack_sample SET tid = tid + 7 WHERE pid = ?", (pid,)).rowcount > 1
        t = db.execute("SELECT t FROM stack_sample WHERE pid != ? AND i = 1", (pid,)).fetchone()[0]
        # (a thread name neither a text nor an id, a blob: the sample does not decode)
        assert (
            db.execute("UPDATE stack_sample SET name = x'01' WHERE t = ? AND tid = pid", (t,)).rowcount == 1
        )
        db.commit()
        db.close()
    whole_rec, mains_rec = Recording(path), Recording(path)
    whole = parts.stack_dumps(whole_rec, -math.inf, math.inf, blocks=blocks)
    mains = parts.stack_dumps(mains_rec, -math.inf, math.inf, blocks=blocks, main_only=True)
    assert mains.times == whole.times and len(mains.dumps) < len(whole.dumps)
    assert len(whole.times) == 1850 - (not blocks)
    assert mains_rec.damage == whole_rec.damage == ([] if blocks else ["damaged stack data skipped"])
    firsts = errors = 0
    for i in range(len(whole.times)):
        w, m = whole.sample(i), mains.sample(i)
        assert (m.t, m.pid, m.error, m.threads) == (w.t, w.pid, w.error, (w.main,) if w.threads else ())
        errors += w.error is not None
        firsts += len(w.threads) > 1 and all(th.tid != w.pid for th in w.threads)
    assert errors and (firsts > 0) == (not blocks)
    assert any(len(d.threads) > 1 and d.main is not d.threads[0] for d in whole.dumps)
