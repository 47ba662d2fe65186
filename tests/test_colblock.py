"""Column blocks (memtop.storage.colblock) hold the rows they copy, decode hostile blobs as None, and the
report read from them (memtop.analysis.colscan) is the report read from the rows alone (the block table
dropped), byte for byte; damaged or inconsistent blocks send the report back to the rows. Recordings: real ones re-written through this Writer with
10-second blocks, so each holds a dozen blocks per stream."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sqlite3
import stat
import sys
import tempfile
import tracemalloc
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, REC
from long_runs import host_figure_rows, named_stack_sql

from memtop.analysis import colscan
from memtop.core.errors import UserError
from memtop.outputs.report import build_report, render
from memtop.storage import colblock, parts, reader
from memtop.storage.colblock import NULL, Blocks, Broken, decode, encode
from memtop.storage.decode import BLOCK_STREAMS, GPU_COLS
from memtop.storage.store import GPU_MODES, Recording, Writer

ROOT = Path(__file__).parent.parent
BLOCK_S = 10.0  # (the real 300 s would give one block per stream on these 2-minute recordings)
VARIANTS = [
    ("json", {}),
    ("text", {}),
    ("markdown", {}),
    ("json", {"t_from": 20, "t_to": 90}),
    ("text", {"gpu": 0, "t_from": 5}),
    ("json", {"t_from": 33.3}),
]


# --- the blob format ------------------------------------------------------------------------------

MIXED: colblock.Columns = (("t", "f"), ("a", "i"), ("b", "i"), ("c", "i"), ("d", "i"), ("s", "s"))


def _header(blob: bytes) -> dict:
    raw = zlib.decompress(blob)
    size = int.from_bytes(raw[:4], "little")
    return json.loads(raw[4 : 4 + size])


def _blob(head: dict, body: bytes) -> bytes:
    data = json.dumps(head).encode()
    return zlib.compress(len(data).to_bytes(4, "little") + data + body)


def _body(blob: bytes) -> bytes:
    raw = zlib.decompress(blob)
    return raw[4 + int.from_bytes(raw[:4], "little") :]


def _as_rows(columns: colblock.Columns, got) -> list[tuple]:
    """A decoded block as the rows ``encode`` takes (NULL as None, texts as themselves)."""
    n, cols, strings = got
    per = []
    for c, kind in columns:
        v = cols[c].tolist()
        if kind == "i":
            v = [None if x == NULL else x for x in v]
        elif kind == "s":
            v = [None if x < 0 else strings[x] for x in v]
        per.append(v)
    return list(zip(*per, strict=True)) if n else []


def test_round_trip_keeps_every_value():
    rows = [
        (-0.0, 1, 300, 70000, 2**40, "py\udcff"),
        (5e-324, -127, -32767, -(2**31) + 1, -(2**63) + 1, "ünï ✓"),
        (1.7976931348623157e308, 127, None, 2**31 - 1, 2**63 - 1, None),
        (math.inf, None, 0, None, None, ""),
        (123.456, 0, 1, 2, 3, "py\udcff"),
    ]
    blob = encode(MIXED, rows)
    got = decode(MIXED, blob)
    assert got is not None and got[0] == len(rows)
    w = _header(blob)["w"]
    assert (w[0], w[1], w[2], w[4], w[5]) == (8, 1, 2, 8, 1)  # the narrowest that holds each column
    back = _as_rows(MIXED, got)
    assert back == rows
    assert math.copysign(1.0, back[0][0]) == -1.0  # -0.0 stays negative
    assert got[2] == ["py\udcff", "ünï ✓", ""]  # each text once
    assert got[1]["a"].dtype == np.int64 and got[1]["a"].tolist()[3] == NULL
    nan = decode(MIXED, encode(MIXED, [(math.nan, 1, 1, 1, 1, "x")]))
    assert nan is not None and math.isnan(nan[1]["t"][0])


@pytest.mark.parametrize(
    "values, width",
    [
        ([-127, 127], 1),
        ([-128], 2),
        ([128], 2),
        ([-32767, 32767], 2),
        ([32768, -(2**31) + 1], 4),
        ([-(2**31)], 8),
        ([2**31], 8),
    ],
)
def test_an_integer_column_takes_the_width_its_range_needs(values, width):
    """The smallest value of a width is its NULL: a column holding it takes the next width."""
    cols = (("t", "f"), ("a", "i"))
    blob = encode(cols, [(float(i), v) for i, v in enumerate([*values, None])])
    assert _header(blob)["w"][1] == width
    got = decode(cols, blob)
    assert got is not None and got[1]["a"].tolist() == [*values, NULL]


@pytest.mark.parametrize("columns", [MIXED, *BLOCK_STREAMS.values()], ids=lambda c: ",".join(n for n, _ in c))
def test_an_empty_block_round_trips(columns):
    got = decode(columns, encode(columns, []))
    assert got is not None and got[0] == 0 and got[2] == []
    assert [len(v) for v in got[1].values()] == [0] * len(columns)


@pytest.mark.parametrize(
    "row",
    [
        (1, 1, 1, 1, 1, "x"),  # an int in a float column
        (None, 1, 1, 1, 1, "x"),
        (1.0, True, 1, 1, 1, "x"),  # a bool is no integer here
        (1.0, "1", 1, 1, 1, "x"),
        (1.0, 1.0, 1, 1, 1, "x"),
        (1.0, 1, 1, 1, 2**63, "x"),  # beyond 64 bits
        (1.0, 1, 1, 1, -(2**63), "x"),  # (the NULL of 64 bits)
        (1.0, 1, 1, 1, 1, 5),  # a number in a text column
        (1.0, 1, 1, 1, 1, b"x"),
    ],
)
def test_encode_refuses_what_a_column_cannot_hold(row):
    with pytest.raises(Broken):
        encode(MIXED, [(2.0, 0, 0, 0, 0, "y"), row])


def _valid() -> bytes:
    return encode(MIXED, [(float(i), i, i * 300, -i, i * 2**40, f"s{i % 3}") for i in range(50)])


def _hostile() -> dict[str, object]:
    good = _valid()
    head, body = _header(good), _body(good)
    out: dict[str, object] = {
        "str": "not bytes",
        "bytearray": bytearray(good),
        "memoryview": memoryview(good),
        "none": None,
        "not zlib": b"\x00" * 40,
        "empty": b"",
        "truncated zlib": good[: len(good) // 2],
        "no header": zlib.compress(b""),
        "header not JSON": zlib.compress(b"\x05\x00\x00\x00{nope" + body),
        "header bad UTF-8": zlib.compress(b'\x03\x00\x00\x00"\xff"' + body),
        "header deep": zlib.compress(len(b"[" * 100000).to_bytes(4, "little") + b"[" * 100000),
        "header a list": _blob([1, 2], body),  # type: ignore[arg-type]
        "header size beyond": zlib.compress(b"\xff\xff\xff\x7f" + json.dumps(head).encode() + body),
    }
    for key, bad in [
        ("c", ["t", "a", "b", "c", "d"]),
        ("c", ["t", "a", "b", "c", "d", "x"]),
        ("c", None),
        ("w", [8, 1, 2, 4, 8]),
        ("w", [4, 1, 2, 4, 8, 1]),
        ("w", [8, 3, 2, 4, 8, 1]),
        ("w", [8, 16, 2, 4, 8, 1]),
        ("w", "8"),
        ("n", -1),
        ("n", 49),
        ("n", 51),
        ("n", 50.0),
        ("n", "50"),
        ("n", True),
        ("n", None),
        ("s", ["s0", "s1", 2]),
        ("s", "s0s1s2"),
        ("s", ["s0", "s1"]),  # a text index beyond the strings
    ]:
        out[f"{key}={bad!r}"] = _blob({**head, key: bad}, body)
    del head["s"]
    out["no strings"] = _blob(head, body)
    out["body short"] = _blob(_header(good), body[:-1])
    out["body long"] = _blob(_header(good), body + b"\x00")
    return out


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_decode_refuses_hostile_blobs(case):
    assert decode(MIXED, _hostile()[case]) is None


@pytest.mark.parametrize(
    "widths",
    [[8, 1, 2, 4, 8, 1, 1], [8, True, 2, 4, 8, 1], [8.0, 1, 2, 4, 8, 1], [8, 1, 2.0, 4, 8, 1]],
    ids=["extra width", "bool width", "float time width", "float int width"],
)
def test_decode_refuses_odd_widths(widths):
    good = _valid()
    head, body = _header(good), _body(good)
    n = head["n"]
    body = body + b"\x00" * (n * int(sum(widths)) - len(body))  # the length those widths give
    assert decode(MIXED, _blob({**head, "w": widths}, body)) is None


def test_decode_refuses_a_text_index_below_null():
    good = encode(MIXED, [(1.0, 1, 1, 1, 1, "x"), (2.0, 1, 1, 1, 1, None)])
    body = bytearray(_body(good))
    body[-2] = 0xFB  # the first row's text index (1 byte): -5
    assert decode(MIXED, _blob(_header(good), bytes(body))) is None


def test_a_zip_bomb_stays_bounded():
    """300 MB of zeros deflated to 1.4 MB: decode stops at its 64 MB limit (the memory it peaks at says
    it stopped: inflating on would hold the 300 MB; how long it takes is bench's, not a test's)."""
    z = zlib.compressobj(1)
    chunk = b"\x00" * (1 << 20)
    bomb = b"".join(z.compress(chunk) for _ in range(300)) + z.flush()
    assert len(bomb) < 2 << 20
    tracemalloc.start()
    try:
        assert decode(MIXED, bomb) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 160 << 20  # (the inflated bytes and their copy at most: not 300 MB)


def test_a_valid_bomb_of_narrow_columns_stays_bounded():
    """A well-formed gpu block of 64 MB of zeros (every integer column 1 byte wide): decoding it, or
    refusing it, stays within the bound the inflated bytes have."""
    cols = BLOCK_STREAMS["gpu"]
    widths = [8] + [1] * (len(cols) - 1)
    n = (colblock._MAX_RAW - 1000) // sum(widths)
    kinds = "".join(k for _, k in cols)
    head = json.dumps({"n": n, "c": [c for c, _ in cols], "k": kinds, "w": widths, "s": []}).encode()
    z = zlib.compressobj(1)
    parts = [z.compress(len(head).to_bytes(4, "little") + head)]
    left = n * sum(widths)
    while left > 0:
        parts.append(z.compress(bytes(min(left, 1 << 20))))
        left -= 1 << 20
    blob = b"".join(parts) + z.flush()
    assert len(blob) < 1 << 20
    tracemalloc.start()
    try:
        decode(cols, blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 160 << 20


def _fuzzed(got) -> None:
    if got is None:
        return
    n, cols, strings = got
    assert n >= 0 and set(cols) == {c for c, _ in MIXED}
    assert all(len(v) == n for v in cols.values())
    assert all(type(s) is str for s in strings)
    if n:
        assert cols["s"].max() < len(strings)


def test_decode_fuzz_never_raises():
    """Random byte flips of a valid block, in its deflated form and in its raw form (deflated
    again, so the header and body are what changed): None, or a block of n rows."""
    rng = random.Random(20261124)
    good = _valid()
    raw = zlib.decompress(good)
    decoded = 0
    for _ in range(300):
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        _fuzzed(decode(MIXED, bytes(b)))
    for i in range(400):
        b = bytearray(raw)
        at = rng.randrange(4, 4 + int.from_bytes(raw[:4], "little")) if i % 2 else rng.randrange(len(b))
        b[at] = rng.randrange(256)
        got = decode(MIXED, zlib.compress(bytes(b)))
        decoded += got is not None
        _fuzzed(got)
    assert decoded > 50  # (flips in the body decode: the loop reached the column parsing)


# --- Writer-made recordings with many blocks ------------------------------------------------------


def _write(frames, meta, out: Path, markers=()) -> Path:
    w = Writer(out, meta, force=True)
    for f in frames:
        w.add(f)
    w.add_markers(list(markers))
    w.close()
    return out


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Real recordings re-written through this Writer with 10-second blocks: labelled_s2,
    heldout_torch_s3 (DataLoader workers, many stacks), heldout_ddp_s11 (two real GPUs), and
    labelled_s2 with no host sample for 35 s (host blocks without rows)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from long_runs import rewrite

    d = tmp_path_factory.mktemp("many")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(colblock, "BLOCK_S", BLOCK_S)
        mp.setattr(colblock, "GRACE_S", 2.0)
        for p in (REC[2], DATA / "heldout_torch_s3.memtop", DATA / "multi/heldout_ddp_s11.memtop"):
            rewrite(p, d / p.name)
            out[p.stem] = d / p.name
        rec = Recording(REC[2])
        t0 = rec.t0
        frames = [f if not t0 + 40 <= f.t < t0 + 75 else replace(f, host=None) for f in rec.frames()]
        out["hostless"] = _write(frames, rec.meta, d / "hostless.memtop", rec.markers())
    return out


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _edit_rows(path: Path, sql: str) -> Path:
    """``sql`` run on the recording at ``path`` (a copy), committed."""
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.commit()
    db.close()
    return path


_MODE = "CASE mode " + " ".join(f"WHEN '{m}' THEN {i}" for i, m in enumerate(GPU_MODES)) + " ELSE -1 END"
SQL = {  # each stream's rows as the Writer gave them to its blocks, in the order the report reads them
    "frame": "SELECT t FROM frame ORDER BY t",
    "gpu": f"SELECT t, gpu, {_MODE}, {', '.join(c for c, _ in GPU_COLS)} FROM gpu ORDER BY t, gpu",
    "perf": "SELECT t, pid, json_array_length(data) FROM perf ORDER BY t, rowid",
    "perf_rate": "SELECT p.t, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]')"
    " FROM perf p, json_each(p.data) j ORDER BY p.t, p.rowid, j.key",
}


_ROWS: dict[tuple, list] = {}  # a file's stream's rows, read once (the host JSON's are decoded whole)


def _sql_rows(db: sqlite3.Connection, stream: str, lo: float, hi: float, seed: float | None = None) -> list:
    path = Path(db.execute("PRAGMA database_list").fetchone()[2])
    key = (path, stream, path.stat().st_mtime_ns, path.stat().st_size)
    if key not in _ROWS:
        if stream in ("host", "host_proc"):  # (no rows of their own: the host JSON's figures)
            _ROWS[key] = host_figure_rows(db)[stream == "host_proc"]
        else:
            _ROWS[key] = db.execute(named_stack_sql(db) if stream == "stack" else SQL[stream]).fetchall()
    rows = _ROWS[key]
    keep = [r for r in rows if lo <= r[0] <= hi]
    if seed is not None:
        before = [r for r in rows if r[0] <= seed]
        if before and before[-1] not in keep:
            keep = [before[-1], *keep]
    return keep


def _block_rows(db: sqlite3.Connection, stream: str, lo: float, hi: float, seed: float | None = None):
    columns = BLOCK_STREAMS[stream]
    ordered = stream not in ("gpu", "stack", "perf", "perf_rate")  # (written in Frame order)
    got = Blocks(db, stream, columns).read(lo, hi, seed, ordered=ordered)
    if got is None:
        return None
    per = []
    for c, kind in columns:
        v = got[c] if kind == "s" else got[c].tolist()
        per.append([None if kind == "i" and x == NULL else x for x in v])
    rows = list(zip(*per, strict=True))
    if stream == "gpu":
        rows.sort(key=lambda r: (r[0], r[1]))
    if stream == "stack":
        rows.sort(key=lambda r: (r[0], r[1]))  # (stable: as written within a (t, pid))
    if stream in ("perf", "perf_rate"):
        rows.sort(key=lambda r: r[0])  # (stable: as written, the rows' rowid order)
    return rows


def test_the_writer_writes_many_blocks_of_every_stream(many):
    for name, path in many.items():
        db = _db(path)
        got = dict(db.execute("SELECT stream, count(*) FROM block GROUP BY stream").fetchall())
        assert set(got) == set(BLOCK_STREAMS), name
        assert min(got.values()) >= 7, (name, got)
        last = db.execute("SELECT max(t1) FROM block").fetchone()[0]
        assert last == colblock.END  # a closed recording's blocks reach past any time


@pytest.mark.parametrize("stream", sorted(BLOCK_STREAMS), ids=lambda s: f"{s}-stream")
def test_blocks_hold_the_rows(many, stream):
    for name, path in many.items():
        db = _db(path)
        t0, t1 = db.execute("SELECT min(t), max(t) FROM frame").fetchone()
        rows = _sql_rows(db, stream, -math.inf, math.inf)
        assert len(rows) > 100 or (stream == "host_proc" and len(rows) > 50), (name, stream)
        spans = [(-math.inf, math.inf), (t0 + 15.0, t0 + 55.0), (t0 + 20.0, t0 + 20.0), (t0 + 61.3, t1)]
        spans += [(t1 + 1, t1 + 5), (t0 - 10, t0 - 1), (t0 + 30.0, t0 + 29.0)]
        for lo, hi in spans:
            assert _block_rows(db, stream, lo, hi) == _sql_rows(db, stream, lo, hi), (name, stream, lo, hi)
        for k in range(12):  # each row time ends up at both edges of a span
            r = rows[len(rows) * k // 12]
            for lo, hi in [(r[0], t1), (t0, r[0])]:
                assert _block_rows(db, stream, lo, hi) == _sql_rows(db, stream, lo, hi), (name, stream, lo)


@pytest.mark.parametrize("stream", ["frame", "host"], ids=lambda s: f"{s}-stream")
def test_blocks_read_with_a_seed(many, stream):
    """``seed``: the newest row at or before it too, wherever it lies (an earlier block, one with
    rows only after it, across blocks without rows: 'hostless'), as Recording._seed reads it."""
    for name, path in many.items():
        db = _db(path)
        t0, t1 = db.execute("SELECT min(t), max(t) FROM frame").fetchone()
        times = [r[0] for r in _sql_rows(db, stream, -math.inf, math.inf)]
        seeds = [t0 - 5, t0, t0 + 0.01, t0 + 47.0, t0 + 60.0, t0 + 74.9, t1, t1 + 3]
        seeds += [math.floor(t0 / BLOCK_S) * BLOCK_S + k * BLOCK_S for k in range(1, 12)]  # block edges
        seeds += times[:: max(1, len(times) // 9)]
        for seed in seeds:
            for lo, hi in [(seed, seed + 25.0), (seed + 12.0, t1), (seed, seed)]:
                want = _sql_rows(db, stream, lo, hi, seed)
                assert _block_rows(db, stream, lo, hi, seed) == want, (name, stream, seed, lo, hi)


def test_hostless_blocks_hold_no_rows(many):
    """(what the seed test above crosses)"""
    db = _db(many["hostless"])
    t0 = db.execute("SELECT min(t) FROM frame").fetchone()[0]
    empty = db.execute(
        "SELECT count(*) FROM block WHERE stream='host' AND n=0 AND t0>? AND t1<?", (t0 + 40, t0 + 75)
    ).fetchone()[0]
    assert empty >= 2


# --- the report from blocks -----------------------------------------------------------------------


def _report(path: Path, columns: bool, fmt: str, kw: dict) -> str:
    """The report, its file's path left out (the copies compared live in other folders).
    ``columns`` False: of the rows alone, from a copy without the block table."""
    if not columns:
        with tempfile.TemporaryDirectory() as d:
            return _report(
                _edit_rows(Path(shutil.copyfile(path, Path(d) / path.name)), "DROP TABLE block"),
                True,
                fmt,
                kw,
            )
    try:
        got = render(build_report(Recording(path), **kw), fmt)
    except UserError as e:
        return f"UserError: {e}"
    assert str(path) in got
    return got.replace(str(path), "REC")


@pytest.fixture
def reads(monkeypatch):
    """Each Blocks.read of a stream: whether it gave the rows (not None)."""
    got: dict[str, list[bool]] = {}
    real = Blocks.read

    def spy(self, *a, **kw):
        out = real(self, *a, **kw)
        got.setdefault(self.stream, []).append(out is not None)
        return out

    monkeypatch.setattr(Blocks, "read", spy)
    return got


def _no_rows(mp) -> None:
    """The column path's row readers raise: only the blocks can give its report."""

    def refuse(*a, **kw):
        raise AssertionError("read the rows, not the blocks")

    mp.setattr(reader, "_json_rows", refuse)
    mp.setattr(parts, "_stack_rows", refuse)
    mp.setattr(parts, "hosts", refuse)


