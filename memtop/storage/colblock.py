"""Column blocks: five minutes of one stream's rows stored a second time as columns in one deflated blob.

A report reads an 8-hour recording's Frame times, GPU rows, host figures, stack and perf rows from a
few hundred blobs instead of a million rows (memtop.analysis.colscan); the rows stay the recording's truth,
which replay, export and the Frame path read. A block covers the rows whose time is in [t0, t1), the
blocks of a stream follow each other without a hole, and the rows after the last block are read as
rows. A block that is missing, malformed or not of this layout makes the reader read that stream's
rows instead.

The Writer closes the blocks of a span once a Frame is GRACE_S past its end (a GPU or host sample is
older than the Frame that carries it); a recording closed before its first block's end gets none. A
row older than a block already written cannot be added: the stream's blocks are then deleted, and its
rows alone are read.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import sqlite3
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

BLOCK_S = 300.0  # a block's span; its edges are multiples of it (exact floats)
GRACE_S = 10.0
END = 1e12  # the last block's end when the recording is closed (no sane time reaches it)
NULL = -(1 << 63)  # an integer column's NULL
# a block that inflates past this is not one (a zip bomb): the largest in tests/data is 170 KB (five
# minutes of GPU rows), an 8-GPU run at 10 Hz ~3 MB; its header (names, strings) at most _MAX_HEAD,
# whose strings become objects (a header of n bytes: at most n/3 strings)
_MAX_RAW = 32 << 20
_MAX_HEAD = 4 << 20
MAX_OPEN_ROWS = 1_000_000  # rows of a stream waiting for their block (ten minutes hold far fewer)

SCHEMA = """CREATE TABLE block(stream TEXT NOT NULL, seq INTEGER NOT NULL, t0 REAL NOT NULL, t1 REAL NOT NULL,
                    n INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (stream, seq)) WITHOUT ROWID;"""

# each stream's columns: (name, kind), kind f: float64, i: int64 (NULL as above), s: text (an index
# into the block's strings, -1 for NULL). The first column is the row's time.
Columns = tuple[tuple[str, str], ...]


class Broken(Exception):
    """A row a block cannot hold (out of order, not of its column's type)."""


_INTS = tuple((code, array(code).itemsize) for code in "bhiq")  # signed, the narrowest that holds a column


def encode(columns: Columns, rows: Sequence[Sequence]) -> bytes:
    """The rows as one blob: a JSON header (row count, column names, each column's width in bytes,
    strings) and the columns' little-endian bytes, deflated. An integer column takes the narrowest
    width its values fit, NULL being that width's smallest value."""
    strings: dict[str, int] = {}
    body, widths = [], []
    for j, (_, kind) in enumerate(columns):
        col = [r[j] for r in rows]
        if kind == "f":
            if any(type(v) is not float for v in col):
                raise Broken("not a float")
            a = array("d", col)
        else:
            if kind == "i":
                if any(v is not None and type(v) is not int for v in col):
                    raise Broken("not an integer")
                ints = [v for v in col if v is not None]
            else:
                if any(v is not None and type(v) is not str for v in col):
                    raise Broken("not a text")
                ints = [strings.setdefault(v, len(strings)) for v in col if v is not None]
                col = [None if v is None else strings[v] for v in col]
            lo, hi = min(ints, default=0), max(ints, default=0)
            code, w = next(
                ((c, w) for c, w in _INTS if -(1 << (8 * w - 1)) < lo and hi < 1 << (8 * w - 1)), ("", 0)
            )
            if not w:
                raise Broken("an integer beyond 64 bits")
            null = -(1 << (8 * w - 1))
            a = array(code, [null if v is None else v for v in col])
        if sys.byteorder == "big":
            a.byteswap()
        widths.append(a.itemsize)
        body.append(a.tobytes())
    head = {
        "n": len(rows),
        "c": [c for c, _ in columns],
        "k": "".join(k for _, k in columns),
        "w": widths,
        "s": list(strings),
    }
    data = json.dumps(head).encode()
    return zlib.compress(len(data).to_bytes(4, "little") + data + b"".join(body), 6)


def decode(
    columns: Columns, blob: object, optional: frozenset[str] = frozenset()
) -> tuple[int, dict[str, np.ndarray], list[str]] | None:
    """(row count, each of ``columns`` as an array: float64, or int64 with NULL (a text: -1 for NULL),
    the strings) of a block, which may hold other columns too (a block of a later or earlier memtop);
    None where it is not a block as ``encode`` writes them, or lacks one of ``columns`` not in
    ``optional`` (columns a later memtop added to a stream: an older block reads them as NULL)."""
    import numpy as np

    if not isinstance(blob, bytes):
        return None
    try:
        z = zlib.decompressobj()
        raw = z.decompress(blob, _MAX_RAW)
        if z.unconsumed_tail or not z.eof:
            return None
        size = int.from_bytes(raw[:4], "little")
        if size > _MAX_HEAD:
            return None
        head = json.loads(raw[4 : 4 + size])
    except (zlib.error, ValueError, RecursionError):
        return None
    if not isinstance(head, dict):
        return None
    n, names, kinds, widths, strings = (head.get(k) for k in ("n", "c", "k", "w", "s"))
    if not (
        type(n) is int
        and n >= 0
        and isinstance(names, list)
        and all(type(c) is str for c in names)
        and len(set(names)) == len(names)
        and type(kinds) is str
        and isinstance(widths, list)
        and len(kinds) == len(widths) == len(names)
        and all(
            type(w) is int and (w == 8 if k == "f" else k in "is" and w in (1, 2, 4, 8))
            for k, w in zip(kinds, widths, strict=True)
        )
        and isinstance(strings, list)
        and all(type(s) is str for s in strings)
    ):
        return None
    body = raw[4 + size :]
    if len(body) != n * sum(widths) or n * 8 * len(columns) > _MAX_RAW:  # (decoded: 8 bytes a value)
        return None
    at = dict(zip(names, zip(kinds, widths, itertools.accumulate([0, *widths]), strict=False), strict=True))
    out = {}
    for name, kind in columns:
        if name not in at and name in optional:
            out[name] = np.full(n, math.nan) if kind == "f" else np.full(n, -1 if kind == "s" else NULL)
            continue
        if name not in at or at[name][0] != kind:
            return None
        _, w, offset = at[name]
        a = np.frombuffer(body, dtype="<f8" if kind == "f" else f"<i{w}", count=n, offset=offset * n)
        if kind != "f":
            null = a == -(1 << (8 * w - 1))
            a = a.astype(np.int64)
            if kind == "s":
                a[null] = -1
                if n and (a.max() >= len(strings) or a.min() < -1):
                    return None
            elif w < 8:
                a[null] = NULL
        out[name] = a
    return n, out, strings


class BlockWriter:
    """Gathers each stream's rows and writes their blocks once a span is over (``turn``)."""

    def __init__(self, db: sqlite3.Connection, streams: dict[str, Columns]) -> None:
        self._db = db
        self._streams = streams
        self._rows: dict[str, list] = {s: [] for s in streams}
        self._seq = dict.fromkeys(streams, 0)
        self._start = -END  # the open blocks' start: the first block takes the rows from the start
        self._end: float | None = None  # and end, once a row has come
        self._span: list[float] = []  # the first Frame's time and the last's
        self._broken: set[str] = set()

    def add(self, stream: str, row: Sequence) -> None:
        if stream in self._broken:
            return
        t = row[0]
        if type(t) is not float or not math.isfinite(t) or t < self._start or abs(t) >= END:
            self.drop(stream)
            return
        if self._end is None:
            self._end = (math.floor(t / BLOCK_S) + 1) * BLOCK_S
        rows = self._rows[stream]
        if len(rows) >= MAX_OPEN_ROWS:  # (the Frames' times do not reach an edge: no blocks for it)
            self.drop(stream)
            return
        rows.append(row)

    def turn(self, now: float) -> None:
        """Writes the open blocks where ``now`` (a Frame's time) is GRACE_S past their end, once the
        recording is a block's span long (``close``: a shorter one gets none)."""
        self._span[1:] = [now]
        if self._end is not None and now >= self._end + GRACE_S and now - self._span[0] >= BLOCK_S:
            self._flush((math.floor((now - GRACE_S) / BLOCK_S)) * BLOCK_S)

    def close(self) -> None:
        """The last blocks, to the end; none at all for a recording shorter than a block (its rows
        take a fraction of a second to read, and the blocks' fixed cost is a tenth of a two-minute
        recording)."""
        if self._end is not None and self._span[-1] - self._span[0] >= BLOCK_S:
            self._flush(END)

    def _flush(self, end: float) -> None:
        """The blocks up to ``end``; where SQLite fails (a full disk), none from here on: the blocks
        already written end early, and a reader takes the rows after them."""
        db = self._db
        db.execute("SAVEPOINT blocks")
        try:
            self._write_blocks(end)
        except sqlite3.Error:
            db.execute("ROLLBACK TO blocks")
            self._broken = set(self._streams)
            self._rows = {s: [] for s in self._streams}
        db.execute("RELEASE blocks")

    def _write_blocks(self, end: float) -> None:
        for stream, columns in self._streams.items():
            if stream in self._broken:
                continue
            rows = self._rows[stream]
            keep = [r for r in rows if r[0] < end]
            try:
                blob = encode(columns, keep)
            except Broken:
                self.drop(stream)
                continue
            self._db.execute(
                "INSERT INTO block VALUES (?, ?, ?, ?, ?, ?)",
                (stream, self._seq[stream], self._start, end, len(keep), blob),
            )
            self._seq[stream] += 1
            self._rows[stream] = [r for r in rows if r[0] >= end]
        self._start = end
        self._end = end + BLOCK_S

    def drop(self, stream: str) -> None:
        """No blocks for this stream: those written are deleted (its rows are read instead)."""
        self._broken.add(stream)
        self._rows[stream] = []
        # (where SQLite cannot delete them, the rows' count no longer matches theirs: still not read)
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("DELETE FROM block WHERE stream=?", (stream,))


class Blocks:
    """A recording's blocks of one stream, read for a span of time."""

    def __init__(
        self,
        db: sqlite3.Connection,
        stream: str,
        columns: Columns,
        table: str | None = None,
        optional: frozenset[str] = frozenset(),
    ) -> None:
        """``table``: the stream's row table, whose count of rows the blocks must hold (a row
        deleted or added after the recording was closed makes them stand for other rows);
        ``optional``: columns an older block may lack (``decode``)."""
        self._db = db
        self.stream = stream
        self.columns = columns
        self.optional = optional
        self.end = -math.inf  # the time the blocks cover up to (the rows from it on are rows)
        self._index: list[tuple[int, float, float, int]] = []
        self.held = 0
        try:
            rows = db.execute(
                "SELECT seq, t0, t1, n FROM block WHERE stream=? ORDER BY seq", (stream,)
            ).fetchall()
        except sqlite3.DatabaseError:  # no block table (an older recording), or damage
            return
        for k, (seq, t0, t1, n) in enumerate(rows):
            prev = rows[k - 1][2] if k else -END
            if not (seq == k and type(t0) is float and t0 == prev and type(t1) is float and t0 < t1 <= END):
                return
            if type(n) is not int or n < 0:
                return
        held = sum(r[3] for r in rows)
        if rows and table is not None:
            end = rows[-1][2]
            try:
                q = f"SELECT count(*) FROM {table}" + ("" if end == END else " WHERE t < ?")  # noqa: S608
                if db.execute(q, () if end == END else (end,)).fetchone()[0] != held:
                    return
            except sqlite3.DatabaseError:
                return
        self._index = rows
        self.end = rows[-1][2] if rows else -math.inf
        self.held = held  # the rows the blocks hold

    def subset(self, columns: Columns, optional: frozenset[str] = frozenset()) -> Blocks:
        """These blocks read as ``columns`` (some of the stream's), their index not read again."""
        other = copy.copy(self)
        other.columns, other.optional = columns, optional
        return other

    def read(
        self,
        lo: float,
        hi: float,
        seed: float | None = None,
        ordered: bool = True,
        max_rows: int | None = None,
        coded: bool = False,
    ) -> dict | None:
        """The columns of the rows with lo <= t <= hi the blocks hold (those before ``end``), as one
        array each (a text column: a list, or ``coded`` its ``Texts``); with ``seed`` (at most lo),
        the newest row at or before it first. None where a block is damaged, or (``ordered``) its
        rows are not in time order."""
        import numpy as np

        index = self._index
        want = [k for k, (_, t0, t1, _) in enumerate(index) if t1 > lo and t0 <= hi]
        if seed is not None:
            k = next((k for k, (_, t0, t1, _) in enumerate(index) if t0 <= seed < t1), len(index) - 1)
            back = k - 1
            while back > 0 and not index[back][3]:  # the newest block before it with a row
                back -= 1
            want = sorted(set(want) | set(range(max(back, 0), k + 1)))
        if (
            max_rows is not None
            and want
            and sum(index[k][3] for k in range(want[0], want[-1] + 1)) > max_rows
        ):
            return None  # (before any blob is inflated)
        if not want:
            return {
                c: (Texts(np.zeros(0, dtype=np.int64), []) if coded else [])
                if k == "s"
                else np.zeros(0, dtype="<f8" if k == "f" else "<i8")
                for c, k in self.columns
            }
        first, last = want[0], want[-1]
        try:
            blobs = self._db.execute(
                "SELECT seq, n, data FROM block WHERE stream=? AND seq>=? AND seq<=? ORDER BY seq",
                (self.stream, first, last),
            ).fetchall()
        except sqlite3.DatabaseError:
            return None
        if [b[0] for b in blobs] != list(range(first, last + 1)):
            return None
        parts = []
        for seq, n, data in blobs:
            got = decode(self.columns, data, self.optional)
            if got is None or got[0] != n or n != index[seq][3]:
                return None
            t = got[1][self.columns[0][0]]
            if n and not ((t >= index[seq][1]) & (t < index[seq][2])).all():  # (NaN fails)
                return None
            parts.append(got)
        out: dict = {}
        for c, kind in self.columns:  # (each block's column let go once joined: memory of hours)
            if kind == "s":  # the texts, each block's indices into its own strings (-1: NULL)
                out[c] = Texts.of([(cols.pop(c), s) for _, cols, s in parts])
            else:
                out[c] = np.concatenate([cols.pop(c) for _, cols, _ in parts])
        t = out[self.columns[0][0]]
        if ordered and len(t) > 1 and not (np.diff(t) >= 0).all():
            return None
        mask = (t >= lo) & (t <= hi)
        if seed is not None:
            at = int(np.searchsorted(t, seed, "right")) - 1
            if at >= 0:
                mask[at] = True
        keep = np.flatnonzero(mask)
        if len(keep) != len(t):
            # (rows in time order keep a run of them: each column's a view of it, not a copy)
            rows = slice(keep[0], keep[-1] + 1) if len(keep) and keep[-1] - keep[0] + 1 == len(keep) else keep
            out = {c: v.take(keep) if isinstance(v, Texts) else v[rows] for c, v in out.items()}
        return out if coded else {c: v.values() if isinstance(v, Texts) else v for c, v in out.items()}


class Texts:
    """A text column as a code per row into its distinct strings (-1: NULL): equal texts, one code,
    so the readers compare and test each distinct text once and make no object per row."""

    __slots__ = ("codes", "strings")

    def __init__(self, codes: np.ndarray, strings: list[str]) -> None:
        self.codes = codes  # int64
        self.strings = strings

    @staticmethod
    def of(blocks: list[tuple[np.ndarray, list[str]]]) -> Texts:
        """The blocks' columns (each its indices into its own strings) as one."""
        import numpy as np

        index: dict[str, int] = {}
        codes = [
            np.array([index.setdefault(x, len(index)) for x in s] + [-1], dtype=np.int64)[c]
            for c, s in blocks
        ]
        return Texts(np.concatenate(codes), list(index))

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, rows: np.ndarray) -> Texts:
        return Texts(self.codes[rows], self.strings)

    def value(self, i: int) -> str | None:
        c = int(self.codes[i])
        return None if c < 0 else self.strings[c]

    def values(self) -> list[str | None]:
        import numpy as np

        return np.array([*self.strings, None], dtype=object)[self.codes].tolist()
