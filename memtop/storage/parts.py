"""The one reader of a recording's host samples, stack samples, perf reads and capabilities over a
time range: read (from the column blocks where they cover the range, else from the rows), checked
and decoded in one place, a damaged part skipped and noted on the recording (``Recording.note``)
as ``damaged <kind> data skipped``. The report's scan by columns (memtop.analysis.colscan) and the
Frames (memtop.storage.store.Recording.frames: replay, export, seek) both take them from here, as
they take the GPU rows from memtop.storage.reader.

A range read with ``seed`` starts as the Frames' state stands at that time: the newest host sample
at or before it, the stack samples and perf reads of the 3 s before it, the newest capabilities.
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from memtop.core.arrays import distinct
from memtop.core.errors import UserError
from memtop.core.model import Capability, PerfSample, StackSample
from memtop.storage.colblock import NULL, Texts
from memtop.storage.decode import (
    BLOCK_STREAMS,
    DECODE_ERRORS,
    FIELD_MAX,
    HOST_PROC_FIELDS,
    INT_MAX,
    STACK_SQL,
    caps_from_json,
    finite_number,
    host_chain,
    host_from_blob,
    inflate_host,
    perf_sample,
)
from memtop.storage.reader import chunks

if TYPE_CHECKING:
    from memtop.storage.store import Recording

SEED_S = 3.0  # a range read from a time starts with the stack samples and perf reads this recent
_MAX_RATES = 64  # events a perf read may hold in blocks (memtop's collector reads at most a dozen)
_PERF_SQL = "SELECT t, pid, data"
# STACK_SQL's columns but the time and the class (always NULL): pid, tid, name, active, gil, stack, error
_STACK_REST = (0, 1, 2, 3, 4, 6, 7)


def damaged(rec: Recording, kind: str) -> None:
    """A part of ``kind`` that does not decode: missing data, and a note every later Frame carries."""
    rec.note(f"damaged {kind} data skipped")


def frame_parts(
    rec: Recording, kind: str, plo: float, hi: float, prev: bytes | None = None
) -> Iterator[list]:
    """The Frames' rows of part ``kind`` (host, stack, perf, caps) of (plo, hi], decoded, in chunks
    of (t, part) in time order; ``prev``: the host JSON the first host row may be deflated against."""
    if kind == "host":

        def read(a: float, b: float) -> list:
            nonlocal prev
            got, prev = hosts(rec, host_rows(rec, a, b), host_from_blob, prev)
            return [(t, s) for t, _, s in got]

        return chunks(rec, "host", plo, hi, read)
    if kind == "stack":
        return chunks(
            rec, "stack_sample", plo, hi, lambda a, b: stack_samples(stack_dumps(rec, a, b, blocks=False))
        )
    if kind == "perf":
        return chunks(rec, "perf", plo, hi, lambda a, b: perf_samples(perf_rows(rec, a, b, blocks=False)))
    return chunks(rec, "caps", plo, hi, lambda a, b: caps_rows(rec, a, b))


def utf8_rows(rec: Recording, query: Callable[[], sqlite3.Cursor]) -> list:
    """``query()``'s rows with TEXT values decoded by the sqlite3 module's own UTF-8 decoder, without
    a Python call per value; where one is not valid UTF-8, as Recording decodes them (surrogates for
    the bad bytes: the same strings where the UTF-8 is valid)."""
    db = rec.db
    factory = db.text_factory
    db.text_factory = str
    try:
        return query().fetchall()
    except (sqlite3.DatabaseError, UserError):  # "Could not decode to UTF-8", or a real error: again
        pass
    finally:
        db.text_factory = factory
    return query().fetchall()


def types_in(values: tuple, *kinds: type) -> bool:
    return set(map(type, values)) <= set(kinds)


# -- capabilities ----------------------------------------------------------------------------------
def caps_rows(
    rec: Recording, plo: float, hi: float, seed: float | None = None
) -> list[tuple[float, tuple[Capability, ...]]]:
    """(t, capabilities) of each caps row of (plo, hi], with ``seed`` the newest at or before it first."""
    rows: list = []
    if seed is not None:
        rows += rec.query("SELECT t, data FROM caps WHERE t<=? ORDER BY t DESC LIMIT 1", (seed,)).fetchall()
    rows += rec.query("SELECT t, data FROM caps WHERE t>? AND t<=? ORDER BY t", (plo, hi)).fetchall()
    out = []
    for t, data in rows:
        try:
            out.append((t, caps_from_json(data, rec)))
        except DECODE_ERRORS:
            damaged(rec, "caps")
    return out


# -- perf reads ------------------------------------------------------------------------------------
def perf_rows(
    rec: Recording, plo: float, hi: float, seed: float | None = None, blocks: bool = True
) -> list[tuple[float, int, list]]:
    """(t, pid, [[name, rate], ...]) of the perf rows of (plo, hi] (with ``seed``: those of the
    SEED_S before it first), as ``perf_sample`` decodes them: from the column blocks where they
    cover the range, else all the JSON parsed at once and every value checked over arrays; where a
    row is not as this version writes it, each is decoded by ``perf_sample``, a damaged one skipped."""
    got = _perf_blocks(rec, plo, hi, seed) if blocks else None
    if got is not None:
        return got
    where = [("t<=? AND t>?", (seed, seed - SEED_S))] if seed is not None else []
    where.append(("t>? AND t<=?", (plo, hi)))
    rows: list = []
    try:  # with whether SQLite finds each text one valid JSON value
        for w, args in where:
            # (a text past FIELD_MAX is left to perf_sample, which refuses it: objects cost)
            sql = f"{_PERF_SQL}, json_valid(data) AND length(data) <= {FIELD_MAX} FROM perf WHERE {w} ORDER BY t"
            rows += utf8_rows(rec, functools.partial(rec.db.execute, sql, args))
        valid = all(r[3] == 1 for r in rows)
    except sqlite3.DatabaseError:  # no JSON functions (or damage: the plain query says so)
        rows = [
            r for w, args in where for r in rec.query(f"{_PERF_SQL} FROM perf WHERE {w} ORDER BY t", args)
        ]
        valid = False
    if not rows:
        return []
    if valid and (got := _perf_parsed(rows)) is not None:
        return got
    out = []
    for r in rows:
        try:
            q = perf_sample(r[:3])
        except DECODE_ERRORS:
            damaged(rec, "perf")
            continue
        out.append((q.t, q.pid, [list(x) for x in q.rates]))
    return out


def _perf_parsed(rows: list) -> list[tuple[float, int, list]] | None:
    """The rows' texts (each one JSON value by itself) parsed as one list; None where a row is not
    as this version writes it."""
    t, pid, data = (c for c, _ in zip(zip(*rows, strict=True), range(3)))
    if not (types_in(data, str) and types_in(t, float) and types_in(pid, int)):
        return None
    try:
        parsed = json.loads("[" + ",".join(data) + "]")
    except (ValueError, RecursionError):
        return None
    if len(parsed) != len(rows) or not types_in(tuple(parsed), list):
        return None
    pairs = tuple(itertools.chain.from_iterable(parsed))
    names, rates = zip(*pairs) if pairs else ((), ())
    with np.errstate(invalid="ignore"):
        if (
            types_in(pairs, list)
            and set(map(len, pairs)) <= {2}
            and types_in(names, str)
            and types_in(rates, float)
            and (np.abs(np.array(rates, dtype=np.float64)) <= 1e18).all()  # (NaN fails)
            and (np.abs(np.array(t, dtype=np.float64)) <= 1e18).all()
            and max(map(abs, pid)) <= INT_MAX
        ):
            return list(zip(t, pid, parsed, strict=True))
    return None


def _perf_blocks(
    rec: Recording, plo: float, hi: float, seed: float | None
) -> list[tuple[float, int, list]] | None:
    """``perf_rows`` from the column blocks; None where they do not cover the span, are damaged, or
    hold a value the rows' checks would refuse."""
    samples, rates = rec.blocks("perf"), rec.blocks("perf_rate")
    if samples.end <= hi or rates.end <= hi:
        return None
    lo = float(np.nextafter(seed - SEED_S if seed is not None else plo, np.inf))
    p = samples.read(lo, hi, ordered=False)
    # perf_rate has no table to count against: at most _MAX_RATES rows per perf row its blocks hold
    r = rates.read(lo, hi, ordered=False, max_rows=_MAX_RATES * samples.held) if p is not None else None
    if p is None or r is None:
        return None
    t, k = p["t"], p["rates"]
    if (
        (k < 0).any()
        or k.sum() != len(r["t"])  # (before the repeat: a hostile count would not fit in memory)
        or not np.array_equal(np.repeat(t, k), r["t"])
        or not (np.abs(r["rate"]) <= 1e18).all()
    ):
        return None  # (NaN fails too)
    if None in r["name"]:
        return None
    pairs = [[name, rate] for name, rate in zip(r["name"], r["rate"].tolist(), strict=True)]
    starts = (np.cumsum(k) - k).tolist()
    parsed = [pairs[a : a + n] for a, n in zip(starts, k.tolist(), strict=True)]
    order = np.argsort(t, kind="stable").tolist()  # (by time, then as written: the rows' order)
    times, pids = t.tolist(), p["pid"].tolist()
    return [(times[i], pids[i], parsed[i]) for i in order]