class _Reports(dict):
    """The report of a recording of ``many`` and a variant, (name, format, kw as JSON), read from its
    rows alone: each made when first asked for (a test of one damaged file needs a few of them)."""

    def __init__(self, many: dict) -> None:
        super().__init__()
        self.many = many

    def __missing__(self, key: tuple) -> str:
        name, fmt, kw = key
        self[key] = _report(self.many[name], False, fmt, json.loads(kw))
        return self[key]


@pytest.fixture(scope="module")
def frame_reports(many):
    return _Reports(many)


def _variants(many: dict) -> list[tuple[str, str, str]]:
    return [
        (name, fmt, json.dumps(kw))
        for name in many
        for fmt, kw in [*VARIANTS, ("text", {"gpu": 1, "t_from": 30})]
        if name == "heldout_ddp_s11" or kw.get("gpu") != 1
    ]


def test_blocks_report_the_same_bytes_as_frames(many, frame_reports, reads, monkeypatch, tmp_path):
    wants = {key: frame_reports[key] for key in _variants(many)}
    _no_rows(monkeypatch)
    for (name, fmt, kw), want in wants.items():
        reads.clear()
        got = _report(many[name], True, fmt, json.loads(kw))
        assert not got.startswith("UserError"), (name, got)
        assert got == want, (name, fmt, kw)
        assert set(reads) == set(BLOCK_STREAMS) and all(all(v) for v in reads.values()), (name, reads)
    two = build_report(Recording(many["heldout_ddp_s11"]))
    assert [g["index"] for g in two["gpus"]] == [0, 1]
    for stream in ("gpu", "host", "host_proc", "stack"):  # (the patches bite: without blocks, the rows)
        path = tmp_path / f"no-{stream}.memtop"
        shutil.copyfile(many["labelled_s2"], path)
        db = sqlite3.connect(path)
        db.execute("DELETE FROM block WHERE stream=?", (stream,))
        db.commit()
        db.close()
        with pytest.raises(AssertionError, match="read the rows"):
            assert _report(path, True, "json", {}) == frame_reports["labelled_s2", "json", "{}"]


