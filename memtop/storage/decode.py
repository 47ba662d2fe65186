"""A recording's rows as readers take them, and their decoding: one place for every reader.

A recording is hostile input (docs/SECURITY.md): any value of any row may be of the wrong type, out of
range, deflated to gigabytes or nested without end. The checks that turn such a part into Damaged
(missing data and a note, never a crash), the limits on what a part may hold, and the decoders of host,
stack, perf, caps and series rows live here, used alike by the Frames' reader (memtop.storage.store),
the reader of parts (memtop.storage.parts), the report's scan by columns (memtop.analysis.colscan) and
the export: a part is decoded, or refused, the same way by each.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, cast

from memtop.core.metrics import BY_NAME, METRICS
from memtop.core.model import (
    PROC_FIGURES,
    PROC_KINDS,
    Capability,
    CapState,
    HostSample,
    NumaNode,
    PerfSample,
    ProcSample,
)
from memtop.core.wording import counted
from memtop.storage import colblock

if TYPE_CHECKING:
    from memtop.storage.store import Recording

# -- the rows as readers take them ------------------------------------------------------------
HOST_KEY_EVERY = 20  # every 20th host blob stands alone; the others are deflated against the one before
SERIES_V2 = b"\x01"  # first byte of an integer series blob (a float32 one starts with t=0.0: zero bytes)
# a frame time SQLite holds as a finite number (monotonic seconds: far below 1e12)
SANE_T = "typeof(t) IN ('real', 'integer') AND t > -1e12 AND t < 1e12"
INT_MAX = 1 << 62  # an integer of a part past this (either sign) is damage
# GPU columns: one per metric of memtop/core/metrics.py, stored as round(value * scale). A recording made
# before a metric existed lacks its column; reading it gives None.
GPU_COLS: tuple[tuple[str, float], ...] = tuple((m.name, m.scale) for m in METRICS)
# a stack_sample row as readers take it (any schema: schema 3 adds i, the thread's place in its dump,
# which ORDER BY t, pid follows), the stored class left out: it is derived on read (Recording._klass);
# its name is the text, or from schema 4 the id of a thread_name row (Recording._thread_name)
STACK_SQL = "SELECT t, pid, tid, name, active, gil, NULL, stack, error FROM stack_sample"
# what the classifier reads of a process (model.PROC_FIGURES): the host_proc blocks' columns, each of
# the kind its ProcSample field is (model.PROC_KINDS; a None: NULL)
HOST_PROC_FIELDS = PROC_FIGURES
# what job grouping (memtop.analysis.jobs) reads of a process besides its pid and name: in the host_proc
# blocks from 2026-11-28, so a multi-GPU report groups its GPUs without inflating a host sample's JSON
HOST_PROC_JOB: colblock.Columns = (("ppid", "i"), ("cmdline", "s"))
# the figures after the first five (those of 2026-11-24) and the job's columns a recording holds from
# when they were added (schema additive): older blocks and JSON lack them
HOST_PROC_ADDED = frozenset(PROC_FIGURES[5:]) | {c for c, _ in HOST_PROC_JOB}

# the streams stored again as column blocks (memtop.storage.colblock), read by the report (memtop.analysis.colscan):
# Frame times, GPU rows (the mode as its index into GPU_MODES), what store.host_figures stores (a host
# sample without figures: procs -1), stack_sample's rows but the stored class (never read), and perf
BLOCK_STREAMS: dict[str, colblock.Columns] = {
    "frame": (("t", "f"),),
    "gpu": (("t", "f"), ("gpu", "i"), ("mode", "i"), *((c, "i") for c, _ in GPU_COLS)),
    "host": (("t", "f"), ("iowait_pct", "f"), ("procs", "i")),
    "host_proc": (("t", "f"), *PROC_KINDS.items(), *HOST_PROC_JOB),
    "stack": (
        ("t", "f"),
        ("pid", "i"),
        ("tid", "i"),
        ("name", "s"),
        ("active", "i"),
        ("gil", "i"),
        ("stack", "i"),
        ("error", "s"),
    ),
    "perf": (("t", "f"), ("pid", "i"), ("rates", "i")),  # a perf row, and its count of rates:
    "perf_rate": (("t", "f"), ("name", "s"), ("rate", "f")),  # each of them (its data, by columns)
}
# each stream's table, whose rows its blocks hold (perf_rate's are in perf's JSON, host_proc's in the
# host JSON: the host stream's counts check them; the host_proc table of recordings from 2026-11-24 is
# not read where the blocks are)
BLOCK_TABLES: dict[str, str | None] = {
    "frame": "frame",
    "gpu": "gpu",
    "host": "host",
    "host_proc": None,
    "stack": "stack_sample",
    "perf": "perf",
    "perf_rate": None,
}

# -- what a part may hold ---------------------------------------------------------------------
# What one part may hold at most, decoded. The largest of the 70 recordings in tests/data (measured
# 2026-11-27): a host sample's JSON 16 KB, a series chunk 512 bytes, a metadata value 276 bytes, a
# gpu_state field 88, a perf row 143, a marker's facts 205. Far past these (8 GPUs, hundreds of
# processes, long command lines fit), a part is damaged, not a cost to pay: a deflated blob is
# inflated only so far, and a JSON text is decoded only if it is short enough (a text of n bytes
# holds at most n/2 objects).
HOST_JSON_MAX = 1 << 20
SERIES_RAW_MAX = 64 << 10
META_MAX = 64 << 10  # a metadata value (a command line of 64 KiB)
FIELD_MAX = 64 << 10  # a gpu_state link or process list, a perf row's rates, a marker's facts
NAME_MAX = 4096  # a marker's label and name, a note


# -- checks and decoders ----------------------------------------------------------------------
class Damaged(ValueError):
    """A part of a recording that does not decode: it becomes missing data and a note, never a crash."""


# what decoding a damaged part can raise (Damaged is a ValueError)
DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, zlib.error, RecursionError)


def finite_number(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or abs(v) > 1e18:
        raise Damaged(f"{what} is not a finite number")
    return v


def integer(v: object, what: str) -> int:
    if type(v) is int and -INT_MAX <= v <= INT_MAX:  # the common case, fast
        return v
    if isinstance(v, bool) or not isinstance(v, int) or abs(v) > INT_MAX:
        raise Damaged(f"{what} is not an integer")
    return v


def string(v: object, what: str) -> str:
    if not isinstance(v, str):
        raise Damaged(f"{what} is not a string")
    return v


def short_string(v: object, limit: int, what: str) -> str:
    if len(string(v, what)) > limit:
        raise Damaged(f"{what} too long")
    return v  # type: ignore[return-value]  # (a str: string checked it)


def sequence(v: object, what: str) -> list:
    if not isinstance(v, list | tuple):
        raise Damaged(f"{what} is not a list")
    return list(v)


def floats(v: object, what: str) -> tuple[float, ...]:
    items = sequence(v, what)
    try:  # fsum is finite only if every item is; abs fails on text
        if math.isfinite(math.fsum(items)) and max(map(abs, items), default=0) <= 1e18:
            return tuple(map(float, items))
    except TypeError:
        pass
    raise Damaged(f"{what} holds a value that is no finite number")


def strings(v: object, what: str) -> tuple[str, ...]:
    items = sequence(v, what)
    if all(isinstance(x, str) for x in items):
        return tuple(items)
    raise Damaged(f"{what} is not a string")


def integers(v: object, what: str) -> tuple[int, ...]:
    items = sequence(v, what)
    if all(type(x) is int and abs(x) <= INT_MAX for x in items):
        return tuple(items)
    raise Damaged(f"{what} holds a value that is no integer")


@functools.cache
def _checker(ann: str):
    """A function that checks a JSON value against a model field's annotation (parsed once)."""
    if ann.endswith(" | None"):
        inner = _checker(ann[: -len(" | None")])
        return lambda v, what: None if v is None else inner(v, what)
    if ann == "float":
        return finite_float
    if ann == "int":
        return integer
    if ann == "str":
        return string
    if ann == "tuple[str, ...]":
        return strings
    if ann.startswith("tuple["):
        parts = [a.strip() for a in ann[6:-1].split(",")]
        if parts[-1] == "..." and parts[0] == "float":
            return floats
        if parts[-1] == "..." and parts[0] == "int":
            return integers
        each = [_checker(a) for a in parts]

        def fixed(v: object, what: str) -> tuple:
            items = sequence(v, what)
            if len(items) != len(each):
                raise Damaged(f"{what} has {counted(len(items), 'item')}, not {len(each)}")
            return tuple(c(x, what) for c, x in zip(each, items, strict=True))

        return fixed
    raise TypeError(f"no decoder for {ann}")


