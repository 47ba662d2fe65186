"""A minimal writer of Perfetto's native trace format (protobuf ``Trace`` of ``TracePacket``s, TrackEvent).

Only what memtop writes is encoded: track descriptors (process, thread, named and counter tracks),
slice begin/end, instants with debug annotations, and counter values, all on one packet sequence
with event names interned. Field numbers are those of Perfetto's protos
(protos/perfetto/trace/trace_packet.proto, track_event/track_event.proto, track_descriptor.proto,
debug_annotation.proto, interned_data.proto). Written by hand rather than with the protobuf
package: a dozen message shapes, their constant parts encoded once, and no dependency or generated
code to keep in step (docs/ARCHITECTURE.md, "Perfetto export").

Timestamps are integer nanoseconds; the trace carries no clock snapshot, so Perfetto reads them as
its default trace clock, unchanged.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, BinaryIO

from memtop.core.arrays import distinct

if TYPE_CHECKING:
    import numpy as np

_DOUBLE = struct.Struct("<d").pack
SEQ = b"\x50\x01"  # trusted_packet_sequence_id = 1: every packet is on one sequence
_CLEARED = 1  # sequence_flags: SEQ_INCREMENTAL_STATE_CLEARED (interned names start afresh)
_NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE (the packet uses an iid)
_NS_MAX = (1 << 63) - 1
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4  # TrackEvent.Type
_BEGIN = b"\x48\x01"  # TrackEvent.type = SLICE_BEGIN
_SIZE = [bytes((n,)) for n in range(128)]  # a packet's size under 128: its one-byte varint


def varint(v: int) -> bytes:
    """Base-128 varint; a negative int64 as its 64-bit two's complement (10 bytes), as protobuf does."""
    if v < 0:
        v += 1 << 64
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def vint(field: int, v: int) -> bytes:
    return key(field, 0) + varint(v)


def blob(field: int, data: bytes) -> bytes:
    """A length-delimited field (a string's UTF-8, a message's bytes)."""
    return key(field, 2) + varint(len(data)) + data


def text(field: int, s: str) -> bytes:
    return blob(field, s.encode("utf-8", "replace"))


def double(field: int, v: float) -> bytes:
    return key(field, 1) + _DOUBLE(v)


_ENCODE = json.JSONEncoder(default=str, allow_nan=False).encode  # json.dumps(v, default=str, allow_nan=False)


def annotation(name: str, value: object) -> bytes:
    """One DebugAnnotation: scalars as themselves, anything else as its JSON text (None: JSON null)."""
    if isinstance(value, bool):
        v = vint(2, int(value))
    elif isinstance(value, int) and -(1 << 63) <= value < 1 << 63:
        v = vint(4, value)
    elif isinstance(value, float) and math.isfinite(value):
        v = double(5, value)
    elif isinstance(value, str):
        v = text(6, value)
    else:
        try:
            v = text(9, _ENCODE(value))
        except ValueError:  # (a NaN or an infinity inside)
            v = text(9, "null")
    return text(10, name) + v


def debug_args(args: dict) -> bytes:
    """TrackEvent.debug_annotations (field 4) of ``args``: a float's encoded after its name's
    encoding (made once), another scalar's annotation made once, and a list's or dict's once per
    distinct repr (a phase slice's evidence is a few dozen of them, its peers, stack shares and top
    stack among them: an 8-hour export writes thousands of slices of the same names, words and
    values; a JSON encoding costs ~10 us)."""
    out = []
    for k, v in args.items():
        if type(v) is float and math.isfinite(v):
            head = _NAMES.get(k)
            if head is None:  # debug_annotations (field 4) of a size the double's 8 bytes fix: its
                name = text(10, str(k)) + b"\x29"  # name, double_value's key (field 5, fixed64)
                head = _NAMES[k] = b"\x22" + varint(len(name) + 8) + name
                if len(_NAMES) > _KEPT:
                    _NAMES.clear()
            out.append(head + _DOUBLE(v))
            continue
        if type(v) in (str, bool, int) or v is None:
            key: tuple = (k, type(v), v)
        elif type(v) in (list, dict):  # (known by its repr: of plain values, the same repr is the same JSON)
            key = (k, type(v), repr(v))
        else:
            out.append(blob(4, annotation(str(k), v)))
            continue
        got = _SCALARS.get(key)
        if got is None:
            got = blob(4, annotation(str(k), v))
            if len(_SCALARS) > _KEPT:
                _SCALARS.clear()
            _SCALARS[key] = got
        out.append(got)
    return b"".join(out)


