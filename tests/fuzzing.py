"""Damaged recordings, made from the real ones in tests/data, run through every reader memtop has.

A case is one mutation of a short copy of a real recording (byte-level: flipped bytes, a truncated
file, a zeroed page; SQL-level: a wrong-typed, non-finite, absurd or hostile value in one cell, a
dropped table, a bad blob) and one command on it: `replay --summary`, `report` (text, markdown,
JSON), `export --perfetto`, or a headless TUI replay. The CLI's `main` runs in-process with its
output captured (hundreds of cases a minute); `run_subprocess` checks exit codes end to end.

Outcomes: "ok" (exit 0 with output that reads, or exit 2 with one line), "traceback" (an exception
escaped, or memtop's crash handler ran: exit 70), "hang" (over the time limit), "wrong-exit"
(exit 0 with output that does not read, exit 2 with more than one line, any other code), and for
the TUI "stopped" (the replay thread ended on the store's clean UserError: damage found mid-file,
which the app must then show; the pipeline's concern, counted apart).
Used by tests/test_fuzz.py (a fixed-seed subset) and bench/fuzz.py (>= 10,000 cases).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

from conftest import cut, write_again
from hostile import HOSTILE

DATA = Path(__file__).parent / "data"
BASES = ("labelled_s0.memtop", "labelled_s2_nogpm.memtop", "labelled_s4.memtop")
WINDOW_S = 12.0  # each base keeps this much of its recording: small files, the same structure
COMMANDS = ("summary", "text", "markdown", "json", "export")
HANG_S = 10

# values a damaged or hostile cell may hold
VALUES: tuple[object, ...] = (
    None,
    "text",
    "",
    -1,
    0,
    2**63 - 1,
    -(2**63),
    1e300,
    -1e300,
    float("inf"),
    float("-inf"),
    1e-300,
    b"\x00\xff\x01",
    "[]",
    "{}",
    '{"a":',
    "null",
    '"1"',
    "NaN",
    "Infinity",
    "[" * 5000 + "]" * 5000,
    '[["a","b",1,"c"]]',
    "[[1,2,3,4]]",
    '[["x"]]',
    "[1e999]",
    '{"gen": "x"}',
    *HOSTILE,
)
JSON_VALUES: tuple[object, ...] = (
    "x",
    1,
    -1,
    1e300,
    "1e999",
    None,
    [],
    {},
    [{}],
    [{"index": "0"}],
    [{"index": 0, "name": 5}],
    [1, 2],
    {"index": 0},
    "\x1b]0;PWNED\x1b\\",
    True,
    [[["deep"]]],
)


_NO_ROWID = ("frame", "host", "gpu", "stack_sample")  # rows named by t (WITHOUT ROWID in schema 2 or 3)


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no handler in memtop swallows it."""


@dataclass
class Outcome:
    kind: str  # ok / traceback / hang / wrong-exit
    signature: str = ""  # for tracebacks: exception type and innermost memtop frame
    detail: str = ""