def finite_float(v: object, what: str) -> float:
    if type(v) is float and -1e18 <= v <= 1e18:  # the common case, fast (NaN fails the comparisons)
        return v
    return float(finite_number(v, what))


@functools.cache
def _fields_of(cls: type) -> tuple[tuple[str, bool, Callable[[object, str], object] | None], ...]:
    """(name, required, checker) of each field of a model dataclass, parsed once (a report decodes
    thousands of host samples); None for a tuple of records, which ``record_of`` decodes."""
    out = []
    for f in fields(cls):
        ann = str(f.type)
        nested = ann.startswith("tuple[") and ann[6:7].isupper()
        out.append((f.name, f.default is MISSING, None if nested else _checker(ann)))
    return tuple(out)


_ABSENT = object()


def record_of(cls: type, d: object, what: str, nested: dict | None = None) -> object:
    """A model dataclass from a JSON object: every field type-checked, a missing field with a default
    takes it, unknown keys ignored (a newer memtop's extra fields)."""
    if not isinstance(d, dict):
        raise Damaged(f"{what} is not an object")
    kw = {}
    for name, required, check in _fields_of(cls):
        v = d.get(name, _ABSENT)
        if v is _ABSENT:
            if required:
                raise Damaged(f"{what} lacks {name}")
        elif check is not None:
            kw[name] = check(v, what)
        elif nested and name in nested:
            kw[name] = tuple(record_of(nested[name], x, what) for x in sequence(v, what))
        else:
            raise TypeError(f"no decoder for {cls.__name__}.{name}")
    return cls(**kw)