def _edit(path: Path, stream: str, seq: int, change) -> None:
    """Block ``seq`` of ``stream`` decoded, its rows changed, and encoded again."""
    db = sqlite3.connect(path)
    columns = BLOCK_STREAMS[stream]
    (data,) = db.execute("SELECT data FROM block WHERE stream=? AND seq=?", (stream, seq)).fetchone()
    rows = change([list(r) for r in _as_rows(columns, decode(columns, data))])
    db.execute("UPDATE block SET data=? WHERE stream=? AND seq=?", (encode(columns, rows), stream, seq))
    db.commit()
    db.close()


def test_blocks_are_read_not_ignored(many, frame_reports, tmp_path):
    """Every row of the busiest gpu block at util 0: the report changes, the rows' does not."""
    path = tmp_path / "u.memtop"
    shutil.copyfile(many["labelled_s2"], path)
    util = [c for c, _ in BLOCK_STREAMS["gpu"]].index("util")
    db = _db(path)
    busiest = max(
        db.execute("SELECT seq, data FROM block WHERE stream='gpu'").fetchall(),
        key=lambda r: sum(max(0, x) for x in decode(BLOCK_STREAMS["gpu"], r[1])[1]["util"].tolist()),
    )[0]
    db.close()

    def idle(rows):
        assert sum(r[util] or 0 for r in rows) > 0
        return [[*r[:util], 0, *r[util + 1 :]] for r in rows]

    _edit(path, "gpu", busiest, idle)
    for fmt, kw in [("json", {}), ("text", {})]:
        want = frame_reports["labelled_s2", fmt, json.dumps(kw)]
        assert _report(path, False, fmt, kw) == want
        assert _report(path, True, fmt, kw) != want