def make_bases(cache: Path) -> list[Path]:
    """Short copies of the real recordings (the first WINDOW_S seconds), and the first of them written
    again by this version's Writer, made once."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for name in BASES:
        dst = cache / name
        if not dst.exists():
            cut(DATA / name, dst, WINDOW_S)
        out.append(dst)
    dst = cache / "written_s0.memtop"  # the first cut as this version's Writer writes it
    if not dst.exists():
        tmp = write_again(out[0], cache / "written_s0.memtop.tmp")
        tmp.rename(dst)
    out.append(dst)
    return out


def _columns(db: sqlite3.Connection) -> list[tuple[str, str]]:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return [(t, c[1]) for t in tables for c in db.execute(f"PRAGMA table_info({t})")]


# the tables a reader queries by name (store._READ_TABLES)
_TABLES = (
    "meta", "frame", "gpu", "gpu_state", "series", "host", "stack", "stack_sample", "perf", "caps", "note",
    "marker", "thread_name", "block",
)  # fmt: skip
_LOOP = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c)"


@functools.cache
def bomb(what: str, size: int) -> bytes:
    """A deflated blob of a few KB that inflates to ``size`` bytes of ``what``: zeros, JSON nested
    that deep, a JSON list of that many bytes of empty objects, or a host sample's JSON padded."""
    head, unit, tail = {
        "zeros": (b"", b"\0", b""),
        "deep": (b"", b"[", b""),
        "objects": (b"[", b"{},", b"{}]"),
        "host": (b'{"t":0.0,"pad":"', b"a", b'"}'),
    }[what]
    chunk = unit * ((1 << 20) // len(unit))
    n = max(1, size // len(chunk))
    # after a full flush deflate starts afresh, so every chunk deflates to the same bytes: one is
    # deflated and repeated (a 1 GiB bomb costs its checksum, not seconds of compression); the zlib
    # wrapper (header, Adler-32 of the whole) is written here around the raw stream
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = z.compress(head) + z.flush(zlib.Z_FULL_FLUSH)
    piece = z.compress(chunk) + z.flush(zlib.Z_FULL_FLUSH)
    end = z.compress(tail) + z.flush()
    check = _adler32_repeated(zlib.adler32(head), zlib.adler32(chunk), len(chunk), n)
    check = zlib.adler32(tail, check)
    return b"\x78\xda" + start + piece * n + end + check.to_bytes(4, "big")


_ADLER = 65521


def _adler32_combine(a: int, b: int, len_b: int) -> int:
    """The Adler-32 of X + Y from X's (``a``) and Y's (``b``, of ``len_b`` bytes), as zlib's
    adler32_combine: A = 1 + sum of bytes, B = sum of the A after each byte, both mod 65521."""
    a1, a2 = a & 0xFFFF, b & 0xFFFF
    s1 = (a1 + a2 - 1) % _ADLER
    s2 = ((a >> 16) + (b >> 16) + len_b * (a1 - 1)) % _ADLER
    return s1 | (s2 << 16)


def _adler32_repeated(check: int, chunk: int, size: int, n: int) -> int:
    """``check`` carried over ``n`` copies of a chunk whose own Adler-32 is ``chunk`` (by doubling: a
    1 GiB bomb's checksum without reading 1 GiB)."""
    while n:
        if n & 1:
            check = _adler32_combine(check, chunk, size)
        chunk, size, n = _adler32_combine(chunk, chunk, size), size * 2, n >> 1
    return check


def _json_bomb(rng: random.Random) -> str:
    """A JSON text whose cost is in its objects, not its bytes (or a value strict JSON refuses)."""
    return rng.choice(
        (
            "[" * rng.choice((100, 900, 5000)) + "]" * 900,
            "[" + ",".join(["{}"] * rng.choice((1000, 100_000, 1_000_000))) + "]",
            "[" + ",".join(['["x",1.0]'] * rng.choice((1000, 200_000))) + "]",
            '{"a": NaN, "b": Infinity, "c": -Infinity}',
            "[1e999, -1e999, NaN]",
        )
    )


def _sql_edit(db: sqlite3.Connection, rng: random.Random) -> str:
    """An edit at the SQL level: a schema object named like memtop's tables, columns of the wrong type
    or computed on read, non-finite numbers, duplicated and out-of-order rows, huge values, and
    object-count bombs (deflated or not) where memtop reads JSON or inflates blobs."""
    have = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'") if r[0] in _TABLES]
    t = rng.choice(have or ["frame"])
    cols = [c[1] for c in db.execute(f"PRAGMA table_info({t})")] or ["t"]
    col = rng.choice(cols)
    key = "t" if t in _NO_ROWID else "rowid"
    some = f"{key} IN (SELECT {key} FROM {t} ORDER BY random() LIMIT {rng.choice((1, 3, 100, 100_000))})"
    kind = rng.choice(
        ("view", "trigger", "computed", "types", "nonfinite", "rows", "huge", "bomb", "bomb", "jsonbomb")
    )
    if kind == "view":
        body = rng.choice((f"SELECT * FROM {t}_rows", f"{_LOOP} SELECT {t}_rows.* FROM {t}_rows, c"))
        db.executescript(f"ALTER TABLE {t} RENAME TO {t}_rows; CREATE VIEW {t} AS {body};")
    elif kind == "trigger":  # (fires on writes: a reader never writes)
        other = rng.choice(have or ["note"])
        db.executescript(
            f"CREATE TRIGGER {rng.choice((t, t + '_t'))} AFTER INSERT ON {other} BEGIN DELETE FROM {t}; END;"
        )
    elif kind == "computed":
        expr = rng.choice(("zeroblob(4000000)", "printf('%.*c', 4000000, 'x')", "random()", "'x'"))
        how = rng.choice((f"AS ({expr})", "DEFAULT 'x'"))
        db.execute(f"ALTER TABLE {t} ADD COLUMN {rng.choice(('g', 'data_x'))} {how}")
    elif kind == "types":
        v = rng.choice(("text", b"\x00\xff", 1e308, -1, 2**62, 0.5, "[]", ""))
        db.execute(f"UPDATE {t} SET {col} = ? WHERE {some}", (v,))
    elif kind == "nonfinite":
        v = rng.choice(("1e999", "-1e999", "0.0/0.0", "'NaN'", "'Infinity'"))
        db.execute(f"UPDATE {t} SET {col} = {v} WHERE {some}")
    elif kind == "rows":  # the table rebuilt as a heap: rows duplicated and out of time order
        times = rng.choice(("1", "2", "3"))
        union = " UNION ALL ".join([f"SELECT * FROM {t}_rows"] * int(times))
        shift = rng.choice(("", f" ; UPDATE {t} SET t = t - 7.5 WHERE rowid % 3 = 0" if "t" in cols else ""))
        db.executescript(
            f"ALTER TABLE {t} RENAME TO {t}_rows; CREATE TABLE {t} AS SELECT * FROM ({union}) ORDER BY random();"
            f" DROP TABLE {t}_rows{shift};"
        )
        kind = f"rows x{times}{' shifted' if shift else ''}"
    elif kind == "huge":
        n = rng.choice((100_000, 2_000_000, 17_000_000))
        fn = rng.choice(("zeroblob", "text"))
        v = f"zeroblob({n})" if fn == "zeroblob" else f"printf('%.*c', {n}, 'x')"
        # one row (a hundred made a 1.7 GB file: its copy, not its reading, was the cost)
        db.execute(f"UPDATE {t} SET {col} = {v} WHERE {key} IN (SELECT {key} FROM {t} LIMIT 1)")
        kind = f"huge {n}"
    elif kind == "bomb":
        size = rng.choice((4 << 20, 64 << 20, 1 << 30))
        target = rng.choice(("host", "series", "caps", "stack", "block"))
        if target == "host":
            blob = bomb(rng.choice(("host", "objects", "deep", "zeros")), size)
            db.execute(
                "UPDATE host SET data = ? WHERE t IN (SELECT t FROM host ORDER BY random() LIMIT ?)",
                (blob, rng.choice((1, 3, 1000))),
            )
        elif target == "series":
            db.execute(
                "UPDATE series SET data = ? WHERE t IN (SELECT t FROM series ORDER BY random() LIMIT ?)",
                (b"\x01" + bomb("zeros", size), rng.choice((1, 1000))),
            )
        elif target == "caps":
            db.execute("UPDATE caps SET data = ?", (bomb(rng.choice(("objects", "deep")), size),))
        elif target == "stack":
            db.execute(
                "UPDATE stack SET frames = ? WHERE id IN (SELECT id FROM stack ORDER BY random() LIMIT 5)",
                (bomb(rng.choice(("objects", "deep", "zeros")), size),),
            )
        else:  # a block that claims the frame rows (its count matches), inflating past any bound
            (n,) = db.execute("SELECT count(*) FROM frame").fetchone()
            db.execute(
                "CREATE TABLE IF NOT EXISTS block(stream TEXT NOT NULL, seq INTEGER NOT NULL, t0 REAL NOT NULL,"
                " t1 REAL NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream, seq)) WITHOUT ROWID"
            )
            db.execute("DELETE FROM block WHERE stream = 'frame'")
            db.execute("INSERT INTO block VALUES ('frame', 0, -1e12, 1e12, ?, ?)", (n, bomb("zeros", size)))
        kind = f"bomb {target} {size >> 20} MiB"
    else:
        target, column = rng.choice(
            (("meta", "value"), ("gpu_state", "link"), ("gpu_state", "processes"), ("perf", "data"),
             ("marker", "facts"), ("note", "text"), ("caps", "data"), ("stack", "frames"))
        )  # fmt: skip
        where = "key = 'cadence'" if target == "meta" else "rowid IN (SELECT rowid FROM "
        if target != "meta":
            where += f"{target} ORDER BY random() LIMIT {rng.choice((1, 5, 1000))})"
        db.execute(f"UPDATE {target} SET {column} = ? WHERE {where}", (_json_bomb(rng),))
        kind = f"jsonbomb {target}.{column}"
    return f"edit:{kind}:{t}" if not kind.startswith(("bomb", "jsonbomb")) else f"edit:{kind}"


def mutate(path: Path, rng: random.Random) -> str:
    """Damage `path` in place; returns what was done (for the figures)."""
    kind = rng.choice(
        ("sql", "sql", "sql", "sql", "meta", "blob", "stackjson", "bytes", "truncate", "page", "drop", "edit",
         "edit", "edit", "edit")
    )  # fmt: skip
    if kind == "bytes":
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 32)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        return kind
    if kind == "truncate":
        with open(path, "r+b") as f:
            f.truncate(rng.randrange(os.path.getsize(path)))
        return kind
    if kind == "page":
        data = bytearray(path.read_bytes())
        page = rng.randrange(max(1, len(data) // 4096)) * 4096  # (a file truncated before: one page)
        data[page : page + 4096] = bytes(4096)
        path.write_bytes(bytes(data))
        return kind
    db = sqlite3.connect(path)
    db.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        if kind == "edit":
            kind = _sql_edit(db, rng)
        elif kind == "drop":
            t = rng.choice(
                ("meta", "frame", "gpu", "host", "stack", "stack_sample", "marker", "caps", "perf")
            )
            db.execute(f"DROP TABLE {t}")
            kind = f"drop:{t}"
        elif kind == "meta":
            key = rng.choice(
                ("magic", "schema", "host", "started_wall", "gpus", "command", "driver", "cadence")
            )
            v = rng.choice(JSON_VALUES)
            raw = json.dumps(v) if rng.random() < 0.8 else str(v)
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, _bindable(raw)))
            kind = f"meta:{key}"
        elif kind == "blob":
            choice = rng.randrange(4)
            if choice == 0:
                blob = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
            else:
                (old,) = db.execute("SELECT data FROM host ORDER BY random() LIMIT 1").fetchone() or (None,)
                d = json.loads(zlib.decompress(old)) if old else {}
                field = rng.choice(sorted(d) or ["x"])
                d[field] = rng.choice(JSON_VALUES)
                procs = d.get("procs")
                if (
                    choice == 2
                    and isinstance(procs, list)
                    and procs
                    and isinstance(procs[0], dict)
                    and procs[0]
                ):
                    procs[0][rng.choice(sorted(procs[0]))] = rng.choice(JSON_VALUES)
                    field = "procs"
                blob = zlib.compress(json.dumps(d).encode())
                kind = f"blob:{field}"
            db.execute(
                "UPDATE host SET data = ? WHERE t IN (SELECT t FROM host ORDER BY random() LIMIT ?)",
                (blob, rng.randint(1, 3)),
            )
        elif kind == "stackjson":
            db.execute(
                "UPDATE stack SET frames = ? WHERE rowid IN (SELECT rowid FROM stack ORDER BY random() LIMIT 1)",
                (_bindable(rng.choice(VALUES)),),
            )
        else:
            table, col = rng.choice(_columns(db))
            v = _bindable(rng.choice(VALUES))
            n = rng.choice((1, 1, 1, 5, 1000))
            key = "t" if table in _NO_ROWID else "rowid"
            db.execute(
                f"UPDATE {table} SET {col} = ? WHERE {key} IN (SELECT {key} FROM {table} ORDER BY random() LIMIT ?)",
                (v, n),
            )
            kind = f"sql:{table}.{col}"
        db.commit()
    except Exception:  # noqa: BLE001 (a constraint refused it, or earlier damage left no schema or blob)
        pass  # the file is still a valid case
    finally:
        db.close()
    return kind


def _bindable(v: object) -> object:
    """SQLite cannot take a lone surrogate: bind the bytes it stands for (invalid UTF-8)."""
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) and "\udcff" in v else v