_KEPT = 1 << 16
_NAMES: dict[object, bytes] = {}  # an argument's key -> a double's annotation but for its 8 bytes
_SCALARS: dict[tuple, bytes] = {}  # (key, type, value or a list's or dict's repr) -> the annotation


def _ns(t: Sequence[float] | np.ndarray) -> np.ndarray:
    """``TraceWriter.stamp``'s nanoseconds of each of times ``t`` (seconds), as uint64."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):  # (past float's range: inf, then 0 as ``stamp``)
        ns = np.asarray(t, dtype=np.float64) * 1e9
    ok = (ns >= 0) & (ns < 2.0**63)  # ``stamp``'s 0 <= ns <= _NS_MAX (NaN fails: 0)
    return np.where(ok, np.rint(np.where(ok, ns, 0.0)), 0.0).astype(np.uint64)  # (rint: round's ties)


def _varint_sizes(v: np.ndarray) -> np.ndarray:
    """Each value's varint length in bytes."""
    import numpy as np

    size = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        size += v >= np.uint64(1 << (7 * k))
    return size


def _put_varints(rows: np.ndarray, at: int, v: np.ndarray, n: int) -> None:
    """The varints of ``v`` (each ``n`` bytes long) into columns at..at+n-1 of ``rows``."""
    import numpy as np

    for j in range(n):
        more = 0x80 if j < n - 1 else 0
        rows[:, at + j] = ((v >> np.uint64(7 * j)) & np.uint64(0x7F)) | np.uint64(more)