def perf_samples(rows: list[tuple[float, int, list]]) -> list[tuple[float, PerfSample]]:
    """``perf_rows`` as the Frames hold them."""
    return [(t, PerfSample(t, pid, tuple(map(tuple, rates)))) for t, pid, rates in rows]


# -- stack samples ---------------------------------------------------------------------------------
class Dumps(NamedTuple):
    """A range's stack samples: each sample's time and dump (``kind``, an index into ``dumps``); a
    dump whose rows (all but the time) are those of an earlier one is that dump again (an 8-hour run
    holds ~200,000 samples of a few dozen dumps), decoded once."""

    times: list[float]
    kind: np.ndarray
    dumps: list[StackSample]  # each dump as its first sample

    def sample(self, i: int) -> StackSample:
        d = self.dumps[self.kind[i]]
        return StackSample(self.times[i], d.pid, d.threads, d.error)


def stack_dumps(
    rec: Recording,
    plo: float,
    hi: float,
    seed: float | None = None,
    blocks: bool = True,
    main_only: bool = False,
) -> Dumps:
    """The stack samples of (plo, hi] (with ``seed``: those of the SEED_S before it first), in the
    rows' order (time, then pid); a dump that does not decode (``stack_sample``) is skipped.
    ``main_only``: each sample with its main thread alone (``StackSample.main``'s; the export draws
    no other): the other threads' rows are neither decoded nor checked, and dumps alike in their
    main thread are one dump."""
    got = _stack_blocks(rec, plo, hi, seed) if blocks else None
    if got is None:
        rows = _stack_rows(rec, plo, hi, seed)
        t, *cols = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 9
        got = (t, [cols[j] for j in _STACK_REST])
    t, cols = got
    cut = _sample_starts(t, cols[0])
    if main_only and len(t):
        t, cols, cut = _main_rows(t, cols, cut)
    if len(t) and (by_sample := _sample_dumps(rec, t, cols, cut)) is not None:
        return by_sample
    row = _row_codes(cols).tolist()
    kinds: dict[tuple, int] = {}
    dumps: list[StackSample] = []
    kind, times = [], []
    for a, b in itertools.pairwise(cut):
        key = tuple(row[a:b])
        k = kinds.get(key)
        try:
            time = t[a] if type(t[a]) is float and abs(t[a]) <= 1e18 else finite_number(t[a], "stack t")
            if k is None:
                s = rec.stack_sample([_stack_row(t, cols, i) for i in range(a, b)])
                k = kinds[key] = len(dumps)
                dumps.append(s)
        except DECODE_ERRORS:
            damaged(rec, "stack")
            continue
        kind.append(k)
        times.append(time)
    return Dumps(times, np.array(kind, dtype=np.int64), dumps)


