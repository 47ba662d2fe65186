"""SQLite recordings: round trip, seek, crash safety, file mode, and bad input."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA, REC
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtop.core.errors import UserError
from memtop.core.model import Marker
from memtop.storage.store import Recording, Writer, read_markers


def _copy(frames, path: Path, markers=()) -> Recording:
    w = Writer(path, {"host": "test", "gpus": [{"index": 0, "name": "H100", "uuid": "u", "mode": "gpm"}]})
    for f in frames:
        w.add(f)
    if markers:
        w.add_markers(list(markers))
    w.close()
    assert w.error is None
    return Recording(path)


def test_round_trip_equal_frames(frames_s0, tmp_path):
    src = frames_s0[:400]
    back = list(_copy(src, tmp_path / "a.memtop").frames())
    assert len(back) == len(src)
    for a, b in zip(src, back):
        assert a.t == b.t
        assert [g.t for g in a.gpus] == [g.t for g in b.gpus]
        assert a.gpus == b.gpus  # values were stored scaled; the recording's own values round-trip exactly
        assert a.host == b.host
        assert a.caps == b.caps
        assert {(s.pid, s.t): s.threads for s in a.stacks} == {(s.pid, s.t): s.threads for s in b.stacks}
        assert a.perf == b.perf
    n_series = sum(len(f.series) for f in src)
    assert n_series and n_series == sum(len(f.series) for f in back)


def test_stack_rows_keyed_by_dump_and_place(tmp_path):
    """Schema 3: a dump's threads keep their order, the class is derived on read (not stored), and a
    dump at a time already written for its process (a clock going back) is stored once, the
    recording going on."""
    from dataclasses import replace

    src = list(itertools.islice(Recording(DATA / "heldout_torch_s3.memtop").frames(), 600))  # threads
    k = next(i for i, f in enumerate(src) if any(len(s.threads) > 1 for s in f.stacks))
    first = next(s for s in src[k].stacks if len(s.threads) > 1)
    flipped = replace(first, threads=first.threads[::-1])
    src[k] = replace(src[k], stacks=tuple(flipped if s is first else s for s in src[k].stacks))
    later = next(i for i in range(k + 1, len(src)) if any(s.pid == first.pid for s in src[i].stacks))
    again = replace(first, threads=first.threads[:1])  # the same (t, pid), after another dump of it
    src.insert(later + 1, replace(src[later + 1], stacks=(again,)))
    rec = _copy(src, tmp_path / "k.memtop")
    db = sqlite3.connect(tmp_path / "k.memtop")
    rows = db.execute("SELECT tid, i FROM stack_sample WHERE t=? AND pid=? ORDER BY i", (first.t, first.pid))
    assert [r[0] for r in rows] == [th.tid for th in flipped.threads]
    assert db.execute("SELECT count(klass) FROM stack_sample").fetchone()[0] == 0
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == "4"
    back = next(s for f in rec.frames() for s in f.stacks if (s.pid, s.t) == (first.pid, first.t))
    assert back.threads == flipped.threads  # (classes included: derived on read as they were)


def test_a_recording_written_again_says_its_own_format(tmp_path):
    """Meta handed on from an older recording keeps its facts, not its schema or memtop version."""
    from memtop import __version__
    from memtop.storage.store import SCHEMA_VERSION

    old = Recording(REC[0])
    assert old.meta["schema"] == 1
    w = Writer(tmp_path / "again.memtop", old.meta)
    w.add(next(old.frames()))
    w.close()
    meta = Recording(tmp_path / "again.memtop").meta
    assert meta["schema"] == SCHEMA_VERSION and meta["memtop_version"] == __version__
    assert meta["host"] == old.meta["host"] and meta["gpus"] == old.meta["gpus"]


def test_markers_round_trip(frames_s0, tmp_path):
    ms = [Marker(frames_s0[0].t, frames_s0[50].t, "compute", "compute", '{"tflop": 1}')]
    rec = _copy(frames_s0[:100], tmp_path / "m.memtop", ms)
    assert rec.markers() == ms


def test_seek_lands_on_the_right_frame(frames_s0):
    rec = Recording(REC[0])
    for k in (0, 137, 700, len(frames_s0) - 1):
        f = rec.seek(frames_s0[k].t)
        assert f.t == frames_s0[k].t
        assert f.gpus == frames_s0[k].gpus and f.host == frames_s0[k].host
    mid = (frames_s0[10].t + frames_s0[11].t) / 2
    assert rec.seek(mid).t == frames_s0[10].t


def test_file_is_private(frames_s0, tmp_path):
    _copy(frames_s0[:5], tmp_path / "p.memtop")
    assert stat.S_IMODE(os.stat(tmp_path / "p.memtop").st_mode) == 0o600


def test_refuses_to_overwrite(tmp_path):
    p = tmp_path / "x.memtop"
    p.write_text("keep me")
    with pytest.raises(UserError, match="exists"):
        Writer(p, {})
    assert p.read_text() == "keep me"


@pytest.mark.slow
def test_sigkill_keeps_what_was_written(tmp_path):
    """A recorder killed with SIGKILL leaves a recording that opens and holds every frame a reader saw
    before the kill. (How much a kill loses, about a second, is a pace: bench/, not here; the recorder
    is given as long as it needs to write its first frames, which a loaded machine makes slow.)"""
    out = tmp_path / "k.memtop"
    p = subprocess.Popen(
        [sys.executable, "-m", "memtop", "record", "-o", str(out), "--no-stacks"], stderr=subprocess.DEVNULL
    )
    seen = None
    end = time.monotonic() + 120
    while seen is None and time.monotonic() < end and p.poll() is None:
        time.sleep(0.5)
        with contextlib.suppress(UserError, OSError, sqlite3.Error):
            seen = Recording(out).t1 if out.exists() else None
    assert seen is not None, "the recorder wrote no frame"
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.wait()
    rec = Recording(out)  # still opens
    assert rec.n_frames > 0 and rec.t1 >= seen


def _bad(path: Path, match: str) -> None:
    with pytest.raises(UserError, match=match) as e:
        Recording(path)
    assert "\n" not in str(e.value)


def test_bad_inputs_each_get_one_line(tmp_path):
    _bad(tmp_path / "missing.memtop", "no such file")
    _bad(tmp_path, "directory")
    os.mkfifo(tmp_path / "fifo.memtop")  # (opening it would wait for a writer: the report hung)
    _bad(tmp_path / "fifo.memtop", "not a regular file")
    (tmp_path / "text.memtop").write_text("hello, not a database" * 100)
    _bad(tmp_path / "text.memtop", "not an SQLite file")
    db = sqlite3.connect(tmp_path / "other.db")
    db.execute("CREATE TABLE t(x)")
    db.commit()
    db.close()
    _bad(tmp_path / "other.db", "not a memtop recording")
    newer = tmp_path / "newer.memtop"
    newer.write_bytes(REC[0].read_bytes())
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    db.close()
    _bad(newer, "newer memtop")
    trunc = tmp_path / "trunc.memtop"
    trunc.write_bytes(REC[0].read_bytes()[:100_000])
    with pytest.raises(UserError, match="damaged|truncated|not a"):
        rec = Recording(trunc)
        list(rec.frames())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(0, 700_000),
    flips=st.lists(st.tuples(st.integers(0, 700_000), st.integers(0, 255)), max_size=8),
)
def test_fuzzed_files_never_raise_anything_but_the_one_line_error(tmp_path, cut, flips):
    data = bytearray(REC[0].read_bytes()[:cut])
    for pos, val in flips:
        if pos < len(data):
            data[pos] = val
    p = tmp_path / "fuzz.memtop"
    p.write_bytes(bytes(data))
    try:
        rec = Recording(p)
        for _ in rec.frames():
            pass
        rec.markers()
    except UserError as e:
        assert "\n" not in str(e)


def test_markers_file(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"t0": 1.0, "t1": 2.0, "label": "sync", "name": "sync_even", "facts": {"steps": 3}}\n')
    (m,) = read_markers(p)
    assert (m.t0, m.label, m.name) == (1.0, "sync", "sync_even") and '"steps": 3' in m.facts


def test_finished_recording_is_one_plain_file(frames_s0, tmp_path):
    _copy(frames_s0[:50], tmp_path / "a.memtop")
    db = sqlite3.connect(tmp_path / "a.memtop")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # no -wal/-shm needed to read it


def _as_nobody(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "/usr/bin/setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            code,
            *args,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
    reason="needs root and setpriv to read as another user (root ignores file modes)",
)
def test_recording_in_a_directory_the_reader_cannot_write():
    """A recording still in WAL mode (as an older memtop left them) in a directory the reader
    cannot write, e.g. the demo installed by root: readable without its lock files."""
    if _as_nobody("import memtop.storage.store, numpy").returncode != 0:
        pytest.skip("this Python or checkout is not reachable by another user")
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp())
    try:
        rec = d / "s0.memtop"
        shutil.copy(REC[0], rec)
        db = sqlite3.connect(rec)
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
        os.chmod(rec, 0o444)
        os.chmod(d, 0o555)
        code = (
            "import sys; from memtop.storage.store import Recording; r = Recording(sys.argv[1]); "
            "print(sum(1 for _ in r.frames()))"
        )
        r = _as_nobody(code, str(rec))
        assert r.returncode == 0, r.stderr[-500:]
        assert int(r.stdout) == Recording(REC[0]).n_frames
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(d)


def test_deflated_json_is_bounded_per_row_and_per_recording():
    """Schema 3's deflated caps and stacks: a row inflates to at most JSON_ROW_MAX, and a recording's
    rows together to at most its budget (rows repeating one text deflate a thousandfold)."""
    import zlib

    from memtop.storage.decode import JSON_ROW_MAX, Damaged, json_text

    row = zlib.compress(b'["' + b"a" * 1000 + b'"]')
    assert json_text(row, "caps") == '["' + "a" * 1000 + '"]'
    with pytest.raises(Damaged, match="too large"):
        json_text(zlib.compress(b" " * (JSON_ROW_MAX + 1)), "caps")
    rec = Recording(REC[0])
    assert rec.inflate_left >= 16 * rec.size
    rec.inflate_left = 2500
    json_text(row, "caps", rec)
    json_text(row, "caps", rec)
    assert rec.inflate_left == 2500 - 2 * 1004
    with pytest.raises(Damaged, match="too large"):
        json_text(row, "caps", rec)  # (the budget's last 492 bytes do not hold it)


def test_stacks_against_a_base_and_names_by_id(tmp_path):
    """Schema 4: most of a real torch run's stacks are deflated against an earlier one (at most
    STACK_CHAIN steps from one stored alone), thread names are ids; both read back as written."""
    from memtop.storage.store import STACK_CHAIN

    src = list(itertools.islice(Recording(DATA / "heldout_torch_s3.memtop").frames(), 900))
    back = list(_copy(src, tmp_path / "b.memtop").frames())
    assert [{(s.pid, s.t): s.threads for s in f.stacks} for f in src] == [
        {(s.pid, s.t): s.threads for s in f.stacks} for f in back
    ]
    db = sqlite3.connect(tmp_path / "b.memtop")
    n, based, alone = db.execute(
        "SELECT count(*), count(base), sum(CASE WHEN base IS NULL THEN length(frames) END) FROM stack"
    ).fetchone()
    assert n > 50 and based > n / 2, (n, based)
    assert db.execute("SELECT count(*) FROM stack WHERE base >= id").fetchone()[0] == 0
    hops = dict(db.execute("SELECT id, 0 FROM stack WHERE base IS NULL").fetchall())
    for sid, base in db.execute("SELECT id, base FROM stack WHERE base IS NOT NULL ORDER BY id"):
        hops[sid] = hops[base] + 1
    assert max(hops.values()) <= STACK_CHAIN
    names = {r[0] for r in db.execute("SELECT text FROM thread_name")}
    assert "MainThread" in names
    assert db.execute("SELECT count(*) FROM stack_sample WHERE typeof(name) = 'text'").fetchone()[0] == 0


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE stack SET base = id WHERE base IS NOT NULL",  # itself
        "UPDATE stack SET base = id + 1 WHERE base IS NOT NULL",  # a later one (a cycle)
        "UPDATE stack SET base = 'x' WHERE base IS NOT NULL",
        "UPDATE stack SET base = NULL WHERE base IS NOT NULL",  # deflated against one, read alone
        "UPDATE stack SET base = (SELECT min(id) FROM stack) WHERE id > (SELECT min(id) FROM stack)",
        "UPDATE stack SET base = id - 1 WHERE id > 1",  # a chain longer than STACK_CHAIN
        "UPDATE stack_sample SET name = 99999",  # no such name
        "UPDATE stack_sample SET name = X'00ff'",
        "DROP TABLE thread_name",
    ],
)
def test_damaged_bases_and_names_are_damaged_stacks(tmp_path, damage):
    """A base that is not an earlier stack within reach, or a name id that names nothing: the stacks or
    samples concerned are missing and noted, the rest of the recording reads."""
    src = list(itertools.islice(Recording(DATA / "heldout_torch_s3.memtop").frames(), 900))
    path = tmp_path / "d.memtop"
    _copy(src, path).close()
    db = sqlite3.connect(path)
    db.execute(damage)
    db.commit()
    db.close()
    rec = Recording(path)
    back = list(rec.frames())
    assert len(back) == len(src)
    assert any("damaged" in d for d in rec.damage), rec.damage


def test_a_series_blob_inflates_only_so_far():
    """A series chunk of 510 KB inflated to gigabytes (a TUI replay went from 126 MB to 1.7 GB):
    past SERIES_RAW_MAX it is damaged, before anything is built of it."""
    import zlib

    from memtop.storage.decode import SERIES_RAW_MAX, SERIES_V2, Damaged, series_data

    z = zlib.compressobj(9)
    bomb = SERIES_V2 + b"".join(z.compress(bytes(1 << 20)) for _ in range(64)) + z.flush()
    assert len(bomb) < 100_000
    with pytest.raises(Damaged, match="too large"):
        series_data("power_w", bomb)
    with pytest.raises(Damaged, match="too large"):
        series_data("power_w", bytes(SERIES_RAW_MAX + 8))  # a float32 chunk (schema 1)
    ok = SERIES_V2 + zlib.compress(bytes(SERIES_RAW_MAX))
    assert len(series_data("power_w", ok)[0]) == SERIES_RAW_MAX // 8


def test_a_host_blob_inflates_only_so_far():
    import zlib

    from memtop.storage.decode import HOST_JSON_MAX, Damaged, inflate_host

    raw = b'{"pad":"' + b"a" * HOST_JSON_MAX + b'"}'
    with pytest.raises(Damaged, match="too large"):
        inflate_host(zlib.compress(raw, 9), None)
    assert inflate_host(zlib.compress(raw[: HOST_JSON_MAX - 2] + b'"}'), None).endswith(b'"}')


def test_a_spent_decode_budget_refuses_rather_than_lifting_the_cap():
    """zlib reads a max_length of 0 as no limit: once a recording's budget is spent, the next blob
    (a bomb after ordinary rows) must be refused, not inflated whole."""
    import zlib

    from memtop.storage.decode import Damaged, inflate

    bomb = zlib.compress(bytes(10 << 20), 9)
    for spent in (0, -5):
        with pytest.raises(Damaged, match="budget"):
            inflate(bomb, spent, "stack")
    assert len(inflate(zlib.compress(b"abc"), 3, "stack")) == 3


def test_metadata_rows_are_read_only_so_far(tmp_path):
    """A file with millions of metadata rows (or one huge value, where Python has no setlimit) loads
    at most META_KEYS_MAX rows of at most VALUE_MAX each."""
    from memtop.storage.store import META_KEYS_MAX

    path = tmp_path / "m.memtop"
    src = list(itertools.islice(Recording(DATA / "heldout_torch_s3.memtop").frames(), 50))
    _copy(src, path).close()
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO meta VALUES (?, ?)", ((f"k{i}", "1") for i in range(3 * META_KEYS_MAX)))
    db.commit()
    db.close()
    rec = Recording(path)
    assert len(rec.meta) <= META_KEYS_MAX + 20
    assert len(list(rec.frames())) == len(src)


def test_a_query_that_would_not_end_is_stopped_and_the_next_one_runs():
    from memtop.storage.store import _step_limit

    db = sqlite3.connect(":memory:")
    _step_limit(db, 1_000_000)
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        db.execute("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT max(n) FROM c")
    # the count starts again with each statement: many small ones never add up to the limit
    for _ in range(300):
        assert db.execute(
            "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 1000) SELECT max(n) FROM c"
        ).fetchone() == (1000,)


def test_a_damaged_page_among_the_markers_is_one_clear_error(tmp_path):
    """Markers are read past the first row (store.py's _q checked only the first step)."""
    import shutil

    p = tmp_path / "m.memtop"
    shutil.copyfile(REC[0], p)
    db = sqlite3.connect(p)
    size = os.path.getsize(p)
    db.executemany(
        "INSERT INTO marker VALUES (?, ?, ?, ?, ?)",
        [(1.0, 2.0, "idle", f"m{i}", "x" * 400) for i in range(3000)],
    )
    db.commit()
    db.close()
    with open(p, "r+b") as f:  # a page of the markers appended (the file's end), made junk
        f.seek(size + (os.path.getsize(p) - size) // 2 // 2048 * 2048)
        f.write(b"\xa5" * 2048)
    rec = Recording(p)
    with pytest.raises(UserError, match="damaged") as e:
        rec.markers()
    assert "\n" not in str(e.value)


def _slow_pack(monkeypatch, seconds: float) -> None:
    real = Writer._pack

    def pack(self):
        time.sleep(seconds)
        real(self)

    monkeypatch.setattr(Writer, "_pack", pack)


def test_close_returns_once_the_recording_is_written_however_long(frames_s0, tmp_path, monkeypatch):
    """Under load the writer thread took past close()'s 10 s join and close() returned before the
    recording was packed (0.05 MB per GPU-hour read right after close(), 10.59 a minute later)."""
    _slow_pack(monkeypatch, 10.5)
    p = tmp_path / "slow.memtop"
    w = Writer(p, {"host": "test"})
    for f in frames_s0[:1500]:  # a queue full of Frames at close
        w.add(f)
    w.close()
    assert w.error is None and not w._thread.is_alive()
    assert not Path(f"{p}-wal").exists()  # checkpointed and back to one plain file
    assert Recording(p).n_frames == len({f.t for f in frames_s0[:1500]})


def test_close_says_when_the_recording_could_not_be_finished(frames_s0, tmp_path, monkeypatch):
    def full(self):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Writer, "_pack", full)
    w = Writer(tmp_path / "full.memtop", {})
    for f in frames_s0[:50]:
        w.add(f)
    w.close()  # (the thread used to wait for a second close() that never came)
    assert not w._thread.is_alive()
    assert "disk is full" in (w.error or "")


@pytest.mark.parametrize("suffix", ["-shm", "-wal", "-journal"])
def test_a_side_file_someone_else_made_is_refused_never_written_through(tmp_path, suffix):
    target = tmp_path / "target"
    p = tmp_path / "run.memtop"
    os.symlink(target, f"{p}{suffix}")
    with pytest.raises(UserError, match=f"run.memtop{suffix} exists") as e:
        Writer(p, {})
    assert "\n" not in str(e.value) and not p.exists() and not target.exists()
    w = Writer(p, {}, force=True)  # --force removes the link itself, never its target
    w.close()
    assert w.error is None and not target.exists() and not os.path.lexists(f"{p}{suffix}")


def test_a_replay_over_a_frame_far_before_the_rest_plays_on(tmp_path):
    """A frame at t = -9.9e11: the wait to the next one overflowed threading's timeout (exit 70)."""
    import shutil
    import threading

    from memtop.live.pipeline import Pipeline, ReplaySource, Status

    p = tmp_path / "early.memtop"
    shutil.copyfile(REC[0], p)
    db = sqlite3.connect(p)
    db.execute("INSERT INTO frame VALUES (-9.9e11)")
    db.commit()
    db.close()
    rec = Recording(p)
    errors: list[BaseException] = []
    old = threading.excepthook
    threading.excepthook = lambda a: errors.append(a.exc_value)
    try:
        src = ReplaySource(rec, Pipeline(Status("replay", duration=rec.duration)), speed=64.0)
        src.start()
        time.sleep(1.5)
        alive = src._thread.is_alive()
        src.stop()
    finally:
        threading.excepthook = old
    assert not errors and alive
