"""Check a recording's protobuf export against its JSON export (one JSON line; exit 1 if they differ).

1. The protobuf is parsed with Perfetto's own schema (``perfetto.protos...perfetto_trace_pb2``, from
   `pip install perfetto`): every packet must parse with no unknown field, every event name a track
   described before it, every interned name defined; counter values per track name, slices (begin
   = end per track) and instants are counted and compared with the JSON's (C args, B/X, i events).
2. With ``--tp``, both files are also loaded in Perfetto's TraceProcessor (it downloads its binary:
   needs network) and its counter / slice counts compared.

usage: python bench/perfetto_check.py TRACE.json TRACE.pftrace [--tp]
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def _unknown(msg) -> bool:  # type: ignore[no-untyped-def]
    if len(UnknownFieldSet(msg)):
        return True
    for fd, v in msg.ListFields():
        if fd.message_type is None:
            continue
        items = v if fd.is_repeated else [v]
        if any(_unknown(x) for x in items):
            return True
    return False


def proto_counts(path: str) -> dict:
    trace = Trace()
    with open(path, "rb") as fh:
        trace.ParseFromString(fh.read())
    names: dict[int, str] = {}
    iids: dict[int, str] = {}
    counters: Counter[str] = Counter()
    depth: Counter[int] = Counter()
    out = Counter()
    for p in trace.packet:
        out["unknown_fields"] += _unknown(p)
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            names[d.uuid] = d.name or d.thread.thread_name or d.process.process_name
        for e in p.interned_data.event_names:
            iids[e.iid] = e.name
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        out["undescribed_track"] += te.track_uuid not in names
        if te.HasField("name_iid"):
            out["undefined_iid"] += te.name_iid not in iids
        if te.type == TrackEvent.TYPE_COUNTER:
            counters[names.get(te.track_uuid, "?")] += 1
        elif te.type == TrackEvent.TYPE_SLICE_BEGIN:
            out["slices"] += 1
            depth[te.track_uuid] += 1
        elif te.type == TrackEvent.TYPE_SLICE_END:
            depth[te.track_uuid] -= 1
            out["unbalanced_end"] += depth[te.track_uuid] < 0
        elif te.type == TrackEvent.TYPE_INSTANT:  # (the metadata's instant has no JSON event)
            out["metadata" if iids.get(te.name_iid) == "memtop trace" else "instants"] += 1
    out["open_at_end"] = sum(1 for v in depth.values() if v)
    return {**out, "counters": sum(counters.values()), "by_counter_track": dict(counters)}


def json_counts(path: str) -> dict:
    """The JSON's counts; a counter's values counted as its steps (the protobuf leaves out a value
    equal to the one before it on its track: docs/ARCHITECTURE.md)."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    counters: Counter[str] = Counter()
    last: dict[tuple, object] = {}
    out = Counter()
    for ev in doc["traceEvents"]:
        ph = ev["ph"]
        if ph == "C":
            for k, v in ev["args"].items():
                name = ev["name"] if k == "value" else f"{ev['name']} {k}"
                if last.get((ev["pid"], name), not v) != v:  # (a track's first value: counted)
                    counters[name] += 1
                last[(ev["pid"], name)] = v
        elif ph in "BX":
            out["slices"] += 1
        elif ph == "i":
            out["instants"] += 1
    return {**out, "counters": sum(counters.values()), "by_counter_track": dict(counters)}


def tp_counts(path: str) -> dict:
    from perfetto.trace_processor import TraceProcessor

    tp = TraceProcessor(trace=path)
    try:
        q = {
            "counters": "SELECT count(*) AS n FROM counter",
            "slices": "SELECT count(*) AS n FROM slice WHERE dur != 0",
            "instants": "SELECT count(*) AS n FROM slice WHERE dur = 0",
        }
        return {k: next(iter(tp.query(v))).n for k, v in q.items()}
    finally:
        tp.close()


def main() -> None:
    js, pf = sys.argv[1:3]
    a, b = json_counts(js), proto_counts(pf)
    keys = ("counters", "slices", "instants", "by_counter_track")
    res: dict = {"json": a, "proto": b, "equal": {k: a.get(k) == b.get(k) for k in keys}}
    bad = [
        k
        for k in ("unknown_fields", "undescribed_track", "undefined_iid", "unbalanced_end", "open_at_end")
        if b.get(k)
    ]
    if "--tp" in sys.argv:
        res["tp"] = {"json": tp_counts(js), "proto": tp_counts(pf)}
        res["equal"]["tp"] = res["tp"]["json"] == res["tp"]["proto"]
    res["ok"] = all(res["equal"].values()) and not bad
    print(json.dumps(res))
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