def _sample_dumps(rec: Recording, t: list, cols: list, cut: list[int]) -> Dumps | None:
    """``stack_dumps``' loop over arrays: the same dumps, decoded in the same order (a distinct
    sample's first; one that does not decode skipped with its samples); None where a sample's time
    is not a plain float (then each is checked as the loop does). An 8-hour run's ~200,000 samples
    took a Python step each."""
    first_rows = cut[:-1]
    times = [t[a] for a in first_rows]
    if not types_in(tuple(times), float):
        return None
    ta = np.array(times, dtype=np.float64)
    if not (np.abs(ta) <= 1e18).all():  # (NaN fails)
        return None
    codes = _sample_codes(_row_codes(cols), np.array(first_rows, dtype=np.int64), np.diff(cut))
    _, first, which = np.unique(codes, return_index=True, return_inverse=True)
    index = np.full(len(first), -1, dtype=np.int64)  # each distinct sample's dump
    dumps: list[StackSample] = []
    for u in np.argsort(first, kind="stable").tolist():
        k = int(first[u])
        try:
            dumps.append(rec.stack_sample([_stack_row(t, cols, i) for i in range(cut[k], cut[k + 1])]))
        except DECODE_ERRORS:
            damaged(rec, "stack")
            continue
        index[u] = len(dumps) - 1
    kind = index[which.reshape(-1)]
    keep = np.flatnonzero(kind >= 0)
    return Dumps(ta[keep].tolist(), kind[keep], dumps)


