"""Recordings: a SQLite file (schema in docs/RECORDING.md) written by its own thread, read back as Frames.

A part is written only when its timestamp changes (Frames repeat parts until their source
samples again), numbers are stored as small integers (per-mille, KiB/s, MiB, deci-watts),
and stacks are deduplicated into a table of their own.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import math
import operator
import os
import queue
import sqlite3
import stat
import threading
import zlib
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from memtop import __version__
from memtop.core import stackclass
from memtop.core.arrays import distinct
from memtop.core.errors import UserError
from memtop.core.metrics import BY_NAME, METRICS, Metric
from memtop.core.model import (
    GPU_MODES,
    JOB_KEYS,
    Capability,
    Frame,
    GpuHealth,
    GpuProcess,
    GpuSample,
    HostSample,
    Marker,
    PcieLink,
    PerfSample,
    ProcJob,
    ProcUtil,
    SeriesChunk,
    StackFrame,
    StackSample,
    ThreadStack,
)
from memtop.core.sanitize import clean
from memtop.core.timefmt import clock
from memtop.storage import colblock
from memtop.storage.decode import (
    BLOCK_STREAMS,
    BLOCK_TABLES,
    DECODE_ERRORS,
    FIELD_MAX,
    GPU_COLS,
    HOST_KEY_EVERY,
    HOST_PROC_ADDED,
    META_MAX,
    NAME_MAX,
    SANE_T,
    SERIES_V2,
    Damaged,
    bounded_json,
    finite_float,
    finite_number,
    finite_tree,
    host_from_blob,
    integer,
    json_text,
    sequence,
    series_data,
    short_string,
    string,
)

if TYPE_CHECKING:
    import numpy as np

    from memtop.storage import reader

# 2: gpu and series keyed by time without rowid, host blobs chained, series as integers;
# 3: stack_sample keyed by (t, pid, i) without rowid (no index on t), its class not stored; stack
#    without its text's unique index; host a rowid table (fuller pages); caps and stack text deflated
# 4: a stack deflated against a like one (its base), thread names in a table of their own, the file
#    packed when the recording closes (VACUUM: full pages)
SCHEMA_VERSION = 4
PAGE_SIZE = 2048  # small tables cost a page each: 2 KiB pages save ~1.5 MB per GPU-hour of a short run
PACK_MAX = 128 << 20  # a closing recording up to this size is packed (Writer._pack)
_T = operator.itemgetter(0)
_ORDER = operator.itemgetter(0, 1, 2)  # (t, order, stream) of a row while reading Frames
BUSY_CHUNK_S = 3600.0  # gpu_reads reads the GPU rows this many seconds at a time
READ_WINDOW_S = 5.0  # Frames are read this many seconds of rows at a time (the export keeps its memory flat)
MAGIC = "memtop-recording"
COMMIT_S = 1.0  # the Writer commits about this often

# GpuSample's fields in order: t, index, uuid, name, mode, then metrics and the slow fields of gpu_state;
# any other field (none today) takes its default
_GPU_FIELDS = tuple(f.name for f in fields(GpuSample))
_LINK, _PROCS, _MIG, _HEALTH = (_GPU_FIELDS.index(n) for n in ("link", "processes", "mig", "health"))
_GPU_OTHER = tuple(
    (i, f.default)
    for i, f in enumerate(fields(GpuSample))
    if i >= 5 and f.name not in BY_NAME and i not in (_LINK, _PROCS, _MIG, _HEALTH)
)
# the health table (added to schema 4 without a bump: a recording made before it has none, and reads as
# one whose GPUs gave no health counters): one row per read whose counters or Xids changed
HEALTH_JSON_MAX = 4096
_HEALTH_INTS = tuple(f.name for f in fields(GpuHealth) if f.name not in ("t", "xids"))
XIDS_MAX = 64


SCHEMA = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE frame(t REAL PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE gpu(t REAL NOT NULL, gpu INTEGER NOT NULL, mode TEXT NOT NULL, {", ".join(c for c, _ in GPU_COLS)},
                 PRIMARY KEY (t, gpu)) WITHOUT ROWID;
CREATE TABLE gpu_state(t REAL NOT NULL, gpu INTEGER NOT NULL, uuid TEXT, name TEXT, mig INTEGER, link TEXT, processes TEXT);
CREATE TABLE series(t REAL NOT NULL, gpu INTEGER NOT NULL, metric TEXT NOT NULL, data BLOB NOT NULL,
                    PRIMARY KEY (t, gpu, metric)) WITHOUT ROWID;
CREATE TABLE host(t REAL PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE stack(id INTEGER PRIMARY KEY, frames BLOB NOT NULL, base INTEGER);
CREATE TABLE thread_name(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE stack_sample(t REAL NOT NULL, pid INTEGER NOT NULL, tid INTEGER, name, active INTEGER,
                          gil INTEGER, klass TEXT, stack INTEGER REFERENCES stack(id), error TEXT,
                          i INTEGER NOT NULL, PRIMARY KEY (t, pid, i)) WITHOUT ROWID;
CREATE TABLE perf(t REAL NOT NULL, pid INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX perf_t ON perf(t);
CREATE TABLE caps(t REAL NOT NULL, data BLOB NOT NULL);
CREATE TABLE note(t REAL NOT NULL, text TEXT NOT NULL);
CREATE TABLE marker(t0 REAL NOT NULL, t1 REAL NOT NULL, label TEXT NOT NULL, name TEXT, facts TEXT);
CREATE TABLE health(t REAL NOT NULL, gpu INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE proc_util(t REAL NOT NULL, gpu INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE proc_job(t REAL NOT NULL, pid INTEGER NOT NULL, data TEXT NOT NULL);
{colblock.SCHEMA}
"""


# the streams as the Writer writes them from 2026-11-28: BLOCK_STREAMS, the host's with the mean of
# its sample's CPU %s last (what `memtop export` draws as the host's CPU; a block is read by column
# name, so readers of BLOCK_STREAMS read these blocks as before, and the export decodes the host JSON
# of a block without it)
WRITTEN_STREAMS: dict[str, colblock.Columns] = {
    **BLOCK_STREAMS,
    "host": (*BLOCK_STREAMS["host"], ("cpu_mean", "f")),
}


_TABLES = frozenset(
    (
        "meta",
        "frame",
        "gpu",
        "gpu_state",
        "series",
        "host",
        "stack",
        "stack_sample",
        "perf",
        "caps",
        "note",
        "marker",
    )
)
# every schema object a reader queries by name, where a recording has it (the block tables, and those
# of older schemas): each must be a plain table, or a query of it could run anything (a view's CTE)
# (proc_util: per-process GPU utilisation; proc_job: a process's identity from its cgroup; both added
# 2026-11-28 without a schema bump: older files lack them)
_READ_TABLES = _TABLES | {"thread_name", "block", "host_load", "host_proc", "health", "proc_util", "proc_job"}

# what a reader loads of the file (what one part may hold, decoded: memtop.storage.decode)
META_KEYS_MAX = 4096  # metadata rows read (memtop writes about 12)
VALUE_MAX = 16 << 20  # any one SQLite value a reader loads (SQLITE_LIMIT_LENGTH): a block is ~200 KB
# bounded in SQL too: Python 3.10 has no setlimit, and a file may hold millions of metadata rows
_META_QUERY = f"SELECT key, value FROM meta WHERE length(value) <= {VALUE_MAX} LIMIT {META_KEYS_MAX}"
# a reader's query stops after this many SQLite VM steps plus STEPS_PER_BYTE per byte of the file (a
# pass over every row takes a few steps a byte): a backstop for a query that would not end
STEPS_BASE = 100_000_000
STEPS_PER_BYTE = 200


# -- encoding ---------------------------------------------------------------------------
def _enc(m: Metric, v: float | None) -> int | None:
    v = m.valid(v)  # what is written can be read back: never inf (round() would raise), never junk
    if v is None:
        return None
    return int(v * m.scale) if m.as_int else round(v * m.scale)


def gpu_row(g: GpuSample) -> tuple:
    return (g.t, g.index, g.mode, *(_enc(m, getattr(g, m.name)) for m in METRICS))


def health_json(h: GpuHealth) -> str:
    d: dict[str, object] = {n: v for n in _HEALTH_INTS if (v := getattr(h, n)) is not None}
    if h.xids:
        d["xids"] = list(h.xids)
    return json.dumps(d, separators=(",", ":"))