class TraceWriter:
    """Packets of one sequence, buffered and written to ``fh`` in batches (``flush``).

    Tracks are made by ``process``/``thread``/``track``/``counter_track`` (each returns its uuid);
    events name the uuid of their track. ``n`` counts the events written (not descriptors)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.n = 0
        self._buf: list[bytes] = []
        self._uuids = 0
        self._iids: dict[str, bytes] = {}  # event name -> its name_iid field
        # (track, type, name, extra) -> an event's packet after its timestamp; (key, its size) -> ``events``'
        self._tails: dict[tuple, bytes] = {}
        self._runs: dict[tuple, list[bytes]] = {}
        self._counters: dict[int, bytes] = {}  # counter track -> its packet's part after the timestamp
        self._last: dict[int, float] = {}  # counter track -> its last value written
        self.repeats = 0  # counter values left out: each the same as the one before on its track
        self._packs: dict[tuple[int, int], Callable[..., bytes]] = {}  # (those sizes) -> their packer
        self._put(SEQ + vint(13, _CLEARED))

    def _put(self, body: bytes) -> None:
        self._buf.append(self._packet(body))

    @staticmethod
    def _packet(body: bytes) -> bytes:
        return b"\x0a" + varint(len(body)) + body  # Trace.packet = 1

    def _uuid(self) -> int:
        self._uuids += 1
        return self._uuids

    def _descriptor(self, desc: bytes) -> None:
        self._put(SEQ + blob(60, desc))  # TracePacket.track_descriptor = 60

    def process(self, pid: int, name: str) -> int:
        uuid = self._uuid()
        self._descriptor(vint(1, uuid) + blob(3, vint(1, pid) + text(6, name)))
        return uuid

    def thread(self, pid: int, tid: int, name: str, parent: int | None = None) -> int:
        uuid = self._uuid()
        up = b"" if parent is None else vint(5, parent)
        self._descriptor(vint(1, uuid) + up + blob(4, vint(1, pid) + vint(2, tid) + text(5, name)))
        return uuid

    def track(self, parent: int, name: str) -> int:
        """A named track for slices under ``parent`` (a process's track)."""
        uuid = self._uuid()
        self._descriptor(vint(1, uuid) + text(2, name) + vint(5, parent))
        return uuid

    def counter_track(self, parent: int, name: str) -> int:
        uuid = self._uuid()
        self._descriptor(vint(1, uuid) + text(2, name) + vint(5, parent) + blob(8, b""))
        # the packet after its timestamp, but for the value: the sequence, then the TrackEvent (type =
        # COUNTER, track_uuid, double_counter_value's key); with its size, less the timestamp's
        te = b"\x48\x04" + vint(11, uuid) + b"\xe1\x02"
        self._counters[uuid] = SEQ + b"\x5a" + bytes((len(te) + 8,)) + te
        return uuid

    @staticmethod
    def stamp(t: float) -> bytes:
        """TracePacket.timestamp (ns) of a time in seconds, encoded once for the events at it."""
        ns = t * 1e9
        return b"\x40" + varint(round(ns) if 0 <= ns <= _NS_MAX else 0)  # (NaN: 0, as JSON's null)

    @staticmethod
    def stamps(t: Sequence[float] | np.ndarray) -> list[bytes]:
        """``stamp`` of each of times ``t`` (seconds), made over arrays."""
        import numpy as np

        ns = _ns(t)
        size = _varint_sizes(ns)
        out = [b""] * len(ns)
        for n in distinct(size).tolist():
            at = np.flatnonzero(size == n)
            rows = np.empty((len(at), 1 + n), dtype=np.uint8)
            rows[:, 0] = 0x40  # TracePacket.timestamp's key, then its varint
            _put_varints(rows, 1, ns[at], n)
            raw = rows.tobytes()
            for i, k in zip(at.tolist(), range(0, len(raw), n + 1), strict=True):
                out[i] = raw[k : k + n + 1]
        return out

    def counter(self, uuid: int, ts: bytes, value: float) -> None:
        """A counter value at ``ts`` (``stamp``): ``value`` must be finite. A value equal to the one
        before it on its track is left out: Perfetto draws a counter as steps, each value held until
        the next, so the repeat changes nothing drawn or queried as a step (docs/ARCHITECTURE.md)."""
        if self._last.get(uuid) == value:
            self.repeats += 1
            return
        self._last[uuid] = value
        tail = self._counters[uuid]
        shape = (len(ts), len(tail))
        pack = self._packs.get(shape)
        if pack is None:  # the packet in one struct.pack: its key, size (< 128: one byte), the rest
            pack = self._packs[shape] = struct.Struct(f"<BB{shape[0]}s{shape[1]}sd").pack
        self._buf.append(pack(0x0A, shape[0] + shape[1] + 8, ts, tail, value))
        self.n += 1

    def counters(self, uuid: int, t: np.ndarray, values: np.ndarray) -> None:
        """A counter track's values at times ``t`` (seconds; the values finite): the packets ``counter``
        writes one by one (repeats left out), made as rows of byte arrays (an 8-hour track holds
        ~300,000), a row per length of the timestamp's varint, and written at once (not held)."""
        import numpy as np

        values = np.asarray(values, dtype=np.float64)
        if not len(values):
            return
        changed = np.empty(len(values), dtype=bool)
        changed[0] = self._last.get(uuid) != values[0]
        np.not_equal(values[1:], values[:-1], out=changed[1:])
        if not changed.all():
            self.repeats += len(values) - int(changed.sum())
            t, values = t[changed], values[changed]
        if not len(values):
            return
        self._last[uuid] = float(values[-1])
        ns = _ns(t)
        size = _varint_sizes(ns)
        tail = np.frombuffer(self._counters[uuid], dtype=np.uint8)
        value = np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(-1, 8)
        width = 3 + size + len(tail) + 8
        out = np.empty(int(width.sum()), dtype=np.uint8)
        start = np.cumsum(width) - width
        for n in distinct(size).tolist():
            at = np.flatnonzero(size == n)
            rows = np.empty((len(at), 3 + n + len(tail) + 8), dtype=np.uint8)
            rows[:, 0] = 0x0A  # Trace.packet, then its size (< 128: one byte), the timestamp's key
            rows[:, 1] = rows.shape[1] - 2
            rows[:, 2] = 0x40
            _put_varints(rows, 3, ns[at], n)
            rows[:, 3 + n : -8] = tail
            rows[:, -8:] = value[at]
            if len(at) == len(ns):
                out = rows.reshape(-1)
            else:  # each row where its packet goes (the times' order)
                out[(start[at, None] + np.arange(rows.shape[1])).reshape(-1)] = rows.reshape(-1)
        self.flush()  # (the packets before these first: a name is defined before its use)
        self.fh.write(out.data)
        self.n += len(ns)

    def name(self, name: str) -> tuple[bytes, bytes]:
        """(TrackEvent.name_iid field, the InternedData to send with it the first time, else b"")."""
        got = self._iids.get(name)
        if got is not None:
            return got, b""
        iid = len(self._iids) + 1
        got = self._iids[name] = vint(10, iid)
        return got, blob(12, blob(2, vint(1, iid) + text(2, name)))  # InternedData.event_names

    def event(self, uuid: int, ts: bytes, kind: int, name: str | None = None, extra: bytes = b"") -> None:
        """A slice begin/end or instant on track ``uuid``; ``extra``: more TrackEvent fields (``debug_args``)."""
        tail, interned = self._tail(uuid, kind, name, extra)
        if interned:  # the name's first use: its definition goes with this event
            self._put(ts + SEQ + interned + tail[len(SEQ) :])
        else:
            size = len(ts) + len(tail)
            self._buf.append(
                b"".join((b"\x0a", _SIZE[size], ts, tail)) if size < 128 else self._packet(ts + tail)
            )
        self.n += 1

    def slice(self, uuid: int, ts0: bytes, ts1: bytes, name: str, extra: bytes = b"") -> None:
        """A complete slice on track ``uuid``: ``event``'s begin (``extra``: its ``debug_args``) and end,
        the begin's packet made here, not kept (a phase's or marker's arguments are its own: kept, an
        8-hour run's would hold ~10 MB until the end)."""
        iid, interned = self.name(name)
        self._put(ts0 + SEQ + interned + _NEEDS_STATE + blob(11, _BEGIN + vint(11, uuid) + iid + extra))
        self.n += 1
        self.event(uuid, ts1, SLICE_END)

    def _tail(self, uuid: int, kind: int, name: str | None, extra: bytes) -> tuple[bytes, bytes]:
        """(an event's packet after its timestamp, the InternedData its name needs first). The former is
        the same for every event of one (track, type, name, extra): it is made once (stack slices and
        instants repeat a few hundred such events hundreds of thousands of times)."""
        key = (uuid, kind, name, extra)
        tail = self._tails.get(key)
        if tail is not None:
            return tail, b""
        te = vint(9, kind) + vint(11, uuid)
        interned = b""
        if name is not None:
            iid, interned = self.name(name)
            te += iid
        tail = SEQ + _NEEDS_STATE + blob(11, te + extra)
        if len(self._tails) < _KEPT:  # (a slice's args are its own: the cache stays bounded)
            self._tails[key] = tail
        return tail, interned

    def events(
        self, key: Hashable, uuid: int, ts: bytes, events: Sequence[tuple[int, str | None, bytes]]
    ) -> None:
        """``event`` of each (type, name, extra) of ``events``, all on track ``uuid`` at ``ts``; ``key``:
        the caller's name for this track's sequence of them (the packets are made once per key: a
        stack's slices ending and beginning from one sample to the next, and its instant, repeat)."""
        segments = self._runs.get((key, len(ts)))
        if segments is None:
            if any(name is not None and name not in self._iids for _, name, _ in events):
                for kind, name, extra in events:  # (a name's first use)
                    self.event(uuid, ts, kind, name, extra)
                return
            tails = [self._tail(uuid, kind, name, extra)[0] for kind, name, extra in events]
            # the packets with the timestamp left out, cut where it goes: ts.join(segments) makes them
            segments = []
            prev = b""
            for tail in tails:
                segments.append(prev + b"\x0a" + varint(len(ts) + len(tail)))
                prev = tail
            segments.append(prev)
            if len(self._runs) >= _KEPT:
                self._runs.clear()
            self._runs[(key, len(ts))] = segments
        if events:
            self._buf.append(ts.join(segments))
            self.n += len(events)

    def flush(self, at_least: int = 1) -> None:
        if len(self._buf) >= at_least:
            self.fh.write(b"".join(self._buf))
            self._buf.clear()