def _sample_codes(row: np.ndarray, starts: np.ndarray, n: np.ndarray) -> np.ndarray:
    """A code per sample (``n[i]`` rows from ``starts[i]``), the same for samples whose rows' codes
    (``row``) are the same in the same order: the samples of each length numbered by their rows'
    codes as the digits of one integer (renumbered before it could pass 2**62)."""
    radix = int(row.max()) + 1 if len(row) else 1
    code = np.empty(len(n), dtype=np.int64)
    base = 0
    for size in distinct(n).tolist():
        s = np.flatnonzero(n == size)
        at, c, top = starts[s], np.zeros(len(s), dtype=np.int64), 1  # (c < top)
        for j in range(size):
            if top * radix >= 1 << 62:
                c, top = np.unique(c, return_inverse=True)[1].reshape(-1), len(s)
            c, top = c * radix + row[at + j], top * radix
        code[s] = base + np.unique(c, return_inverse=True)[1].reshape(-1)
        base += len(s)
    return code


def _main_rows(t: list, cols: list, cut: list[int]) -> tuple[list, list, list[int]]:
    """Each sample's main-thread row (``StackSample.main``: its first row whose tid is the pid, else
    its first row), with its first row's error (a dump that failed is its first row's error)."""
    pid, tid = cols[0], cols[1]
    starts = np.array(cut[:-1], dtype=np.int64)
    if isinstance(pid, np.ndarray) and isinstance(tid, np.ndarray):
        is_main = tid == pid
    else:  # (values of any type: compared as Python compares them)
        is_main = np.array([a == b for a, b in zip(tid, pid, strict=True)], dtype=bool)
    mains = np.flatnonzero(is_main)
    first = np.full(len(starts), -1, dtype=np.int64)
    first[(np.searchsorted(cut, mains, "right") - 1)[::-1]] = mains[::-1]  # (the first wins)
    rows = np.where(first >= 0, first, starts)
    pick = rows.tolist()
    picked = [_take(c, rows) for c in cols]
    picked[-1] = _take(cols[-1], starts)
    return [t[i] for i in pick], picked, list(range(len(pick) + 1))


def _take(column: list | np.ndarray | Texts, rows: np.ndarray) -> list | np.ndarray | Texts:
    """A stack column's values at ``rows``."""
    if isinstance(column, list):
        return [column[i] for i in rows.tolist()]
    return column.take(rows) if isinstance(column, Texts) else column[rows]


def stack_samples(dumps: Dumps) -> list[tuple[float, StackSample]]:
    """``stack_dumps`` as the Frames hold them."""
    return [(t, dumps.sample(i)) for i, t in enumerate(dumps.times)]


def _stack_rows(rec: Recording, plo: float, hi: float, seed: float | None) -> list:
    rows: list = []
    if seed is not None:
        rows += utf8_rows(
            rec, lambda: rec.query(f"{STACK_SQL} WHERE t<=? AND t>? ORDER BY t, pid", (seed, seed - SEED_S))
        )
    rows += utf8_rows(rec, lambda: rec.query(f"{STACK_SQL} WHERE t>? AND t<=? ORDER BY t, pid", (plo, hi)))
    return rows


def _stack_row(t: list, cols: list, i: int) -> tuple:
    """Row i as STACK_SQL gives it (a column block's NULL as None)."""
    v = [
        c[i]
        if isinstance(c, list)
        else c.value(i)
        if isinstance(c, Texts)
        else None
        if c[i] == NULL
        else int(c[i])
        for c in cols
    ]
    return (t[i], *v[:5], None, *v[5:])