def inflate(data: bytes, limit: int, what: str, zdict: bytes = b"") -> bytes:
    """A deflated blob's bytes, inflated to at most ``limit`` (a blob of a few KB can inflate to
    gigabytes); past it, cut short or not deflated at all, it raises Damaged."""
    if limit <= 0:  # zlib reads a max_length of 0 as "no limit": a spent budget must refuse, not lift the cap
        raise Damaged(f"{what}: the recording's decode budget is spent")
    z = zlib.decompressobj(zdict=zdict) if zdict else zlib.decompressobj()
    try:
        raw = z.decompress(data, limit)
    except zlib.error as e:  # (its text says which: not zlib, or not the dictionary it names)
        raise Damaged(f"{what} is not deflated data ({e})") from None
    if z.unconsumed_tail or not z.eof:
        raise Damaged(f"{what} too large or cut short")
    return raw


def bounded_json(text: str | bytes, limit: int, what: str) -> object:
    """A JSON text decoded where it is at most ``limit`` long (its objects are then at most limit/2,
    its nesting bounded by the decoder's recursion guard); anything else raises Damaged."""
    if len(text) > limit:
        raise Damaged(f"{what} too large")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Damaged(f"{what} is not JSON") from None


def finite_tree(v: object, depth: int = 0) -> object:
    """JSON-safe data: non-finite numbers as None (strict JSON consumers reject NaN/Infinity), and
    what lies deeper than 32 levels (memtop writes 3) as None too (a recording's metadata, a trace's)."""
    if depth > 32 or isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [finite_tree(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {k: finite_tree(x, depth + 1) for k, x in v.items()}
    return v


def inflate_host(blob: bytes, prev: bytes | None) -> bytes:
    """A host blob's JSON (at most HOST_JSON_MAX); a chained blob names (by Adler-32) the JSON it
    was deflated against: zlib refuses a dictionary whose Adler-32 is not that one."""
    if not isinstance(blob, bytes):
        raise Damaged("host data is not a blob")
    if len(blob) < 6 or not blob[1] & 0x20:  # no preset dictionary (FDICT): stands alone
        return inflate(blob, HOST_JSON_MAX, "host data")
    if prev is None:
        raise Damaged("a host sample's predecessor is missing")
    return inflate(blob, HOST_JSON_MAX, "host data", prev)


def series_data(metric: str, data: bytes):
    """(time offsets, values) of a series blob, either encoding, as numpy arrays."""
    import numpy as np

    if not isinstance(data, bytes):
        raise Damaged("series data is not a blob")
    if data[:1] != SERIES_V2:
        if len(data) > SERIES_RAW_MAX:
            raise Damaged("series data too large")
        a = np.frombuffer(data, dtype=np.float32).reshape(-1, 2)
        return a[:, 0].astype(np.float64), a[:, 1]
    steps = np.frombuffer(inflate(data[1:], SERIES_RAW_MAX, "series data"), dtype=np.int32).reshape(2, -1)
    scale = BY_NAME[metric].scale if metric in BY_NAME else 1000.0
    return np.cumsum(steps[0]) / 1e3, np.cumsum(steps[1]) / scale


def host_from_blob(raw: bytes) -> HostSample:
    """A HostSample from a host blob's JSON (``inflate_host``), every field type-checked."""
    d = host_json(raw)  # a process's bad UTF-8 name stays readable
    if isinstance(d, dict) and isinstance(d.get("procs"), list):  # before argv was recorded
        d["procs"] = [
            {**p, "argv": p["cmdline"].split()}
            if isinstance(p, dict) and "argv" not in p and isinstance(p.get("cmdline"), str)
            else p
            for p in d["procs"]
        ]
    return cast(HostSample, record_of(HostSample, d, "host", {"numa": NumaNode, "procs": ProcSample}))


# a number json.loads reads that finite_float or integer could refuse (not finite, or past their ranges) has an
# exponent or 19 digits in a row in the text, or is NaN / Infinity: none, and every number of the
# blob is finite and under 1e18 (the text with every digit made 0 is searched: a C substring search)
_ZEROS = bytes.maketrans(b"123456789E", b"000000000e")  # digits made 0, E made e


def _number_shape(raw: bytes) -> bytes | None:
    """The text with each run of digits made one 0 (its shape: the same shape, the same JSON types
    everywhere, exponents being refused), or None where a number could be out of finite_float's or integer's
    range."""
    z = raw.translate(_ZEROS)
    if b"0e" in z or b"0" * 19 in z or b"NaN" in raw or b"Infinity" in raw:
        return None
    return b"0".join(filter(None, z.split(b"0")))  # a blob starts with { and ends with }


_ELEMENT: dict[str, frozenset[type]] = {
    "tuple[float, ...]": frozenset({float}),
    "tuple[int, ...]": frozenset({int}),
    "tuple[str, ...]": frozenset({str}),
}


@functools.cache
def _shape(cls: type) -> tuple:
    """(field names in order, the allowed tuples of JSON value types, (field, element types or a
    nested class) of each list field) of a model dataclass as asdict + json.dumps write it."""
    names: list[str] = []
    variants: list[tuple] = [()]
    lists: list[tuple[int, object]] = []
    for i, f in enumerate(fields(cls)):
        ann = str(f.type)
        names.append(f.name)
        opts: tuple = {"float": (float,), "int": (int,), "str": (str,), "int | None": (int, type(None))}.get(
            ann, (list,)
        )
        variants = [v + (o,) for v in variants for o in opts]
        if ann == "tuple[float, float, float]":
            lists.append((i, 3))
        elif ann in _ELEMENT:
            lists.append((i, _ELEMENT[ann]))
        elif ann.startswith("tuple["):
            lists.append((i, {"tuple[NumaNode, ...]": NumaNode, "tuple[ProcSample, ...]": ProcSample}[ann]))
        elif ann not in ("float", "int", "str", "int | None"):
            raise TypeError(f"no shape for {cls.__name__}.{f.name}")
    return tuple(names), frozenset(variants), tuple(lists)


def _typed(cls: type, items: list | tuple) -> bool:
    """Whether each item holds exactly the fields of ``cls`` in order, each of its canonical JSON type."""
    names, variants, lists = _shape(cls)
    for d in items:
        if type(d) is not dict or tuple(d) != names:
            return False
        vals = tuple(d.values())
        if tuple(map(type, vals)) not in variants:
            return False
        for i, kind in lists:
            v = vals[i]
            if kind == 3:
                if len(v) != 3 or not set(map(type, v)) <= _FLOAT:
                    return False
            elif isinstance(kind, frozenset):
                if not set(map(type, v)) <= kind:
                    return False
            elif not _typed(kind, v):
                return False
    return True


_FLOAT = frozenset({float})


def plain_host(raw: bytes, shapes: set[bytes] | None = None) -> dict | None:
    """A host blob's JSON (``inflate_host``) as a dict when it is as this version writes it: every
    field of its canonical type, every number finite and under 1e18. ``host_from_blob`` accepts
    such a sample unchanged (lists become tuples), so its values can be read straight from the dict
    (memtop.analysis.colscan does, to skip building a HostSample per sample); None for anything else.
    ``shapes``: the shapes (``_number_shape``) of samples found so already, kept across calls: a
    sample of one of them has the same types, and is not checked again."""
    shape = _number_shape(raw)
    if shape is None:
        return None
    d = host_json(raw)
    if shapes is not None and shape in shapes:
        return d  # type: ignore[return-value]  # the shape of a dict of these types
    if not _typed(HostSample, (d,)):
        return None
    if shapes is not None:
        if len(shapes) > 64:  # a few shapes in a run (process lists); never many kept
            shapes.clear()
        shapes.add(shape)
    return d  # type: ignore[return-value]


def host_json(raw: bytes) -> object:
    """A host blob's JSON (``inflate_host``) decoded as ``host_from_blob`` decodes it."""
    return json.loads(raw.decode("utf-8", "surrogateescape"))


# a deflated caps or stack row inflates to at most this (real ones: ~1 KB of caps, stacks up to ~16 KB)
JSON_ROW_MAX = 1 << 20


def json_text(data: object, what: str, rec: Recording | None = None, zdict: bytes = b"") -> str:
    """A JSON column's text as stored: text (schemas 1, 2) or deflated (schema 3; a stack of schema 4
    against its base's text, ``zdict``), inflated to at most JSON_ROW_MAX and, with ``rec``, within
    what is left of its budget (``Recording.inflate_left``: rows that repeat one text deflate a
    thousandfold, and readers keep what they decode); anything else raises Damaged."""
    if not isinstance(data, bytes):
        return short_string(data, JSON_ROW_MAX, what)
    limit = JSON_ROW_MAX if rec is None else max(0, min(JSON_ROW_MAX, rec.inflate_left))
    raw = inflate(data, limit, what, zdict)
    if rec is not None:
        rec.inflate_left -= len(raw)
    return raw.decode()


def caps_from_json(data: str | bytes, rec: Recording | None = None) -> tuple[Capability, ...]:
    out = []
    for c in sequence(json.loads(json_text(data, "caps", rec)), "caps"):
        s, n, st, d, f = (string(x, "caps") for x in sequence(c, "caps"))
        out.append(Capability(s, n, CapState(st), d, f))
    return tuple(out)


def host_chain(rows: Callable[[str, tuple], list], t: float) -> list[tuple[float, bytes]]:
    """The host rows (t, blob) from the stand-alone blob the newest one at or before t is deflated
    against, to it (``rows`` runs a query: a Recording's, or a reader's own)."""
    chain = rows("SELECT t, data FROM host WHERE t<=? ORDER BY t DESC LIMIT ?", (t, HOST_KEY_EVERY))
    start = next((i for i, r in enumerate(chain) if len(r[1]) < 2 or not r[1][1] & 0x20), len(chain) - 1)
    return list(reversed(chain[: start + 1]))


def perf_sample(r: tuple) -> PerfSample:
    """A perf row (t, pid, rates as JSON) decoded (raises one of DECODE_ERRORS when damaged)."""
    data = r[2] if isinstance(r[2], str | bytes) else string(r[2], "perf")
    rates = tuple(
        (string(k, "perf"), finite_number(v, "perf"))
        for k, v in sequence(bounded_json(data, FIELD_MAX, "perf"), "perf")
    )
    return PerfSample(finite_number(r[0], "perf t"), integer(r[1], "perf pid"), rates)