def health_of(t: float, text: object) -> GpuHealth:
    """A stored health row; a damaged one raises (Damaged, ValueError, TypeError)."""
    d = bounded_json(string(text, "health"), HEALTH_JSON_MAX, "health")
    if not isinstance(d, dict):
        raise Damaged("health is not an object")
    vals = {n: _bounded_int(d.get(n), 2**63 - 1) for n in _HEALTH_INTS}
    xids = tuple(integer(x, "Xid") for x in sequence(d.get("xids", []), "Xids")[:XIDS_MAX])
    return GpuHealth(finite_float(t, "health time"), **vals, xids=xids)


def gpu_state_key(g: GpuSample) -> tuple:
    return (g.uuid, g.name, g.mig, g.link, g.processes)


def _host_blob(h: HostSample, prev: bytes | None) -> tuple[bytes, bytes]:
    """(blob, its JSON). With ``prev`` (the JSON of the sample before), deflated against it: the
    process list and command lines repeat, so a blob is ~70 bytes instead of ~430."""
    d = asdict(h)
    d["cpu_pct"] = [round(c, 1) for c in h.cpu_pct]
    raw = json.dumps(d, separators=(",", ":")).encode()
    z = zlib.compressobj(6, zdict=prev) if prev else zlib.compressobj(6)
    return z.compress(raw) + z.flush(), raw


# a host_proc row as the blocks hold it (BLOCK_STREAMS: the figures, then the job's columns), from a ProcSample
_FIGURES = operator.attrgetter(*(c for c, _ in BLOCK_STREAMS["host_proc"][1:]))
_TEXTS = [j for j, (_, k) in enumerate(BLOCK_STREAMS["host_proc"]) if k == "s"]  # a host_figures row's texts


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def host_figures(t: float, raw: bytes, cpu: bool = False) -> tuple[tuple, list[tuple]]:
    """A host sample's rows of the ``host`` and ``host_proc`` block streams: iowait and its count of
    processes; each process's figures (model.PROC_FIGURES) and what its job is known by (its parent
    and command line: decode.HOST_PROC_JOB). The values are its JSON's
    as a reader decodes it (``host_from_blob``), so the two copies cannot disagree; a sample a reader
    would refuse, or one with a name that has no TEXT form (bad UTF-8 kept as surrogates), has none
    (procs -1: a report decodes its JSON). ``cpu``: the host row as WRITTEN_STREAMS holds it, the mean
    of the sample's CPU %s last (NaN where it has none)."""
    try:
        h = host_from_blob(raw)
    except DECODE_ERRORS:
        return (t, 0.0, -1, math.nan)[: 3 + cpu], []
    rows = [(t, *_FIGURES(p)) for p in h.procs]
    if not all(_utf8(r[j]) for r in rows for j in _TEXTS):
        return (t, 0.0, -1, math.nan)[: 3 + cpu], []
    mean = sum(h.cpu_pct) / max(1, len(h.cpu_pct))  # (as the export's Frame walk takes it)
    return (t, h.iowait_pct, len(rows), mean)[: 3 + cpu], rows


def _series_blob(c: SeriesChunk) -> bytes:
    """Times as millisecond steps and values as integer steps at the metric's store scale, deflated
    (power at 50 Hz: a sample every 20 ms; a millisecond is what the plots can show)."""
    import numpy as np  # lazily: numpy costs ~0.2 s of start-up

    scale = BY_NAME[c.metric].scale if c.metric in BY_NAME else 1000.0
    t = np.round((np.asarray(c.t, dtype=np.float64) - c.t[0]) * 1e3).astype(np.int64)
    v = np.round(np.asarray(c.v, dtype=np.float64) * scale).astype(np.int64)
    steps = np.concatenate([np.diff(t, prepend=0), np.diff(v, prepend=0)]).astype(np.int32)
    return SERIES_V2 + zlib.compress(steps.tobytes(), 6)


def deflated_json(value: object) -> bytes:
    """A JSON column as schema 3 stores it (caps, stack frames): deflated text."""
    return zlib.compress(json_bytes(value), 6)


def json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# a new stack is deflated against the most alike of the last STACK_BASES stored (the one sharing the
# most outer frames: a thread's stacks differ at the top), itself at most STACK_CHAIN bases from one
# stored alone (what a reader inflates to read one); real torch runs: 150 KB of stacks become ~60 KB
STACK_BASES = 64
STACK_CHAIN = 8


class _Stack(NamedTuple):
    sid: int
    key: tuple
    text: bytes  # its JSON
    hops: int  # bases to one stored alone


def _outer_shared(a: tuple, b: tuple) -> int:
    """How many outermost frames (the ends of py-spy's innermost-first lists) two stacks share."""
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


def stack_blob(key: tuple, text: bytes, recent: deque[_Stack]) -> tuple[bytes, _Stack | None]:
    """A new stack's frames column and its base (None: stored alone): its JSON ``text`` deflated
    against the stack in ``recent`` most like it, where that takes under 70% of it alone (a stack
    little like any recent one starts a chain: the next ones have a base at hand)."""
    alone = zlib.compress(text, 6)
    base = max(
        (b for b in reversed(recent) if b.hops < STACK_CHAIN),
        key=lambda b: _outer_shared(key, b.key),
        default=None,
    )
    if base is not None:
        z = zlib.compressobj(6, zdict=base.text)
        data = z.compress(text) + z.flush()
        if len(data) < 0.7 * len(alone):
            return data, base
    return alone, None


def _caps_blob(caps: tuple[Capability, ...]) -> bytes:
    """Schema 3 deflates caps: a row repeats every watched process's entry (~1 KB of JSON)."""
    return deflated_json([[c.source, c.name, c.state.value, c.detail, c.fix] for c in caps])


_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's files beside a database