def _row_codes(cols: list) -> np.ndarray:
    """A code per row, the same for rows whose columns are equal (as Python compares their values):
    an integer column as it is, another's values numbered."""
    keys = []
    for c in cols:
        if isinstance(c, Texts):  # (equal texts: one code)
            c = c.codes
        elif isinstance(c, list):
            first = {v: j for j, v in enumerate(dict.fromkeys(c))}
            c = np.fromiter(map(first.__getitem__, c), np.int64, len(c))
        keys.append(c)
    one = _one_key(keys)
    if one is not None:  # (one sort of one integer, not a sort by seven keys: a tenth of a second)
        return np.unique(one, return_inverse=True)[1].reshape(-1)
    order = np.lexsort(keys[::-1])
    new = np.zeros(len(order), dtype=bool)
    for k in keys:
        ks = k[order]
        new[1:] |= ks[1:] != ks[:-1]
    code = np.empty(len(order), dtype=np.int64)
    code[order] = np.cumsum(new)
    return code


def _one_key(keys: list[np.ndarray]) -> np.ndarray | None:
    """The rows' columns as the digits of one integer, equal where every column is (each column's
    values less its least, NULL one more than its greatest); None where it would pass 2**62."""
    one, top = np.zeros(len(keys[0]), dtype=np.int64), 1
    for k in keys:
        null = k == NULL
        values = k[~null]
        lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
        radix = hi - lo + 2
        if top * radix >= 1 << 62:
            return None
        one = one * radix + (np.where(null, hi + 1, k) - lo)
        top *= radix
    return one


def _sample_starts(t: list, pid: list | np.ndarray) -> list[int]:
    """The first row of each stack sample, and the rows' count: where (t, pid) changes."""
    p = pid if isinstance(pid, np.ndarray) else None
    if p is None and types_in(tuple(pid), int) and max(map(abs, pid), default=0) <= INT_MAX:
        p = np.array(pid, dtype=np.int64)
    if p is not None and types_in(tuple(t), float):
        ta = np.array(t, dtype=np.float64)
        new = np.flatnonzero((ta[1:] != ta[:-1]) | (p[1:] != p[:-1])) + 1
        return [0, *new.tolist(), len(t)] if t else [0]
    out = [0]  # (values of other types: compared as Python compares them)
    for _, g in itertools.groupby(zip(t, pid, strict=True)):
        out.append(out[-1] + sum(1 for _ in g))
    return out


def _stack_blocks(rec: Recording, plo: float, hi: float, seed: float | None) -> tuple[list, list] | None:
    """``_stack_rows`` from the column blocks (memtop.storage.colblock): the times, and the other
    columns (``_STACK_REST``; an integer one as an array, NULL for None); None where they do not
    cover the span or are damaged."""
    blocks = rec.blocks("stack")
    if blocks.end <= hi:
        return None
    lo = seed - SEED_S if seed is not None else plo
    got = blocks.read(float(np.nextafter(lo, np.inf)), hi, ordered=False, coded=True)
    if got is None:
        return None
    order = np.lexsort((got["pid"], got["t"]))  # (t, pid), then as written: the rows' order
    if not (np.diff(order) == 1).all():  # (as written but where damaged)
        got = {c: v.take(order) if isinstance(v, Texts) else v[order] for c, v in got.items()}
    return got["t"].tolist(), [got[c] for c, _ in BLOCK_STREAMS["stack"][1:]]


# -- host samples ----------------------------------------------------------------------------------
def host_rows(rec: Recording, plo: float, hi: float, seed: float | None = None) -> list[tuple[float, bytes]]:
    """The host rows (t, blob) of (plo, hi]; with ``seed`` first the chain of rows the newest
    sample at or before it is deflated against (``decode.host_chain``)."""
    rows = host_chain(lambda sql, args: rec.query(sql, args).fetchall(), seed) if seed is not None else []
    return rows + rec.query("SELECT t, data FROM host WHERE t>? AND t<=? ORDER BY t", (plo, hi)).fetchall()