def _signature(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in tb if "memtop" in f.filename or "/tui/" in f.filename or "/collectors/" in f.filename]
    where = ours[-1] if ours else (tb[-1] if tb else None)
    at = f"{Path(where.filename).name}:{where.lineno} {where.name}" if where else "?"
    return f"{type(exc).__name__} at {at}"


def _alarm(_sig, _frame):
    raise Hang()


@functools.cache
def _parser():
    """memtop's argument parser, built once (each case parses with it: building one costs more than
    some of the reads a case makes)."""
    from memtop.cli import build_parser

    return build_parser()


def run_case(path: Path, command: str, out_dir: Path, hang_s: int = HANG_S) -> Outcome:
    """One command on one file, in-process; the crash handler and the alarm are watched."""
    import memtop.crash
    from memtop import cli
    from memtop.cli import main
    from memtop.core.sanitize import is_clean

    crashed: list[BaseException] = []
    real = memtop.crash.report_crash

    def spy(exc: BaseException) -> int:
        crashed.append(exc)
        return memtop.crash.EXIT_CRASH

    out_json = out_dir / "trace.json"
    argv = {
        "summary": ["replay", "--summary", str(path)],
        "export": ["export", str(path), "--perfetto", str(out_json), "--force"],
    }.get(command, ["report", str(path), "--format", command])
    out, err = io.StringIO(), io.StringIO()
    parser, real_parser = _parser(), cli.build_parser
    memtop.crash.report_crash = spy
    cli.build_parser = lambda: parser
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(hang_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except Hang:
        return Outcome("hang", f"{command}")
    except SystemExit as e:
        rc = e.code
    except BaseException as e:  # noqa: BLE001 (what the fuzz is for)
        return Outcome("traceback", _signature(e))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        memtop.crash.report_crash = real
        cli.build_parser = real_parser
    if crashed:
        return Outcome("traceback", _signature(crashed[0]))
    o, e = out.getvalue(), err.getvalue()
    if rc == 2:
        ok = e.count("\n") == 1 and o == "" and is_clean(e.rstrip("\n"))
        return Outcome("ok" if ok else "wrong-exit", "", f"exit 2: {e[:200]!r}")
    if rc != 0:
        return Outcome("wrong-exit", "", f"exit {rc}: {e[:200]!r}")
    try:  # exit 0: what it wrote must read
        if command in ("summary", "json"):
            json.loads(o, parse_constant=_reject)
        elif command == "export":
            json.loads(out_json.read_text(), parse_constant=_reject)
        elif not o or not all(is_clean(line) for line in o.splitlines()):
            raise ValueError("empty or unclean report")
    except (ValueError, OSError) as x:
        return Outcome("wrong-exit", "", f"exit 0 with unreadable output: {x}")
    return Outcome("ok")


def _reject(c: str) -> None:
    raise ValueError(f"non-strict JSON token {c}")


def run_tui(path: Path, seconds: float = 3.0, hang_s: int = HANG_S) -> Outcome:
    """A headless TUI replay of `path` at 16x to its end (or for ``seconds``, where damaged times hold
    it up): no exception in any thread."""
    import asyncio

    from memtop.tui.app import MemtopApp

    from memtop.core.errors import UserError
    from memtop.live.pipeline import Pipeline, ReplaySource, Status
    from memtop.storage.store import Recording

    try:
        rec = Recording(path)
    except UserError:
        return Outcome("ok")  # the CLI says so in one line (run_case checks that)
    except BaseException as e:  # noqa: BLE001
        return Outcome("traceback", _signature(e))
    errors: list[BaseException] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda a: errors.append(a.exc_value)
    try:
        pipe = Pipeline(Status("replay", duration=rec.duration, speed=16), meta=rec.meta)
        src = ReplaySource(rec, pipe, speed=16.0)
        app = MemtopApp(pipe, src, hangup_guard=False, paint_rate=4)

        async def drive() -> None:
            async with app.run_test(size=(160, 45)) as pilot:
                for _ in range(max(1, round(seconds / 0.1))):  # until the replay stands at its end
                    await pilot.pause(0.1)
                    if src.paused or errors:
                        break
                await pilot.press("enter")  # the GPU detail screen shows recorded strings too
                await pilot.pause(0.3)
                await pilot.press("escape", "q")

        asyncio.run(asyncio.wait_for(drive(), hang_s + seconds))
    except TimeoutError:
        return Outcome("hang", "tui")
    except BaseException as e:  # noqa: BLE001
        errors.append(e)
    finally:
        threading.excepthook = old_hook
    stopped = [e for e in errors if isinstance(e, UserError)]
    if len(stopped) < len(errors):
        return Outcome("traceback", "tui: " + _signature(next(e for e in errors if e not in stopped)))
    if stopped:  # a clean error (damage found mid-file) that the replay thread raised: the TUI must show it
        return Outcome("stopped", "tui: " + str(stopped[0])[:80])
    if app.return_code not in (0, None):
        return Outcome("wrong-exit", "", f"tui return code {app.return_code}")
    return Outcome("ok")


def run_subprocess(path: Path, command: str, out_dir: Path, hang_s: int = HANG_S) -> Outcome:
    """The same as run_case, as a real process: exit codes as the shell sees them."""
    out_json = out_dir / "trace.json"
    argv = {
        "summary": ["replay", "--summary", str(path)],
        "export": ["export", str(path), "--perfetto", str(out_json), "--force"],
    }.get(command, ["report", str(path), "--format", command])
    env = {**os.environ, "XDG_STATE_HOME": str(out_dir)}
    try:
        r = subprocess.run(
            [sys.executable, "-m", "memtop", *argv], capture_output=True, text=True, timeout=hang_s, env=env
        )
    except subprocess.TimeoutExpired:
        return Outcome("hang", command)
    if "Traceback" in r.stderr or r.returncode == 70:
        return Outcome("traceback", r.stderr.strip().splitlines()[-1][:120] if r.stderr.strip() else "?")
    if r.returncode == 2:
        return Outcome(
            "ok" if r.stderr.count("\n") == 1 and r.stdout == "" else "wrong-exit", "", r.stderr[:200]
        )
    if r.returncode != 0:
        return Outcome("wrong-exit", "", f"exit {r.returncode}")
    return Outcome("ok")


def run_forked(path: Path, command: str, out_dir: Path, hang_s: int = 30) -> tuple[Outcome, float, int]:
    """``run_case`` (or, for "tui", ``run_tui``) in a child of this process: (its outcome, seconds,
    its peak RSS in KiB, as wait4 reports it: with the pages it shares with this process). A child
    still running hang_s + 5 s after it started is killed (a hang that even the alarm missed)."""
    import select
    import time

    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: one run, its outcome as JSON on the pipe
        os.close(r)
        try:
            o = run_tui(path, 2.0, hang_s) if command == "tui" else run_case(path, command, out_dir, hang_s)
        except BaseException as e:  # noqa: BLE001 (what the fuzz is for)
            o = Outcome("traceback", _signature(e))
        os.write(w, json.dumps(o.__dict__).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        ready, _, _ = select.select([r], [], [], max(0.0, t0 + hang_s + 5 - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - t0
    if data:
        o = Outcome(**json.loads(data))
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        o = Outcome("hang", command)
    else:
        o = Outcome("traceback", f"child ended with status {status}")
    return o, seconds, usage.ru_maxrss


def cases(seed: int, n: int, bases: list[Path], work: Path):
    """Yields (case number, mutation, damaged file) for n cases; each file is reused by the caller."""
    rng = random.Random(seed)
    for i in range(n):
        base = bases[i % len(bases)]
        path = work / f"case{i % 4}.memtop"
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        shutil.copyfile(base, path)
        what = mutate(path, rng)
        if rng.random() < 0.15:
            what += " + " + mutate(path, rng)
        yield i, what, path, rng