def check_creatable(path: Path, force: bool) -> None:
    """create_private's refusals, touching nothing: for a caller that must know before it starts
    something (`memtop run --record` before the job)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UserError(f"cannot create {path}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a directory; name a file to write")
    if not os.path.isdir(path.parent):
        raise UserError(f"cannot create {path}: directory {path.parent} does not exist")
    if force:
        return
    if st is not None:
        raise UserError(f"{path} exists (use --force to overwrite)")
    for suffix in _SIDE_FILES:  # SQLite opens these beside it: one made by someone else (a link) is refused
        if os.path.lexists(f"{path}{suffix}"):
            raise UserError(f"{path}{suffix} exists (left by another writer?): remove it, or use --force")


def create_private(path: Path, force: bool) -> None:
    """Create the file 0600 (recordings hold stacks and command lines), never through a symlink:
    an existing path is refused without `force`; with it, a file or link is unlinked (a link's
    target is never written), a directory refused."""
    path = Path(path)
    check_creatable(path, force)
    if force:
        for suffix in ("", *_SIDE_FILES):
            try:
                os.unlink(str(path) + suffix)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise UserError(f"cannot replace {path}{suffix}: {e.strerror}") from None
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise UserError(f"{path} exists (use --force to overwrite)") from None
    except OSError as e:
        raise UserError(f"cannot create {path}: {e.strerror}") from None
    os.close(fd)


# -- writing ----------------------------------------------------------------------------
class Writer:
    """Appends Frames from any thread; its own thread writes and commits about once a second."""

    def __init__(self, path: str | Path, meta: dict, force: bool = False):
        self.path = Path(path)
        create_private(self.path, force)
        self.error: str | None = None
        self.frames = 0
        self._q: queue.Queue = queue.Queue(maxsize=10000)
        self._last: dict[tuple, object] = {}
        self._stack_ids: dict[tuple, int] = {}
        self._bases: deque[_Stack] = deque(maxlen=STACK_BASES)
        self._names: dict[str, int] = {}
        self._host_prev: bytes | None = None
        self._host_n = 0
        self._gpu_t: dict[int, float] = {}  # each GPU's newest row time (its blocks need them in order)
        self._closed = False  # the writer thread wrote the recording to its end
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            self._blocks = colblock.BlockWriter(self._db, WRITTEN_STREAMS)
            # (a recording's meta written again, e.g. by a rewrite, keeps its facts, not its format's)
            meta = {**meta, "magic": MAGIC, "schema": SCHEMA_VERSION, "memtop_version": __version__}
            self._db.executemany(
                "INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()]
            )
            self._db.commit()
        except sqlite3.Error as e:
            with contextlib.suppress(sqlite3.Error, AttributeError):
                self._db.close()
            for suffix in ("", "-wal", "-shm"):  # a failed writer leaves nothing that looks like a recording
                with contextlib.suppress(OSError):
                    os.unlink(str(self.path) + suffix)
            raise UserError(f"cannot write {self.path}: {e}") from None
        self._thread = threading.Thread(target=self._loop, name="memtop-writer", daemon=True)
        self._thread.start()

    def add(self, frame: Frame) -> None:
        if self.error is None:
            try:
                self._q.put_nowait(frame)
            except queue.Full:
                self.error = "recording fell behind (disk too slow); recording stopped"

    def add_markers(self, markers: list[Marker]) -> None:
        self._q.put(("markers", markers))

    def set_meta(self, key: str, value: object) -> None:
        self._q.put(("meta", key, value))

    def close(self) -> None:
        """Returns once the recording is written (its last rows, blocks, checkpoint and packing: a
        command that says "recorded" means it is on disk), however long that takes; where it could
        not be written, ``error`` says why."""
        while self._thread.is_alive():
            try:  # (a writer thread that stopped leaves a full queue nobody empties)
                self._q.put(None, timeout=0.5)
                break
            except queue.Full:
                continue
        self._thread.join()
        if not self._closed and self.error is None:
            self.error = "recording incomplete: its writer stopped"

    def _loop(self) -> None:
        import time

        last_commit = time.monotonic()
        while True:
            try:
                item = self._q.get(timeout=COMMIT_S)
            except queue.Empty:
                item = ...
            try:
                if item is None:
                    self._db.commit()  # (the rows first: the blocks are a copy)
                    self._blocks.close()
                    self._db.commit()
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    # a finished recording is one plain file: readable where its reader cannot
                    # write (WAL needs a -shm file beside it: a shared or installed recording)
                    self._db.execute("PRAGMA journal_mode=DELETE")
                    self._pack()
                    self._db.close()
                    self._closed = True
                    return
                if isinstance(item, Frame):
                    self._write(item)
                    self.frames += 1
                elif isinstance(item, tuple) and item[0] == "markers":
                    self._db.executemany(
                        "INSERT INTO marker VALUES (?,?,?,?,?)",
                        [(m.t0, m.t1, m.label, m.name, m.facts) for m in item[1]],
                    )
                elif isinstance(item, tuple) and item[0] == "meta":
                    self._db.execute(
                        "INSERT OR REPLACE INTO meta VALUES (?, ?)", (item[1], json.dumps(item[2]))
                    )
                if time.monotonic() - last_commit >= COMMIT_S:
                    self._db.commit()
                    last_commit = time.monotonic()
            except sqlite3.Error as e:
                self.error = f"recording stopped: {e}"  # e.g. disk full; the run goes on
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                while item is not None:  # drain until close() (unless it was close() that failed)
                    item = self._q.get()
                return

    def _pack(self) -> None:
        """Full pages (rows appended in key order leave them ~88% full): ~5% smaller, in ~2 s per 85 MB
        on a 2-core VM. A larger file stays as it is: close() would wait too long for it."""
        size = self._db.execute("PRAGMA page_count").fetchone()[0] * PAGE_SIZE
        if size <= PACK_MAX:
            self._db.execute("VACUUM")

    def _changed(self, key: tuple, value: object) -> bool:
        if self._last.get(key) == value:
            return False
        self._last[key] = value
        return True

    def _stack_id(self, frames: tuple[StackFrame, ...]) -> int:
        key = tuple((f.name, f.file, f.line, f.code) for f in frames)
        sid = self._stack_ids.get(key)
        if sid is None:
            text = json_bytes(key)
            data, base = stack_blob(key, text, self._bases)
            sid = self._db.execute(
                "INSERT INTO stack(frames, base) VALUES (?, ?)", (data, base and base.sid)
            ).lastrowid
            assert sid is not None  # an INSERT sets it
            self._stack_ids[key] = sid
            self._bases.append(_Stack(sid, key, text, base.hops + 1 if base else 0))
        return sid

    def _name_id(self, name: str | None) -> int | None:
        if name is None:
            return None
        nid = self._names.get(name)
        if nid is None:
            nid = self._db.execute("INSERT INTO thread_name(text) VALUES (?)", (name,)).lastrowid
            assert nid is not None
            self._names[name] = nid
        return nid

    def _host_figures(self, t: float, raw: bytes) -> None:
        """What the classifier reads of a host sample as column blocks too (``host_figures``), so a
        report reads them without decoding the JSON (memtop.analysis.colscan). No rows: the JSON is the
        sample of record, and where no block reaches, a report decodes it."""
        load, procs = host_figures(t, raw, cpu=True)
        self._blocks.add("host", load)
        for r in procs:
            self._blocks.add("host_proc", r)

    def _write(self, f: Frame) -> None:
        db = self._db
        blocks = self._blocks
        blocks.turn(f.t)
        if db.execute("INSERT OR IGNORE INTO frame VALUES (?)", (f.t,)).rowcount:
            blocks.add("frame", (f.t,))
        rows = [gpu_row(g) for g in f.gpus if self._changed(("gpu", g.index), g.t)]
        if rows:
            db.executemany(f"INSERT OR REPLACE INTO gpu VALUES ({','.join('?' * (3 + len(GPU_COLS)))})", rows)
            for r in rows:
                t, index, mode = r[:3]
                if mode not in GPU_MODES or not t > self._gpu_t.get(index, -math.inf):
                    blocks.drop("gpu")  # (a row replacing another: the blocks would hold both)
                self._gpu_t[index] = t
                blocks.add("gpu", (t, index, GPU_MODES.index(mode) if mode in GPU_MODES else -1, *r[3:]))
        for g in f.gpus:
            if self._changed(("gpu_state", g.index), gpu_state_key(g)):
                db.execute(
                    "INSERT INTO gpu_state VALUES (?,?,?,?,?,?,?)",
                    (
                        g.t,
                        g.index,
                        g.uuid,
                        g.name,
                        int(g.mig),
                        json.dumps(asdict(g.link)) if g.link else None,
                        json.dumps([[p.pid, p.used_memory] for p in g.processes]),
                    ),
                )
        for g in f.gpus:
            h = g.health
            # stored when a counter or the Xids changed; a Xid repeating in the next read is a new one
            if h is not None and self._changed(
                ("health", g.index), (replace(h, t=0.0), h.t if h.xids else 0.0)
            ):
                db.execute("INSERT INTO health VALUES (?,?,?)", (h.t, g.index, health_json(h)))
        for g in f.gpus:  # a row when the figures change (none while a GPU has never had any)
            if (g.proc_util or ("proc_util", g.index) in self._last) and self._changed(
                ("proc_util", g.index), g.proc_util
            ):
                db.execute(
                    "INSERT INTO proc_util VALUES (?,?,?)", (g.t, g.index, proc_util_json(g.proc_util))
                )
        for j in f.jobs:  # once per process (an identity does not change)
            if self._changed(("proc_job", j.pid), j.job):
                db.execute("INSERT INTO proc_job VALUES (?,?,?)", (f.t, j.pid, json.dumps(dict(j.job))))
        for c in f.series:
            if c.t:
                db.execute(
                    "INSERT OR REPLACE INTO series VALUES (?,?,?,?)",
                    (c.t[0], c.gpu, c.metric, _series_blob(c)),
                )
        if f.host is not None and self._changed(("host",), f.host.t):
            prev = self._host_prev if self._host_n % HOST_KEY_EVERY else None
            blob, self._host_prev = _host_blob(f.host, prev)
            if db.execute("INSERT OR IGNORE INTO host VALUES (?, ?)", (f.host.t, blob)).rowcount:
                self._host_n += 1
                self._host_figures(f.host.t, self._host_prev)
            else:  # not stored (same t): the next one must not be chained to it
                self._host_n = 0
        for s in f.stacks:
            if not self._changed(("stack", s.pid), s.t):
                continue
            if db.execute("SELECT 1 FROM stack_sample WHERE t=? AND pid=?", (s.t, s.pid)).fetchone():
                continue  # a dump at a time already written for this process (the key's): once
            if s.error is not None and not s.threads:
                rows = [(s.t, s.pid, None, None, None, None, None, s.error)]
            else:
                rows = [
                    (
                        s.t,
                        s.pid,
                        th.tid,
                        th.name,
                        int(th.active),
                        int(th.owns_gil),
                        self._stack_id(th.frames),
                        None,
                    )
                    for th in s.threads
                ]
            # the class is derived on read (Recording._klass), never stored
            db.executemany(
                "INSERT INTO stack_sample VALUES (?,?,?,?,?,?,NULL,?,?,?)",
                [(*r[:3], self._name_id(r[3]), *r[4:], i) for i, r in enumerate(rows)],
            )
            for r in rows:
                blocks.add("stack", r)
        for p in f.perf:
            if self._changed(("perf", p.pid), p.t):
                db.execute("INSERT INTO perf VALUES (?,?,?)", (p.t, p.pid, json.dumps(p.rates)))
                if all(len(r) == 2 for r in p.rates):
                    blocks.add("perf", (p.t, p.pid, len(p.rates)))
                    for name, rate in p.rates:
                        blocks.add("perf_rate", (p.t, name, rate))
                else:  # (not pairs: the rows keep them, as the readers' checks will say)
                    blocks.drop("perf")
                    blocks.drop("perf_rate")
        if f.caps and self._changed(("caps",), f.caps):
            db.execute("INSERT INTO caps VALUES (?, ?)", (f.t, _caps_blob(f.caps)))
        for n in f.notes:
            if self._changed(("note", n), True):
                db.execute("INSERT INTO note VALUES (?, ?)", (f.t, n))


# -- reading ----------------------------------------------------------------------------
def _text(b: bytes) -> str:
    """TEXT values as str even with invalid UTF-8 (kept as surrogates; sanitize shows U+FFFD)."""
    return b.decode("utf-8", "surrogateescape")


def _open_ro(path: Path) -> tuple[sqlite3.Connection, dict]:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a recording")
    if not path.is_file():  # a FIFO or a device: opening it would wait for a writer, or read forever
        raise UserError(f"{path} is not a regular file, so not a recording")
    try:
        with open(path, "rb"):  # sqlite says "unable to open" for this too; the user needs the reason
            pass
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as e:
        raise UserError(f"cannot open {path}: {e.strerror}") from None
    try:
        try:
            db, rows = _connect(path, f"file:{path}?mode=ro")
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e) and "unable to open" not in str(e):
                raise
            # in WAL mode (an older memtop, still recording, or killed) where this user cannot
            # create the lock files: read the file as it is, if nothing is left in its WAL
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise UserError(
                    f"{path} was not closed cleanly and its last part is in {wal.name}, which this "
                    f"user cannot open here: copy both files to a directory you can write"
                ) from None
            db, rows = _connect(path, f"file:{path}?mode=ro&immutable=1")
    except UnicodeDecodeError:  # a damaged byte inside a text value
        raise UserError(f"{path} is damaged (unreadable metadata)") from None
    except sqlite3.DatabaseError as e:
        msg = str(e)
        if "unable to open" in msg and not os.access(path, os.R_OK):
            raise UserError(f"{path}: permission denied") from None
        if "not a database" in msg or "file is encrypted" in msg:
            raise UserError(f"{path} is not a memtop recording (not an SQLite file)") from None
        if "no such table" in msg:
            raise UserError(f"{path} is an SQLite file but not a memtop recording") from None
        raise UserError(f"{path} is damaged or truncated ({msg})") from None
    meta = {}
    for k, v in rows.items():
        if not isinstance(k, str):
            continue  # a damaged key names nothing memtop reads
        try:
            meta[k] = bounded_json(v, META_MAX, "metadata")
        except (TypeError, ValueError):
            if k in ("magic", "schema"):
                raise UserError(f"{path} is damaged (unreadable metadata)") from None
            meta[k] = _UNREADABLE  # one unreadable value is missing metadata (_valid_meta notes it)
    if meta.get("magic") != MAGIC:
        raise UserError(f"{path} is an SQLite file but not a memtop recording")
    schema = meta.get("schema")
    if type(schema) is not int or schema < 1:
        raise UserError(f"{path} is damaged (not a valid schema: {str(schema)[:40]})")
    if schema > SCHEMA_VERSION:
        raise UserError(f"{path} was written by a newer memtop (schema {schema}); upgrade memtop to read it")
    return db, meta


def _connect(path: Path, uri: str) -> tuple[sqlite3.Connection, dict]:
    """A read-only connection to a recording, guarded (``_guard``), and its metadata rows."""
    db = sqlite3.connect(uri, uri=True, check_same_thread=False)
    db.text_factory = _text
    try:
        _guard(db, path)
        return db, dict(db.execute(_META_QUERY).fetchall())
    except BaseException:
        db.close()
        raise


def _guard(db: sqlite3.Connection, path: Path) -> None:
    """Before the first query of a recording's rows: each schema object memtop reads by name is a
    plain table whose columns are stored values (a view named ``frame`` could run a recursive CTE
    forever; a generated column or a default computes a value on every read); no value loads past
    VALUE_MAX; and a query stops after a bounded number of steps (``_step_limit``). A reader opens
    the file read-only and only reads: triggers fire on writes, never here."""
    setlimit = getattr(db, "setlimit", None)  # (Python 3.11 on)
    if setlimit is not None:
        setlimit(0, VALUE_MAX)  # SQLITE_LIMIT_LENGTH
    for name, kind, sql in db.execute("SELECT name, type, sql FROM sqlite_master").fetchall():
        if not isinstance(name, str) or name.lower() not in _READ_TABLES:
            continue
        if kind != "table" or not isinstance(sql, str) or not sql.startswith("CREATE TABLE"):
            what = "virtual table" if kind == "table" else clean(str(kind), 20)
            raise UserError(f"{path} is damaged ({clean(name, 40)} is a {what}, not a table)")
        for col in db.execute(f'PRAGMA table_xinfo("{name}")'):  # (a name of _READ_TABLES: no quote)
            if col[4] is not None or col[6]:
                raise UserError(f"{path} is damaged (table {name} has a computed column)")
    size = sum(os.stat(f).st_size for f in (path, Path(f"{path}-wal")) if f.exists())
    _step_limit(db, STEPS_BASE + STEPS_PER_BYTE * size)


def _step_limit(db: sqlite3.Connection, steps: int) -> None:
    """Stops (SQLite's "interrupted": the reader says the file is damaged) a statement that runs
    more than ``steps`` VM steps from its start: counted by a progress handler every 10,000 steps,
    restarted by the trace callback SQLite calls as each statement begins."""
    every = 10_000
    left = [steps // every]

    def began(_sql: str) -> None:
        left[0] = steps // every

    def step() -> bool:
        left[0] -= 1
        return left[0] < 0

    db.set_trace_callback(began)
    db.set_progress_handler(step, every)


_UNREADABLE = object()


def _valid_meta(meta: dict) -> tuple[dict, list[str]]:
    """Metadata with wrong-typed values dropped (they are missing, and noted), never trusted."""
    bad = [k for k, v in meta.items() if v is _UNREADABLE]
    meta = {k: None if v is _UNREADABLE else finite_tree(v) for k, v in meta.items()}
    for k in ("host", "driver", "nvml_version", "memtop_version"):
        if k in meta and meta[k] is not None and not isinstance(meta[k], str):
            meta[k] = None
            bad.append(k)
    for k in ("started_wall", "ended_wall", "wall_offset"):
        v = meta.get(k)
        # wall clocks are seconds since 1970: up to year 9999 (time.localtime fails past it)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 2.5e11):
            meta[k] = None
            bad.append(k)
    cmd = meta.get("command")
    if cmd is not None and not (isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)):
        meta["command"] = None
        bad.append("command")
    gpus = meta.get("gpus")
    if gpus is not None:
        ok = [
            g
            for g in (gpus if isinstance(gpus, list) else [])
            if isinstance(g, dict)
            and type(g.get("index")) is int
            and all(
                g.get(k) is None or isinstance(g.get(k), str) for k in ("name", "uuid", "mode", "pci_bus_id")
            )
        ]
        if not isinstance(gpus, list) or len(ok) != len(gpus):
            bad.append("gpus")
        meta["gpus"] = ok
    notes = [f"damaged metadata ignored: {', '.join(sorted(set(bad)))}"] if bad else []
    return meta, notes


class RowsRead(NamedTuple):
    """What ``GpuReads`` takes of a span of GPU rows (``Recording.rows_read``): per GPU its busy GPM
    samples' count and each name's values of them (missing left out), in order; its energy series; the
    time of its first lost sample."""

    busy: dict[int, tuple[int, list[np.ndarray]]]
    energy: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    lost: dict[int, float]


class GpuReads(NamedTuple):
    """What the report reads of the GPU rows besides its scan (``Recording.gpu_reads``)."""

    # per GPU, the mean of each named metric over its GPM samples while the graphics engine was busy
    # (>= 5 %), with their count as "samples" (the roofline's point over a run); None for a metric
    # the recording has no column for
    busy: dict[int, dict[str, float | None]]
    # per GPU with an energy counter: its samples' times, the counter (J, as last read) and power (W),
    # NaN where missing (memtop.analysis.energy.split reads them)
    energy: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    lost: dict[int, float]  # per GPU lost in the range, its first lost sample's time


class Recording:
    """A recording opened read-only. Iterate Frames, seek, read markers and metadata."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db, meta = _open_ro(self.path)
        self.meta, notes = _valid_meta(meta)
        self.damage: list[str] = notes  # one line per damaged part, shown with every Frame
        self._block_index: dict[str, colblock.Blocks] = {}
        page = self._rows("PRAGMA page_size")[0][0]
        self.size = self._rows("PRAGMA page_count")[0][0] * page  # bytes, with its WAL's
        # what deflated JSON (caps, stacks) may inflate to in all: an honest recording's is below
        # its own size; a file of rows that repeat one text must not take memory beyond this
        self.inflate_left = (16 << 20) + 16 * self.size
        self._stacks: dict[object, tuple[StackFrame, ...]] = {}  # by the id as stored
        self._texts: OrderedDict[object, str] = OrderedDict()  # the JSON of the latest (bases)
        self._names: dict[int, str] = {}
        self._klass_of: dict[tuple[int, int, int], str] = {}
        # a frame time that is not a finite number is no frame (text sorts after numbers in SQLite,
        # and t is the key: NOT NULL, so these are searches of the key, not a pass over the rows)
        sane = "FROM frame WHERE t > -1e12 AND t < 1e12"
        n_all = self._rows("SELECT count(*) FROM frame")[0][0]
        insane = self._rows("SELECT count(*) FROM frame WHERE t <= -1e12 OR t >= 1e12")[0][0]
        r = (*(self._rows(f"SELECT {f}(t) {sane}")[0][0] for f in ("min", "max")), n_all - insane)
        have = {r[0] for r in self._rows("SELECT name FROM sqlite_master WHERE type='table'")}
        self._has_names = "thread_name" in have
        self._has_health = "health" in have
        self._has_proc_util = "proc_util" in have and "proc_job" in have
        missing = sorted(_TABLES - have)
        if missing:  # found now, not seconds into a replay
            raise UserError(f"{self.path} is damaged (missing table {', '.join(missing)})")
        if n_all != r[2]:
            self.damage.append(f"damaged recording: {n_all - r[2]} frame(s) with an invalid time skipped")
        if r[2] and not all(isinstance(x, (int, float)) for x in r[:2]):
            # a damaged index of the key can answer a text or a blob for min(t)/max(t)
            raise UserError(f"{self.path} is damaged or truncated (frame times are not numbers)")
        self.t0, self.t1, self.n_frames = r[0], r[1], r[2]
        if not self.n_frames:
            raise UserError(
                f"{self.path} holds no samples (the recording was stopped before its first second)"
            )

    def close(self) -> None:
        self.db.close()

    def blocks(self, stream: str) -> colblock.Blocks:
        """The column blocks of ``stream`` (BLOCK_STREAMS' columns; ``Blocks.subset`` reads fewer),
        their index read and checked once: counting an 8-hour run's GPU rows takes a tenth of a second."""
        got = self._block_index.get(stream)
        if got is None:
            optional = HOST_PROC_ADDED if stream == "host_proc" else frozenset()
            got = colblock.Blocks(self.db, stream, BLOCK_STREAMS[stream], BLOCK_TABLES[stream], optional)
            self._block_index[stream] = got
        return got

    @property
    def duration(self) -> float:
        return (self.t1 or 0) - (self.t0 or 0)

    def span(self, t_from: float | None, t_to: float | None) -> tuple[float, float]:
        """The clock times of a --from/--to choice (offsets from the start), or one clear error."""
        lo = self.t0 + (t_from or 0.0)
        hi = self.t0 + t_to if t_to is not None else self.t1
        if hi <= lo or lo > self.t1:
            raise UserError(f"empty time range: the recording covers 0:00:00–{clock(self.duration)}")
        return lo, hi

    @contextlib.contextmanager
    def _one_line(self) -> Iterator[None]:
        """A damaged page or schema entry a query meets is one clear error."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            raise UserError(f"{self.path} is damaged or truncated ({e})") from None
        except UnicodeDecodeError:  # SQLite's message names a damaged (undecodable) schema entry
            raise UserError(f"{self.path} is damaged or truncated (damaged schema)") from None

    def _q(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._one_line():
            return self.db.execute(sql, args)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        """All the rows of a query: a damaged page met on the way is one clear error too."""
        with self._one_line():
            return self.db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        rows = self._rows(sql, args)
        return rows[0] if rows else None

    def markers(self) -> list[Marker]:
        """The valid markers (finite times, string names); a damaged one is skipped and noted."""
        out, bad = [], 0
        for r in self._rows("SELECT t0, t1, label, name, facts FROM marker"):
            try:
                t0, t1 = finite_number(r[0], "marker t0"), finite_number(r[1], "marker t1")
                label = short_string(r[2], NAME_MAX, "marker label")
                name = label if r[3] is None else short_string(r[3], NAME_MAX, "marker name")
                facts = "" if r[4] is None else short_string(r[4], FIELD_MAX, "marker facts")
            except Damaged:
                bad += 1
                continue
            out.append(Marker(t0, max(t0, t1), label, name, facts))
        note = f"damaged recording: {bad} marker(s) skipped"
        if bad and note not in self.damage:
            self.damage.append(note)
        return sorted(out, key=lambda m: m.t0)

    def _frames_of(self, sid: object) -> tuple[StackFrame, ...]:
        """A stack's frames; a damaged stack is an empty one (the sample and its thread stay)."""
        fr = self._stacks.get(sid)
        if fr is None:
            try:
                fr = tuple(
                    StackFrame(
                        string(n, "function"), string(f, "file"), integer(ln, "line"), string(c, "code")
                    )
                    for n, f, ln, c in sequence(json.loads(self._stack_text(sid)), "stack")
                )
            except (ValueError, TypeError, RecursionError):
                fr = ()
                self.note("damaged stacks: some frames missing")
            self._stacks[sid] = fr
        return fr

    def _stack_text(self, sid: object, hops: int = 0) -> str:
        """A stack's JSON; from schema 4 inflated against its base's (``stack_blob``): a base is an
        earlier stack, at most STACK_CHAIN away from one stored alone, or the stack is damaged."""
        text = self._texts.get(sid)
        if text is not None:
            self._texts.move_to_end(sid)
            return text
        cols = "frames, base" if "base" in self._stack_columns else "frames, NULL"
        row = self._one(f"SELECT {cols} FROM stack WHERE id=?", (sid,))
        if row is None:
            raise Damaged("no such stack")
        zdict = b""
        if row[1] is not None:
            if not (type(row[1]) is int and type(sid) is int and row[1] < sid and hops < STACK_CHAIN):
                raise Damaged("stack base")
            zdict = self._stack_text(row[1], hops + 1).encode()
        text = json_text(row[0], "stack", self, zdict)
        self._texts[sid] = text
        if len(self._texts) > 4 * STACK_BASES:  # the bases a run reads next: its latest stacks
            self._texts.popitem(last=False)
        return text

    @functools.cached_property
    def _stack_columns(self) -> frozenset[str]:
        return frozenset(r[1] for r in self._rows("PRAGMA table_info(stack)"))

    def _thread_name(self, v: object) -> str:
        """A stack_sample row's thread name: its text (none: ""), or from schema 4 a thread_name id."""
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        nid = integer(v, "thread name")
        name = self._names.get(nid)
        if name is None:
            row = self._has_names and self._one("SELECT text FROM thread_name WHERE id=?", (nid,))
            name = self._names[nid] = string(row and row[0], "thread name")
        return name

    def note(self, text: str) -> None:
        """Note a damaged part (once): every Frame read after says so, and the report lists it."""
        if text not in self.damage:
            self.damage.append(text)

    def _klass(self, sid: int, active: int, gil: int) -> str:
        """The stack's class by today's rules (the stored one is what the recorder's rules said:
        kept for older readers, never read back), memoised per stack, run state and GIL."""
        k = self._klass_of.get((sid, active, gil))
        if k is None:
            k = self._klass_of[(sid, active, gil)] = stackclass.classify(
                self._frames_of(sid), bool(active), bool(gil)
            )
        return k

    def stack_sample(self, r: tuple | list) -> StackSample:
        """One py-spy dump from all its stack_sample rows, as STACK_SQL gives them (memtop.storage.parts
        reads them); raises one of DECODE_ERRORS when damaged."""
        t, pid = finite_number(r[0][0], "stack t"), integer(r[0][1], "stack pid")
        for row in r:
            # the stored class is never read (classes come from today's rules): not checked
            for v, check in ((row[2], integer), (row[8], string)):
                if v is not None:
                    check(v, "stack row")
        if r[0][8] is not None:
            return StackSample(t, pid, (), r[0][8])
        return StackSample(
            t,
            pid,
            tuple(
                ThreadStack(
                    tid,
                    self._thread_name(name),
                    bool(active),
                    bool(gil),
                    self._frames_of(sid),
                    self._klass(sid, active, gil),
                )
                for _, _, tid, name, active, gil, _, sid, _ in r
            ),
        )

    # rows -> parts
    @functools.cached_property
    def _gpu_columns(self) -> frozenset[str]:
        return frozenset(r[1] for r in self._rows("PRAGMA table_info(gpu)"))

    def _gpu(self, row: tuple, state: tuple | None, health: GpuHealth | None = None) -> GpuSample:
        """A GpuSample from a row of ``reader._as_rows``, its GPU's slow state and its newest health read."""
        uuid, name, mig, link, procs = state or ("", "GPU", False, None, ())
        args = [row[0], row[1], uuid, name, row[2], *row[3:]]
        args[_LINK], args[_PROCS], args[_MIG], args[_HEALTH] = link, procs, mig, health
        for i, default in _GPU_OTHER:
            args[i] = default
        return GpuSample(*args)

    @staticmethod
    def _gpu_state(r: tuple) -> tuple:
        """A gpu_state row, parsed once (not once per GPU row); damaged parts become missing."""
        _t, _g, uuid, name, mig, link, procs = r
        return (
            clean(uuid or "", 96),
            clean(name or "GPU", 96),
            bool(mig) if isinstance(mig, int) else False,
            _link(link),
            _processes(procs),
        )

    # The reading API for the reader by columns (memtop.analysis.colscan): the methods above, by public names.
    query = _q
    gpu_state = _gpu_state

    @property
    def gpu_columns(self) -> frozenset[str]:
        """The gpu table's columns (an older recording lacks the newer metrics')."""
        return self._gpu_columns

    def health_rows(self, hi: float) -> list[tuple[float, int, int, object]]:
        """The health and link rows to ``hi`` that ``health_samples`` reads (read apart by the report,
        while its scan's other chunks are scanned)."""
        rows: list[tuple[float, int, int, object]] = []
        if self._has_health:
            rows += [
                (t, g, 0, d) for t, g, d in self._rows("SELECT t, gpu, data FROM health WHERE t<=?", (hi,))
            ]
        rows += [
            (t, g, 1, lk) for t, g, lk in self._rows("SELECT t, gpu, link FROM gpu_state WHERE t<=?", (hi,))
        ]
        return rows

    def health_samples(
        self, lo: float, hi: float, lost: dict[int, float] | None = None, rows: list[tuple] | None = None
    ) -> dict[int, list[GpuSample]]:
        """Per GPU, in time order, what its health events come from (memtop.analysis.health.HealthTracker): a
        sample at each health row (with the link of then), at each change of its PCIe link and at the
        first time it was lost (``lost``: ``GpuReads.lost``, where read already). Other figures are
        left out: the events read none. ``rows``: ``health_rows(hi)``, where read already."""
        rows = self.health_rows(hi) if rows is None else list(rows)
        lost = self.gpu_reads(lo, hi, ()).lost if lost is None else lost
        rows += [(t, g, 2, None) for g, t in lost.items()]
        out: dict[int, list[GpuSample]] = {}
        health: dict[int, GpuHealth] = {}
        links: dict[int, PcieLink | None] = {}
        parsed: dict[object, PcieLink | None] = {}  # each link's text, once (a run repeats a few)
        for t, g, kind, v in sorted(r for r in rows if isinstance(r[0], float) and isinstance(r[1], int)):
            try:
                if kind == 0:
                    health[g] = health_of(t, v)
                elif kind == 1:
                    links[g] = parsed[v] if v in parsed else parsed.setdefault(v, _link(v))
            except DECODE_ERRORS:
                self.note("damaged health data skipped")
                continue
            if t >= lo:  # (earlier rows only set the state the range starts with)
                mode = "lost" if kind == 2 else "gpm"
                out.setdefault(g, []).append(
                    GpuSample(t, g, "", "", mode, link=links.get(g), health=health.get(g))
                )
        return out

    def reads_columns(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The GPU columns ``rows_read`` reads, of a report's ``names`` (those this recording has)."""
        busy = ("graphics", *names) if "graphics" in self._gpu_columns else ()
        energy = ("energy_j", "power_w") if "energy_j" in self._gpu_columns else ()
        return tuple(dict.fromkeys(busy + energy))

    def gpu_reads(self, lo: float, hi: float, names: tuple[str, ...]) -> GpuReads:
        """What the report reads of the GPU rows of [lo, hi] besides its scan, in one read of them (an
        hour at a time: the columns of hours of GPUs are tens of MB) (``GpuReads``)."""
        from memtop.storage import reader

        cols = self.reads_columns(names)

        def read(a: float, b: float) -> list:
            got = reader.columns(self, a, b, cols)
            return [self.rows_read(got, names)] if len(got.t) else []

        got = reader.chunks(self, "gpu", before(lo), hi, read, BUSY_CHUNK_S, BUSY_CHUNK_S)
        return self.join_reads((r for (r,) in got), names)

    def rows_read(self, got: reader.GpuCols, names: tuple[str, ...]) -> RowsRead:
        """What ``GpuReads`` takes of some GPU rows (``reads_columns(names)`` read), to be joined in
        time order with the rows' before and after it (``join_reads``)."""
        import numpy as np

        at = np.flatnonzero(got.mode == GPU_MODES.index("lost"))
        lost: dict[int, float] = {}
        for g, t in zip(got.gpu[at].tolist(), got.t[at].tolist(), strict=True):
            lost.setdefault(g, t)
        busy_rows = (
            (got.mode == GPU_MODES.index("gpm")) & (got.cols["graphics"] >= 5)
            if "graphics" in self._gpu_columns
            else None
        )
        energy, busy = {}, {}
        for g in distinct(got.gpu).tolist():  # (in order)
            mine = got.gpu == g
            if "energy_j" in self._gpu_columns:
                energy[g] = (got.t[mine], got.cols["energy_j"][mine], got.cols["power_w"][mine])
            if busy_rows is not None and (n := int(np.count_nonzero(at := busy_rows & mine))):
                values = [got.cols[name][at] for name in names]
                busy[g] = (n, [v[v == v] for v in values])  # (NaN: missing, as avg() leaves NULL out)
        return RowsRead(busy, energy, lost)

    def spans_read(
        self, spans: list[tuple[float, float, RowsRead]], lo: float, hi: float, names: tuple[str, ...]
    ) -> GpuReads:
        """``gpu_reads(lo, hi, names)`` from a scan's reads of its chunks' rows (after, upto] (``spans``,
        in order) where they join up to [lo, hi], else read again (a chunk whose warm-up held no
        Frame does not know where its rows start)."""
        ends = [before(lo)] + [upto for _, upto, _ in spans]
        if spans and ends[-1] == hi and all(s[0] == e for s, e in zip(spans, ends, strict=False)):
            return self.join_reads((r for _, _, r in spans), names)
        return self.gpu_reads(lo, hi, names)

    def join_reads(self, reads: Iterable[RowsRead], names: tuple[str, ...]) -> GpuReads:
        """``GpuReads`` of the rows whose ``rows_read`` are ``reads``, in time order."""
        import numpy as np

        sums: dict[int, list] = {}  # GPU -> [samples, per name: [sum in order, count]]
        series: dict[int, list] = {}  # GPU -> its reads' (t, energy, power)
        lost: dict[int, float] = {}
        for r in reads:
            for g, first in r.lost.items():
                lost.setdefault(g, first)
            for g, (n, values) in r.busy.items():
                acc = sums.setdefault(g, [0, *([None, 0] for _ in names)])
                acc[0] += n
                for s, v in zip(acc[1:], values, strict=True):
                    if len(v):  # added in order, as SQLite's avg() did
                        s[0] = (v if s[0] is None else np.concatenate(([s[0]], v))).cumsum()[-1]
                        s[1] += len(v)
            for g, arrays in r.energy.items():
                series.setdefault(g, []).append(arrays)
        busy = {
            g: {
                "samples": acc[0],
                **{
                    n: float(s[0] / s[1]) if s[1] and n in self._gpu_columns else None
                    for s, n in zip(acc[1:], names, strict=True)
                },
            }
            for g, acc in sorted(sums.items())
        }
        energy = {}
        for g, got in sorted(series.items()):
            t, e, p = (np.concatenate(c) for c in zip(*got, strict=True))
            if (e == e).any():
                energy[g] = (t, e, p)
        return GpuReads(busy, energy, lost)

    def frames(
        self, start: float | None = None, end: float | None = None, skip: frozenset[str] = frozenset()
    ) -> Iterator[Frame]:
        """Frames in time order from ``start`` (seeking there first) to ``end``.

        ``skip``: part kinds a reader does not need (e.g. {"series", "note"}), left out of the Frames,
        and GPU metrics (names of memtop.core.metrics), which read as None (none is read or decoded).
        """
        from memtop.storage import parts, reader  # (numpy: a live view never loads it)

        lo = self.t0 if start is None else start
        hi = self.t1 if end is None else end
        names = tuple(n for n in reader.ALL if n not in skip)
        st = _State(self.damage)
        if start is not None:
            try:
                self._seed(st, lo, reader.seed_rows(self, lo, names))
            except DECODE_ERRORS as e:  # (a damaged host blob's length, a time that is no number)
                raise UserError(f"{self.path} is damaged or truncated ({type(e).__name__}: {e})") from None
        # parts sampled just before the first frame belong to it
        plo = float("-inf") if start is None else lo
        queries = {
            "gpu_state": ("SELECT t, gpu, uuid, name, mig, link, processes FROM gpu_state", plo, 0),
            "gpu": ("", plo, 1),  # (memtop.storage.reader's)
            "series": ("SELECT t, gpu, metric, data FROM series", lo, 1),
            "host": ("", plo, 1),  # (these three: memtop.storage.parts')
            "perf": ("", plo, 1),
            "caps": ("", plo, 1),
            "note": ("SELECT t, text FROM note", plo, 1),
        }
        if self._has_health:
            queries["health"] = ("SELECT t, gpu, data FROM health", plo, 0)
        if self._has_proc_util:
            queries["proc_util"] = ("SELECT t, gpu, data FROM proc_util", plo, 0)
            queries["proc_job"] = ("SELECT t, pid, data FROM proc_job", plo, 0)

        # (order, stream, kind, cursor): rows become (t, order, stream, kind, row), sorted by the first
        # three, so the stream number breaks ties (parts at a frame's time belong to it)
        def source(kind: str, sql: str, tlo: float) -> Iterator[list]:
            if kind == "gpu":
                return reader.frame_rows(self, tlo, hi, names)
            if not sql:
                return parts.frame_parts(self, kind, tlo, hi, st.host_raw)
            return _batches(self._q(f"{sql} WHERE t>? AND t<=? ORDER BY t", (tlo, hi)))

        streams = [
            (o, i, kind, _Ahead(source(kind, sql, tlo)))
            for i, (kind, (sql, tlo, o)) in enumerate(queries.items())
            if kind not in skip
        ]
        if "stack" not in skip:
            streams.append((1, 8, "stack", _Ahead(parts.frame_parts(self, "stack", plo, hi))))
        q = self._q(f"SELECT t FROM frame WHERE t>=? AND t<=? AND {SANE_T} ORDER BY t", (lo, hi))
        streams.append((2, 9, "frame", _Ahead(_batches(q))))
        # the streams are read READ_WINDOW_S at a time and a window's rows are sorted together: the
        # same order as merging them row by row (a stable sort keeps a stream's own order), at a
        # fraction of the cost (a C sort instead of a Python heap merge per row)
        k = 1
        try:
            while True:
                edge = lo + READ_WINDOW_S * k
                rows: list[tuple] = []
                for o, i, kind, ahead in streams:
                    rows += [(r[0], o, i, kind, r) for r in ahead.upto(edge)]
                rows.sort(key=_ORDER)
                for _t, _o, _i, kind, row in rows:
                    if kind == "frame":
                        yield st.frame(row[0])
                    else:
                        st.apply(self, kind, row)
                heads = [h for *_, ahead in streams if (h := ahead.head()) is not None]
                if not heads:
                    break
                # on to the window of the next row: a damaged time far ahead costs one window, not
                # one per 5 s of the gap
                k = max(k + 1, math.ceil((min(heads) - lo) / READ_WINDOW_S))
        except (sqlite3.DatabaseError, zlib.error, ValueError, TypeError, KeyError, IndexError) as e:
            raise UserError(f"{self.path} is damaged or truncated ({type(e).__name__}: {e})") from None

    def _seed(self, st: _State, t: float, gpu_rows: list[tuple]) -> None:
        """State as it stood at time t: the last part of each source at or before t (``gpu_rows``:
        each GPU's, memtop.storage.reader.seed_rows)."""
        from memtop.storage import parts

        gpus = [r[0] for r in self._rows("SELECT DISTINCT gpu FROM gpu_state")]
        for g in gpus:
            r = self._one(
                "SELECT t, gpu, uuid, name, mig, link, processes FROM gpu_state "
                "WHERE gpu=? AND t<=? ORDER BY t DESC LIMIT 1",
                (g, t),
            )
            if r:
                st.apply(self, "gpu_state", r)
            if self._has_health:
                r = self._one(
                    "SELECT t, gpu, data FROM health WHERE gpu=? AND t<=? ORDER BY t DESC LIMIT 1", (g, t)
                )
                if r:
                    st.apply(self, "health", r)
        for row in gpu_rows:
            st.apply(self, "gpu", row)
        # the newest host sample, decoded from the stand-alone blob its chain starts at
        got, st.host_raw = parts.hosts(self, parts.host_rows(self, t, t, t), host_from_blob)
        if got:
            st.host = got[-1][2]
        for r in parts.caps_rows(self, t, t, t):
            st.apply(self, "caps", r)
        if self._has_proc_util:  # identities are written once per process: every one so far
            for r in self._rows("SELECT t, pid, data FROM proc_job WHERE t<=? ORDER BY t", (t,)):
                st.apply(self, "proc_job", r)
        for g in gpus if self._has_proc_util else ():
            r = self._one(
                "SELECT t, gpu, data FROM proc_util WHERE gpu=? AND t<=? ORDER BY t DESC LIMIT 1", (g, t)
            )
            if r:
                st.apply(self, "proc_util", r)
        for r in parts.stack_samples(parts.stack_dumps(self, t, t, t, blocks=False)):
            st.apply(self, "stack", r)
        for r in parts.perf_samples(parts.perf_rows(self, t, t, t, blocks=False)):
            st.apply(self, "perf", r)

    def proc_util_rows(self, lo: float, hi: float) -> list[tuple[float, int, tuple[ProcUtil, ...]]]:
        """Per-process GPU figures of [lo, hi] by GPU and time, each GPU's row in force at ``lo``
        first; [] for a recording made before they were stored. Damaged rows are left out."""
        if not self._has_proc_util:
            return []
        rows = self._rows(
            "SELECT t, gpu, data FROM proc_util WHERE typeof(gpu) = 'integer' AND "
            f"{SANE_T} AND t <= ? ORDER BY gpu, t",
            (hi,),
        )
        # of the rows at or before lo, each GPU's last (the next row is a later one, or another GPU's)
        rows = [
            r
            for k, r in enumerate(rows)
            if r[0] > lo or k + 1 == len(rows) or rows[k + 1][1] != r[1] or rows[k + 1][0] > lo
        ]
        return [(float(t), g, proc_util_of(d)) for t, g, d in rows if isinstance(g, int)]

    def seek(self, t: float) -> Frame:
        """The Frame at (or just before) time t."""
        r = self._one(f"SELECT t FROM frame WHERE t<=? AND {SANE_T} ORDER BY t DESC LIMIT 1", (t,))
        ft = r[0] if r else self.t0
        return next(self.frames(start=ft, end=ft))

    def summary(self) -> dict:
        m = self.meta
        counts = {
            tbl: self._rows(f"SELECT count(*) FROM {tbl}")[0][0]
            for tbl in ("frame", "gpu", "series", "host", "stack_sample", "stack", "perf", "marker", "note")
        }
        return {
            "path": str(self.path),
            "duration_s": round(self.duration, 1),
            "host": m.get("host"),
            "gpus": m.get("gpus"),
            "driver": m.get("driver"),
            "memtop_version": m.get("memtop_version"),
            "command": m.get("command"),
            "rows": counts,
            "size_bytes": self.path.stat().st_size,
        }


def _batches(cursor: sqlite3.Cursor) -> Iterator[list]:
    while batch := cursor.fetchmany(128):  # a few series blobs: memory stays flat
        yield batch


def before(t: float) -> float:
    """The float just before ``t`` (a read of (before(t), hi] takes the rows at t)."""
    return math.nextafter(t, -math.inf)


class _Ahead:
    """Time-sorted rows read in batches (none empty) and cut at time edges."""

    def __init__(self, batches: Iterator[list]) -> None:
        self._batches = batches
        self._buf: list = []
        self._done = False

    def _fill(self) -> None:
        if not self._buf and not self._done:
            self._buf = next(self._batches, [])
            self._done = not self._buf

    def head(self) -> float | None:
        """The time of the next row not taken yet; None at the end."""
        self._fill()
        return self._buf[0][0] if self._buf else None

    def upto(self, edge: float) -> list[tuple]:
        """The rows not taken yet with t <= edge."""
        out: list[tuple] = []
        while True:
            self._fill()
            buf = self._buf
            if not buf:
                return out
            k = bisect.bisect_right(buf, edge, key=_T)
            if k < len(buf):
                out += buf[:k]
                self._buf = buf[k:]
                return out
            out += buf
            self._buf = []


def _json(text: object) -> object:
    if not isinstance(text, (str, bytes)):
        return None
    try:
        return bounded_json(text, FIELD_MAX, "gpu_state")
    except Damaged:
        return None


def _bounded_int(v: object, hi: int) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi else None


def _link(text: object) -> PcieLink | None:
    d = _json(text)
    if not isinstance(d, dict):
        return None
    ints = [_bounded_int(d.get(k), 64) for k in ("gen", "width", "max_gen", "max_width")]
    bps = d.get("bytes_per_s")
    if None in ints or not isinstance(bps, (int, float)) or not 0 <= bps < 1e13:
        return None
    gen, width, max_gen, max_width = (int(i or 0) for i in ints)
    return PcieLink(gen, width, max_gen, max_width, float(bps))


def proc_util_json(us: tuple[ProcUtil, ...]) -> str:
    """[[pid, SM, memory, encoder, decoder], ...], percent to a tenth, null where not given."""
    return json.dumps(
        [[u.pid, *(None if v is None else round(v, 1) for v in (u.sm, u.mem, u.enc, u.dec))] for u in us]
    )


def _pct(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 100 else None


def proc_util_of(text: object) -> tuple[ProcUtil, ...]:
    """A proc_util row's figures; a damaged entry is left out, a value out of range is None."""
    d = _json(text)
    if not isinstance(d, list):
        return ()
    return tuple(
        ProcUtil(p[0], *map(_pct, p[1:5]))
        for p in d[:4096]
        if isinstance(p, list) and len(p) >= 5 and _bounded_int(p[0], 2**31) is not None
    )


def proc_job_of(text: object) -> tuple[tuple[str, str], ...]:
    """A proc_job row's identity: only JOB_KEYS, each a short cleaned string."""
    d = _json(text)
    if not isinstance(d, dict):
        return ()
    return tuple(
        sorted((k, clean(v, 64)) for k, v in d.items() if k in JOB_KEYS and isinstance(v, str) and v)
    )


def _processes(text: object) -> tuple[GpuProcess, ...]:
    d = _json(text or "[]")
    if not isinstance(d, list):
        return ()
    out = []
    for p in d:
        if isinstance(p, list) and len(p) == 2 and _bounded_int(p[0], 2**31) is not None:
            out.append(GpuProcess(p[0], _bounded_int(p[1], 2**50)))
    return tuple(out)


class _State:
    """Newest part of each source while reading; becomes a Frame at each frame time."""

    def __init__(self, damage: list[str] | None = None) -> None:
        self._damage = damage if damage is not None else []  # the Recording's notes, growing as it reads
        self._n_damage = 0
        self.gpus: dict[int, GpuSample] = {}
        self.gstate: dict[int, tuple] = {}
        self.health: dict[int, GpuHealth] = {}
        self.putil: dict[int, tuple[ProcUtil, ...]] = {}
        self.jobs: dict[int, ProcJob] = {}
        self._jobs_t: tuple[ProcJob, ...] | None = ()
        self.host: HostSample | None = None
        self.host_raw: bytes | None = None  # the host sample's JSON: the next blob may be chained to it
        self.stacks: dict[int, StackSample] = {}
        self.perf: dict[int, PerfSample] = {}
        self.series: list[SeriesChunk] = []
        self.caps: tuple[Capability, ...] = ()
        self.notes: tuple[str, ...] = ()
        # the tuples a Frame holds, rebuilt only when their source changed (most Frames only move a GPU)
        self._stacks_t: tuple[StackSample, ...] | None = ()
        self._perf_t: tuple[PerfSample, ...] | None = ()
        self._oldest_stack = float("inf")
        self._gpu_order: list[int] = []

    def apply(self, rec: Recording, kind: str, r: tuple) -> None:
        """Decode one stored part; a damaged one is missing data and a note, never an exception."""
        try:
            if kind in ("gpu", "gpu_state", "series", "health", "proc_util"):
                integer(r[1], "GPU index")  # a text index would not sort with the others
            if kind == "note":  # (a GPU row's values: memtop.storage.reader checked them)
                short_string(r[1], NAME_MAX, "note")
            self._apply(rec, kind, r)
        except DECODE_ERRORS:
            rec.note(f"damaged {kind} data skipped")

    def _apply(self, rec: Recording, kind: str, r: tuple) -> None:
        if kind == "gpu_state":
            self.gstate[r[1]] = rec._gpu_state(r)
            g = self.gpus.get(r[1])
            if g is not None:  # the current sample with the new slow fields
                uuid, name, mig, link, procs = self.gstate[r[1]]
                self.gpus[r[1]] = replace(g, uuid=uuid, name=name, mig=mig, link=link, processes=procs)
        elif kind == "gpu":
            g = rec._gpu(r, self.gstate.get(r[1]), self.health.get(r[1]))
            pu = self.putil.get(r[1])
            self.gpus[r[1]] = replace(g, proc_util=pu) if pu else g
        elif kind == "health":
            h = self.health[r[1]] = health_of(r[0], r[2])
            g = self.gpus.get(r[1])
            if g is not None:
                self.gpus[r[1]] = replace(g, health=h)
        elif kind == "proc_job":
            integer(r[1], "pid")
            if len(self.jobs) > 4096:  # processes come and go over a long run
                self.jobs.clear()
            self.jobs[r[1]] = ProcJob(r[1], proc_job_of(r[2]))
            self._jobs_t = None
        elif kind == "proc_util":
            self.putil[r[1]] = proc_util_of(r[2])
            g = self.gpus.get(r[1])
            if g is not None:
                self.gpus[r[1]] = replace(g, proc_util=self.putil[r[1]])
        elif kind == "series":
            dt, v = series_data(r[2], r[3])
            self.series.append(SeriesChunk(r[1], r[2], tuple((dt + r[0]).tolist()), tuple(v.tolist())))
        elif kind == "host":  # (these four decoded by memtop.storage.parts)
            self.host = r[1]
        elif kind == "stack":  # one py-spy dump
            s = r[1]
            self.stacks[s.pid] = s
            self._stacks_t = None
            self._oldest_stack = min(s.t for s in self.stacks.values())
        elif kind == "perf":
            self.perf[r[1].pid] = r[1]
            self._perf_t = None
        elif kind == "caps":
            self.caps = r[1]
        elif kind == "note":
            self.notes = (*self.notes, r[1])[-20:]

    def frame(self, t: float) -> Frame:
        if len(self._damage) != self._n_damage:  # new damage found while reading: each Frame says so
            self.notes = (*self.notes, *self._damage[self._n_damage :])[-20:]
            self._n_damage = len(self._damage)
        # a process whose stacks stopped coming (exited) leaves the Frame after 5 s
        if t - self._oldest_stack > 5.0:
            for pid in [p for p, s in self.stacks.items() if t - s.t > 5.0]:
                del self.stacks[pid]
            self._oldest_stack = min((s.t for s in self.stacks.values()), default=float("inf"))
            self._stacks_t = None
        if self._stacks_t is None:
            self._stacks_t = tuple(self.stacks[p] for p in sorted(self.stacks))
        if self._perf_t is None:
            self._perf_t = tuple(self.perf[p] for p in sorted(self.perf))
        series, self.series = tuple(self.series), []
        if self._jobs_t is None:
            self._jobs_t = tuple(self.jobs[p] for p in sorted(self.jobs))
        if len(self._gpu_order) != len(self.gpus):
            self._gpu_order = sorted(self.gpus)
        return Frame(
            t=t,
            gpus=tuple(map(self.gpus.__getitem__, self._gpu_order)),
            host=self.host,
            stacks=self._stacks_t,
            perf=self._perf_t,
            series=series,
            caps=self.caps,
            notes=self.notes,
            jobs=self._jobs_t,
        )


def read_markers(path: str | Path) -> list[Marker]:
    """Markers a labelled workload wrote: JSON lines {t0, t1, label, name, facts}.
    A line that is not such an object is a UserError naming its line number."""
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise UserError(f"cannot read markers {path}: {e.strerror}") from None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise Damaged("not a JSON object")
            t0, t1 = finite_number(d.get("t0"), "t0"), finite_number(d.get("t1"), "t1")
            label = string(d.get("label"), "label")
            name = string(d.get("name", label), "name")
            facts = json.dumps(d.get("facts", {}), allow_nan=False)
        except (ValueError, RecursionError) as e:
            raise UserError(f"{path} line {no}: not a marker ({e})") from None
        out.append(Marker(t0, t1, label, name, facts))
    return out