def hosts(
    rec: Recording, rows: list[tuple[float, bytes]], decode: Callable[[bytes], Any], prev: bytes | None = None
) -> tuple[list[tuple[float, bytes, Any]], bytes | None]:
    """(t, JSON, ``decode(JSON)``) of each host row that inflates (against ``prev``, the JSON before
    the first row's) and decodes, and the JSON the next row is inflated against; a row that does not
    inflate leaves that JSON as it was, one that does not decode is skipped after it (as a chained
    blob names its predecessor's JSON, whatever it held)."""
    out = []
    for t, blob in rows:
        try:
            raw = inflate_host(blob, prev)
        except DECODE_ERRORS:
            damaged(rec, "host")
            continue
        prev = raw
        try:
            out.append((t, raw, decode(raw)))
        except DECODE_ERRORS:
            damaged(rec, "host")
    return out, prev


class HostBlocks(NamedTuple):
    """The host samples' figures as the column blocks hold them: each sample's time and count of
    process rows (-1: its figures are in its JSON alone), iowait, and the process rows' columns."""

    t: np.ndarray
    procs: np.ndarray
    iowait: np.ndarray
    rows: dict[str, Any]


def host_blocks(rec: Recording, plo: float, hi: float, seed: float | None) -> HostBlocks | None:
    """The host and host_proc blocks of (plo, hi] (with ``seed``: from the newest sample at or
    before it); None where they do not cover the span (a recording from before them, one not
    closed) or are damaged."""
    loads, procs = rec.blocks("host"), rec.blocks("host_proc")
    if loads.end <= hi or procs.end <= hi:
        return None
    h = loads.read(float(np.nextafter(plo, np.inf)), hi, seed)
    if h is None:
        return None
    t, n = h["t"], h["procs"]
    # no table counts the host_proc rows: at most as many as the file could hold (its blocks of rows
    # that repeat deflate a thousandfold; memory must not grow with that)
    p = (
        procs.read(t[0], t[-1], max_rows=rec.size // 4, coded=True)
        if len(t)
        else procs.read(1.0, 0.0, coded=True)
    )
    if p is None:
        return None
    counts = n[n >= 0]
    if (
        (n < -1).any()
        or counts.sum() != len(p["t"])  # (before the repeat: a hostile count would not fit in memory)
        or not np.array_equal(np.repeat(t[n >= 0], counts), p["t"])
        or not (np.abs(h["iowait_pct"]) < 1e18).all()  # (NaN fails)
        or not (np.abs(p["cpu_pct"]) < 1e18).all()
    ):
        return None
    if any((p[k].codes < 0).any() for k in HOST_PROC_FIELDS[:5] if isinstance(p[k], Texts)):
        return None  # (a NULL name or state: the rows say what they are)
    return HostBlocks(t, n, h["iowait_pct"], p)


class Blobs(Sequence):
    """The host samples' JSON by their index (samples at ``times``, which the rows hold), each
    inflated when first asked for (with the rest of its chain: the Frames ask for them in order).
    A sample whose row is missing or does not inflate raises one of DECODE_ERRORS."""

    def __init__(self, rec: Recording, times: list[float]) -> None:
        self._rec = rec
        self._t = times
        self._got: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._t)

    def each(self, hs: list[int]) -> Iterator[bytes]:
        """The JSON of samples ``hs`` (ascending), inflated in one pass over their rows."""
        if not hs:
            return
        t = self._t
        rows = host_rows(self._rec, t[hs[0]], t[hs[-1]], t[hs[0]])
        want = iter(hs)
        h = next(want, None)
        prev = None
        for rt, blob in rows:
            prev = inflate_host(blob, prev)
            while h is not None and t[h] == rt:
                yield prev
                h = next(want, None)
        if h is not None:
            raise KeyError("a host sample the blocks hold is not a row")

    def __getitem__(self, h: int) -> bytes:  # type: ignore[override]  # (an index, no slices)
        raw = self._got.get(h)
        if raw is None:
            chain = host_rows(self._rec, self._t[h], self._t[h], self._t[h])
            if not chain or chain[-1][0] != self._t[h]:
                raise KeyError("a host sample the blocks hold is not a row")
            prev = None
            for j, (t, blob) in enumerate(chain):
                prev = inflate_host(blob, prev)
                at = h - (len(chain) - 1 - j)
                if at >= 0 and self._t[at] == t:
                    self._got[at] = prev
            raw = self._got[h]
        return raw