def _swap_data(stream: str, a: int, b: int) -> str:
    return (
        f"UPDATE block SET data=(SELECT data FROM block WHERE stream='{stream}' AND seq={b}),"
        f" n=(SELECT n FROM block WHERE stream='{stream}' AND seq={b}) WHERE stream='{stream}' AND seq={a}"
    )


def _nan_time(rows):
    rows[len(rows) // 2][0] = math.nan
    return rows


def _text_beyond(path: Path) -> None:
    """A stack block whose strings lost their last: a text index beyond them."""
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM block WHERE stream='stack' AND seq=4").fetchone()
    head = _header(data)
    assert head["s"]
    db.execute(
        "UPDATE block SET data=? WHERE stream='stack' AND seq=4",
        (_blob({**head, "s": head["s"][:-1]}, _body(data)),),
    )
    db.commit()
    db.close()


def _raw_edit(path: Path, stream: str, seq: int, change) -> None:
    """Block ``seq`` of ``stream`` as (header, body), changed by ``change``, deflated again."""
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM block WHERE stream=? AND seq=?", (stream, seq)).fetchone()
    head, body = change(_header(data), bytearray(_body(data)))
    db.execute("UPDATE block SET data=? WHERE stream=? AND seq=?", (_blob(head, bytes(body)), stream, seq))
    db.commit()
    db.close()


def _extra_width(head: dict, body: bytearray) -> tuple:
    return {**head, "w": [*head["w"], 1]}, body + b"\x00" * head["n"]


def _index_below_null(head: dict, body: bytearray) -> tuple:
    """The first thread name's text index made -5."""
    names = [c for c, _ in BLOCK_STREAMS["stack"]].index("name")
    n, w = head["n"], head["w"][names]
    at = sum(head["w"][:names]) * n
    row = next(
        i for i in range(n) if int.from_bytes(body[at + i * w : at + (i + 1) * w], "little", signed=True) >= 0
    )
    body[at + row * w : at + (row + 1) * w] = (-5).to_bytes(w, "little", signed=True)
    return head, body


ALL = "frame gpu host host_proc stack perf perf_rate"
DAMAGE = {  # (the streams damaged, the damage)
    "data zero byte": ("gpu", "UPDATE block SET data = X'00' WHERE stream='gpu' AND seq=4"),
    "data not a blob": ("host", "UPDATE block SET data = 'text' WHERE stream='host' AND seq=4"),
    "a middle block gone": ("gpu", "DELETE FROM block WHERE stream='gpu' AND seq=5"),
    "seq renumbered": (
        "host",
        "UPDATE block SET seq = -seq - 1 WHERE stream='host';"
        " UPDATE block SET seq = 2 * (-seq - 1) WHERE stream='host'",
    ),
    "seq swapped": (
        "frame",
        "UPDATE block SET seq = -1 WHERE stream='frame' AND seq=3;"
        " UPDATE block SET seq = 3 WHERE stream='frame' AND seq=4;"
        " UPDATE block SET seq = 4 WHERE stream='frame' AND seq=-1",
    ),
    "t0 not the t1 before": ("host", "UPDATE block SET t0 = t0 + 0.5 WHERE stream='host' AND seq=3"),
    "t1 not a number": ("frame", "UPDATE block SET t1 = 'x' WHERE stream='frame' AND seq=2"),
    "n not the blob's": ("frame", "UPDATE block SET n = n + 1 WHERE stream='frame' AND seq=2"),
    "n negative": ("stack", "UPDATE block SET n = -1 WHERE stream='stack' AND seq=2"),
    "rows outside the block": ("host", _swap_data("host", 4, 5)),
    "rows of an earlier block": ("gpu", _swap_data("gpu", 6, 2)),
    "another stream's block": (
        "gpu",
        "UPDATE block SET data=(SELECT data FROM block WHERE stream='frame' AND seq=3) WHERE stream='gpu' AND seq=3",
    ),
    "host_proc of host": (
        "host_proc",
        "UPDATE block SET data=(SELECT data FROM block WHERE stream='host' AND seq=3)"
        " WHERE stream='host_proc' AND seq=3",
    ),
    "the last blocks gone (a killed recorder)": (
        ALL,
        "DELETE FROM block WHERE (stream, seq) IN (SELECT stream, max(seq) FROM block GROUP BY stream)",
    ),
    "no block table": (ALL, "DROP TABLE block"),
    "block table of another layout": (ALL, "DROP TABLE block; CREATE TABLE block(x)"),
    "NaN time in a frame block": ("frame", lambda p: _edit(p, "frame", 3, _nan_time)),
    "NaN time in a gpu block": ("gpu", lambda p: _edit(p, "gpu", 3, _nan_time)),
    "text index beyond the strings": ("stack", _text_beyond),
    "a header with an extra width": ("gpu", lambda p: _raw_edit(p, "gpu", 3, _extra_width)),
    "a text index below NULL": ("stack", lambda p: _raw_edit(p, "stack", 4, _index_below_null)),
}


@pytest.mark.parametrize(
    "case",
    [c for c in sorted(DAMAGE)],
)
def test_damaged_blocks_fall_back_to_the_rows(case, many, frame_reports, tmp_path, monkeypatch, reads):
    """Blocks that are missing, malformed or inconsistent: the damaged stream's rows are read instead
    (its blocks give nothing, the others' give their rows), and the column path (no fallback to
    Frames) gives the Frame path's report."""
    path = tmp_path / "d.memtop"
    shutil.copyfile(many["labelled_s2"], path)
    damaged, damage = DAMAGE[case]
    if callable(damage):
        damage(path)
    else:
        _edit_rows(path, damage)
    rec = Recording(path)
    colscan.scan_columns(rec, None, rec.t0, rec.t1)  # (raises nothing: the rows are usual)
    assert (reads or damaged == ALL) and not any(any(v) for s, v in reads.items() if s in damaged.split()), (
        reads
    )
    assert all(all(v) for s, v in reads.items() if s not in damaged.split()), reads
    for fmt, kw in VARIANTS[::3]:
        got = _report(path, True, fmt, kw)
        assert not got.startswith("UserError"), got
        assert got == frame_reports["labelled_s2", fmt, json.dumps(kw)], (case, fmt, kw)


ROWS_COUNTED = {  # rows added or deleted after recording: the blocks' count of rows no longer matches
    "frame t far ahead": "INSERT INTO frame VALUES (9e11)",
    "frames deleted": "DELETE FROM frame WHERE t IN (SELECT t FROM frame LIMIT 100 OFFSET 300)",
    "gpu rows deleted": "DELETE FROM gpu WHERE t IN (SELECT t FROM gpu LIMIT 100 OFFSET 300)",
    "stack rows deleted": "DELETE FROM stack_sample WHERE (t, pid, i) IN"
    " (SELECT t, pid, i FROM stack_sample LIMIT 100 OFFSET 100)",
    "a perf row added": "INSERT INTO perf SELECT t + 0.01, pid, data FROM perf LIMIT 1",
    "host rows deleted": "DELETE FROM host WHERE t IN (SELECT t FROM host LIMIT 3 OFFSET 40)",
    "bad stack json": "UPDATE stack SET frames = '[[1,2' || id WHERE id IN (SELECT id FROM stack LIMIT 3)",
}


@pytest.mark.parametrize("case", sorted(ROWS_COUNTED))
def test_rows_added_or_deleted_after_recording_report_as_frames(case, many, tmp_path):
    """A row added to or deleted from a table under the blocks (or a table the blocks do not stand
    for: stack frames) after recording: the report is the Frame path's."""
    path = _edit_rows(Path(shutil.copyfile(many["labelled_s2"], tmp_path / "e.memtop")), ROWS_COUNTED[case])
    assert _report(path, True, "json", {}) == _report(path, False, "json", {})


ROWS_CHANGED = {  # values changed in place after recording (tests/test_damaged.py's cases among them)
    "gpu util changed": "UPDATE gpu SET util = 0 WHERE t IN (SELECT t FROM gpu LIMIT 200 OFFSET 300)",
    "float clock_events": "UPDATE gpu SET clock_events = 0.5",
    "inf sm": "UPDATE gpu SET sm = 1e999",
    "text stack pid": "UPDATE stack_sample SET pid = 'x' WHERE (t, pid, i) IN (SELECT t, pid, i FROM stack_sample LIMIT 9)",
    "text perf": 'UPDATE perf SET data = \'{"a": "b"}\'',
}


@pytest.mark.parametrize("case", sorted(ROWS_CHANGED))
def test_values_changed_in_rows_the_blocks_stand_for_do_not_change_the_report(case, many, tmp_path):
    """docs/RECORDING.md: where whole blocks stand for a table's rows, the report reads the values as
    recorded; a value changed or damaged in place in those rows shows in replay (the Frame path
    skips it and says so), not in the report."""
    path = Path(shutil.copyfile(many["labelled_s2"], tmp_path / "e.memtop"))
    want = _report(path, True, "json", {})
    _edit_rows(path, ROWS_CHANGED[case])
    assert _report(path, True, "json", {}) == want
    assert _report(path, False, "json", {}) != want


def test_a_damaged_host_blob_the_report_decodes_sends_it_to_frames(many, tmp_path):
    """With blocks a host sample's JSON is inflated only where the report needs it (a process's
    newest entry, the last Frame's host); one of those damaged: the Frame path, which says so."""
    path = Path(shutil.copyfile(many["labelled_s2"], tmp_path / "e.memtop"))
    _edit_rows(path, "UPDATE host SET data = X'00' WHERE t = (SELECT max(t) FROM host)")
    got = _report(path, True, "json", {})
    assert got == _report(path, False, "json", {})
    assert "damaged host data skipped" in got


# --- the Writer drops what blocks cannot hold ------------------------------------------------------


@pytest.fixture(scope="module")
def frames2():
    rec = Recording(REC[2])
    return rec.meta, list(rec.frames()), rec.markers()


def _streams(path: Path) -> set[str]:
    return {r[0] for r in _db(path).execute("SELECT DISTINCT stream FROM block")}


def _same_report(path: Path) -> None:
    for fmt, kw in VARIANTS[::3]:
        assert _report(path, True, fmt, kw) == _report(path, False, fmt, kw), (path.name, fmt, kw)


def test_a_gpu_row_back_in_time_drops_the_gpu_blocks(frames2, tmp_path, monkeypatch):
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    k = len(frames) * 2 // 3
    before = next(f.gpus[0].t for f in reversed(frames[:k]) if f.gpus and f.gpus[0].t < frames[k].gpus[0].t)
    f = frames[k]
    back = replace(f, gpus=(replace(f.gpus[0], t=before - 0.05), *f.gpus[1:]))
    path = _write([*frames[:k], back, *frames[k + 1 :]], meta, tmp_path / "back.memtop", markers)
    assert _streams(path) == set(BLOCK_STREAMS) - {"gpu"}
    assert _streams(_write(frames, meta, tmp_path / "fine.memtop", markers)) == set(BLOCK_STREAMS)
    _same_report(path)


def test_a_host_sample_older_than_a_block_drops_the_host_blocks(frames2, tmp_path, monkeypatch):
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    k = next(i for i in range(len(frames) * 2 // 3, len(frames)) if frames[i].host is not None)
    f = frames[k]
    old = replace(f, host=replace(f.host, t=f.host.t - 3 * BLOCK_S - 0.0123))
    path = _write([*frames[:k], old, *frames[k + 1 :]], meta, tmp_path / "old.memtop", markers)
    assert _streams(path) == set(BLOCK_STREAMS) - {"host", "host_proc"}
    # its blob was chained to the sample before it in time of writing, not in time: read in time,
    # it does not inflate, and the one reader skips it (and the next, chained to it) as damaged
    plain = _edit_rows(Path(shutil.copyfile(path, tmp_path / "plain.memtop")), "DROP TABLE block")
    for p in (path, plain):
        rec = Recording(p)
        colscan.scan_columns(rec, None, rec.t0, rec.t1)
        assert rec.damage == ["damaged host data skipped"]
    for fmt, kw in VARIANTS[::3]:
        assert _report(path, True, fmt, kw) == _report(path, False, fmt, kw), (fmt, kw)


def test_frames_written_out_of_order_leave_blocks_that_are_not_read(frames2, tmp_path, monkeypatch):
    """Two Frames given in the wrong order, within a block: the frame block's times are out of order
    (read: None), a GPU's time goes back (the gpu blocks dropped); the report is the Frame path's."""
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    k = len(frames) // 2
    while (
        math.floor(frames[k].t / BLOCK_S) != math.floor(frames[k + 1].t / BLOCK_S)
        or frames[k].gpus[0].t == frames[k + 1].gpus[0].t
    ):
        k += 1
    path = _write(
        [*frames[:k], frames[k + 1], frames[k], *frames[k + 2 :]], meta, tmp_path / "swap.memtop", markers
    )
    db = _db(path)
    assert "gpu" not in _streams(path) and "frame" in _streams(path)
    assert Blocks(db, "frame", BLOCK_STREAMS["frame"]).read(-math.inf, math.inf) is None
    _same_report(path)


def test_an_integer_iowait_is_stored_as_a_float(frames2, tmp_path, monkeypatch):
    """The Writer takes a host sample's figures from its JSON (decode.host_from_blob makes the
    iowait a float): its host blocks stay, and hold the rows."""
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    hosts = [f.host for f in frames]
    path = _write(
        [
            f if f.host is None else replace(f, host=replace(f.host, iowait_pct=round(f.host.iowait_pct)))
            for f in frames
        ],
        meta,
        tmp_path / "int.memtop",
        markers,
    )
    assert any(h is not None and h.iowait_pct != round(h.iowait_pct) for h in hosts)
    assert _streams(path) == set(BLOCK_STREAMS)
    db = _db(path)
    assert _block_rows(db, "host", -math.inf, math.inf) == _sql_rows(db, "host", -math.inf, math.inf)
    _same_report(path)


def test_a_writer_recording_is_private_and_has_blocks(many):
    for path in many.values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert _db(path).execute("SELECT count(*) FROM sqlite_master WHERE name='block'").fetchone()[0] == 1


def test_a_recording_without_blocks_reports_from_the_rows(many, frame_reports, tmp_path, reads):
    path = _edit_rows(
        Path(shutil.copyfile(many["heldout_torch_s3"], tmp_path / "old.memtop")), "DROP TABLE block"
    )
    assert Blocks(_db(path), "gpu", BLOCK_STREAMS["gpu"]).end == -math.inf
    for fmt, kw in VARIANTS[::3]:
        assert _report(path, True, fmt, kw) == frame_reports["heldout_torch_s3", fmt, json.dumps(kw)]
    assert not any(v for v in reads.values() for v in v)  # (no block read gave rows)


# --- recordings made by `memtop record` on the H100 (bench/RESULTS.md, session 11) -----------------

RECORDED = DATA / "blocks_s11.memtop"  # 335 s of bench/workload.py --seed 11, closed with Ctrl-C
KILLED = DATA / "blocks_killed_s11.memtop"  # the same run seen by a recorder killed with SIGKILL
# schema 3 (no host_proc rows, stacks keyed by dump, deflated stacks and caps): 373 s of
# bench/workloads/torch_fw.py --seed 13 --phase-s 12 (DataLoader workers, torch.compile), Ctrl-C
SCHEMA3 = DATA / "schema3_torch_s13.memtop"


@pytest.mark.parametrize(
    ("path", "schema", "markers"), [(RECORDED, 2, 19), (SCHEMA3, 3, 26)], ids=["s2", "s3"]
)
def test_a_recorder_writes_blocks_the_report_reads(path, schema, markers, reads, monkeypatch):
    """The real recorder's blocks: at least two per stream, the last to the end; the report reads
    every stream from them alone and gives the Frame path's bytes."""
    db = _db(path)
    assert {
        s: n for s, n in db.execute("SELECT stream, count(*) FROM block GROUP BY stream")
    } == dict.fromkeys(BLOCK_STREAMS, 2)
    assert db.execute("SELECT count(*) FROM marker").fetchone()[0] == markers  # (labelled: its phases)
    assert json.loads(db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0]) == schema
    db.close()
    want = {(fmt, json.dumps(kw)): _report(path, False, fmt, kw) for fmt, kw in VARIANTS}
    _no_rows(monkeypatch)
    for fmt, kw in VARIANTS:
        reads.clear()
        assert _report(path, True, fmt, kw) == want[fmt, json.dumps(kw)], (fmt, kw)
        assert set(reads) == set(BLOCK_STREAMS) and all(all(v) for v in reads.values()), reads


def test_a_killed_recorder_leaves_blocks_the_report_reads_only_where_they_reach(reads):
    """SIGKILL: the blocks end at the last 5-minute edge the recorder passed; a report past it reads
    the rows, one within it the blocks, and both are the Frame path's."""
    rec = Recording(KILLED)
    end = Blocks(rec.db, "frame", BLOCK_STREAMS["frame"], "frame").end
    assert rec.t0 < end < rec.t1
    for kw, blocks in [({}, False), ({"t_to": end - rec.t0 - 1}, True)]:
        reads.clear()
        assert _report(KILLED, True, "json", kw) == _report(KILLED, False, "json", kw), kw
        assert bool(reads) == blocks and all(all(v) for v in reads.values()), (kw, reads)


def test_a_recording_shorter_than_a_block_has_none(tmp_path):
    """Closed before its first 5-minute edge: no blocks (a tenth of a two-minute recording's size for
    nothing: its rows are read in a fraction of a second), and the report reads the rows."""
    sys.path.insert(0, str(ROOT / "bench"))
    from long_runs import rewrite

    out = tmp_path / "short.memtop"
    rewrite(REC[2], out)
    rec = Recording(out)
    assert rec.t1 - rec.t0 < colblock.BLOCK_S
    assert _db(out).execute("SELECT count(*) FROM block").fetchone()[0] == 0
    assert _report(out, True, "json", {}) == _report(out, False, "json", {})


# --- found in review: empty spans, hostile counts, the Writer's failures ------------------------------


def test_a_recording_without_perf_reads_its_blocks(frames2, tmp_path, monkeypatch, reads):
    """No perf reads (a container without perf access) and ranges with none: the (empty) perf blocks
    are read, not a reason to scan by Frames."""
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    path = _write([replace(f, perf=()) for f in frames], meta, tmp_path / "noperf.memtop", markers)
    for kw in [{}, {"t_to": 4.0}, {"t_from": 30, "t_to": 37.5}]:
        reads.clear()
        assert _report(path, True, "json", kw) == _report(path, False, "json", kw), kw
        assert reads.get("perf") and all(reads["perf"]) and all(reads["perf_rate"]), (kw, reads)


def _count_to(stream: str, column: str, value: int):
    def change(rows):
        at = [c for c, _ in BLOCK_STREAMS[stream]].index(column)
        row = next(r for r in rows if r[at] > 0)
        row[at] = value
        return rows

    return change


@pytest.mark.parametrize("stream, column", [("host", "procs"), ("perf", "rates")])
def test_a_hostile_count_in_a_block_reads_the_rows(stream, column, many, frame_reports, tmp_path):
    """A count of 10**12 processes or rates in one block: checked against the rows the other stream
    holds before anything is repeated by it (no 7 TiB allocation); the rows are read."""
    path = Path(shutil.copyfile(many["labelled_s2"], tmp_path / "c.memtop"))
    _edit(path, stream, 3, _count_to(stream, column, 10**12))
    assert _report(path, True, "json", {}) == frame_reports["labelled_s2", "json", "{}"]


def test_perf_rate_blocks_hold_at_most_64_rates_a_read(many, frame_reports, tmp_path, monkeypatch):
    """perf_rate has no table to count against: blocks claiming more rows than 64 per perf read are
    refused before one is inflated."""
    path = Path(shutil.copyfile(many["labelled_s2"], tmp_path / "r.memtop"))
    _edit_rows(path, "UPDATE block SET n = n + 100000 WHERE stream='perf_rate' AND seq=2")
    inflated = []
    real = colblock.decode
    monkeypatch.setattr(colblock, "decode", lambda c, b, *o: inflated.append(c) or real(c, b, *o))
    assert _report(path, True, "json", {}) == frame_reports["labelled_s2", "json", "{}"]
    assert BLOCK_STREAMS["perf_rate"] not in inflated


def test_a_failed_block_write_keeps_the_recording(frames2, tmp_path, monkeypatch):
    """SQLite failing in a block write (a full disk at the last flush): the rows are committed, the
    blocks stop where they were, and the report reads the rows after them."""
    monkeypatch.setattr(colblock, "BLOCK_S", BLOCK_S)
    meta, frames, markers = frames2
    real = colblock.BlockWriter._write_blocks

    def full(self, end):
        if end == colblock.END:
            raise sqlite3.OperationalError("database or disk is full")
        real(self, end)

    monkeypatch.setattr(colblock.BlockWriter, "_write_blocks", full)
    path = _write(frames, meta, tmp_path / "full.memtop", markers)
    rec = Recording(path)
    assert rec.n_frames == len({f.t for f in frames})
    assert rec.t0 < Blocks(rec.db, "gpu", BLOCK_STREAMS["gpu"], "gpu").end < rec.t1
    _same_report(path)


def test_a_perf_read_that_is_not_pairs_drops_the_perf_blocks_not_the_recording(frames2, tmp_path):
    meta, frames, markers = frames2
    k = next(i for i, f in enumerate(frames) if f.perf and i > 60)
    f = frames[k]
    bad = replace(f, perf=(replace(f.perf[0], rates=(("a", 1.0, 2.0),)), *f.perf[1:]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(colblock, "BLOCK_S", BLOCK_S)
        path = _write([*frames[:k], bad, *frames[k + 1 :]], meta, tmp_path / "pairs.memtop", markers)
    assert Recording(path).n_frames == len({f.t for f in frames})
    assert _streams(path) == set(BLOCK_STREAMS) - {"perf", "perf_rate"}


def test_rows_that_never_reach_a_block_edge_are_not_held_without_bound(frames2, tmp_path, monkeypatch):
    monkeypatch.setattr(colblock, "MAX_OPEN_ROWS", 200)  # (the 142 s run: 1,410 Frames, one open block)
    monkeypatch.setattr(colblock, "BLOCK_S", 1000.0)
    meta, frames, markers = frames2
    path = _write(frames, meta, tmp_path / "held.memtop", markers)
    assert _db(path).execute("SELECT count(*) FROM block").fetchone()[0] == 0
    _same_report(path)


def test_host_proc_blocks_beyond_what_the_file_could_hold_are_not_read(tmp_path, monkeypatch):
    """No table counts the host_proc rows (schema 3): blocks of repeated rows (deflating a
    thousandfold) that claim more rows than a quarter of the file's bytes are not inflated; the report
    reads the host JSON and is the Frame path's."""
    path = Path(shutil.copyfile(SCHEMA3, tmp_path / "hp.memtop"))
    rec = Recording(path)
    n = rec.size // 4 // 2 + 1  # two blocks of n rows: just past the budget
    rec.close()
    cols = BLOCK_STREAMS["host_proc"][:6]  # the layout before model.MAIN_FIELDS: still read
    db = sqlite3.connect(path)
    db.execute("DELETE FROM block WHERE stream='host_proc'")
    for k in range(2):
        t0, t1 = (-colblock.END, 50.0) if k == 0 else (50.0, colblock.END)
        blob = encode(cols, [(40.0 + 20 * k, 1, 0.0, None, "python", "R")] * n)
        db.execute("INSERT INTO block VALUES (?,?,?,?,?,?)", ("host_proc", k, t0, t1, n, blob))
    db.commit()
    db.close()
    rec = Recording(path)
    inflated = []
    real = colblock.decode
    monkeypatch.setattr(
        colblock,
        "decode",
        lambda columns, data, *opt: inflated.append(columns[:6]) or real(columns, data, *opt),
    )
    assert parts.host_blocks(rec, rec.t0, rec.t1, None) is None
    assert inflated and cols not in inflated  # (the host blocks were read; these were refused unread)
    monkeypatch.undo()
    assert _report(path, True, "json", {}) == _report(path, False, "json", {})


def test_every_process_figure_reads_back_from_the_blocks_as_recorded(many):
    """The host_proc blocks hold each of model.PROC_FIGURES (their columns follow from ProcSample's
    fields, no list of their own): the report's arrays of every figure from the blocks are those of the
    host samples' JSON, DataLoader workers and their parents included."""
    import numpy as np

    from memtop.core.model import PROC_FIGURES, PROC_KINDS
    from memtop.storage.decode import HOST_PROC_JOB

    assert BLOCK_STREAMS["host_proc"][1:] == (*PROC_KINDS.items(), *HOST_PROC_JOB)
    rec = Recording(many["heldout_torch_s3"])
    ft = np.array(colscan.frame_times(rec, rec.t0, rec.t1))
    by_blocks = colscan._Hosts(rec, ft, -math.inf, rec.t1, None)
    by_json = colscan._Hosts(rec, ft, -math.inf, rec.t1, None, blocks=False)
    assert by_blocks._table is not None and by_blocks.t == by_json.t
    hs = list(range(len(by_json.t)))
    got, want = by_blocks.figures(hs), by_json.figures(hs)
    assert got.has_parent.any() and got.data_worker.any()
    for k in (*PROC_FIGURES, "has_parent", "data_worker", "asleep", "stopped"):
        assert (
            np.array_equal(getattr(got, k), getattr(want, k))
            and getattr(got, k).dtype == getattr(want, k).dtype
        ), k
    assert np.array_equal(got.rows, want.rows) and np.array_equal(got.iowait, want.iowait)


def test_coded_text_columns_are_the_texts_one_code_each():
    """``Blocks.read(coded=True)`` (what the report reads): a text column as a code per row into its
    distinct strings, -1 for NULL, equal texts one code; its values are the lists ``read`` gives, for a
    range cut inside blocks, with rows NULL and not."""
    rec = Recording(DATA / "blocks_s11.memtop")
    lo, hi = rec.t0 + 20.0, rec.t1 - 20.0
    for stream in ("stack", "host_proc"):
        blocks = rec.blocks(stream)
        plain, coded = blocks.read(lo, hi, ordered=False), blocks.read(lo, hi, ordered=False, coded=True)
        texts = [c for c, kind in blocks.columns if kind == "s"]
        for c in texts:
            got = coded[c]
            assert isinstance(got, colblock.Texts) and len(got) == len(plain[c]) > 0
            assert got.values() == plain[c]
            assert len(set(got.strings)) == len(got.strings)  # (one code per distinct text)
            assert [got.value(i) for i in range(len(got))] == plain[c]
        assert any(None in plain[c] for c in texts) and any(set(plain[c]) - {None} for c in texts)
