"""A framework trace parsed in pieces by worker processes (memtop.agent.chunks): the merge's result
is the one a single parse gives, for Kineto's layout and for any other."""

from __future__ import annotations

import json

import pytest

from memtop.agent import chunks, injob
from memtop.agent.merge import Capture, Encoded, align
from memtop.core.errors import UserError

PID = 77


def kineto(events: list[dict], marks: list) -> bytes:
    """A document laid out as Kineto writes it: one event per block starting ``\\n  {``."""
    body = ",\n".join("  " + json.dumps(e, indent=2).replace("\n", "\n  ") for e in events)
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0}\n  ],\n  "traceEvents": [\n'
        + body
        + '\n],\n  "traceName": "/tmp/x.json"\n}'
    ).encode()


def trace(n: int) -> tuple[list[dict], list]:
    marks = [[f"{injob.MARK}{k}", 1_000_000 + k * 1000, 1_000_000 + k * 1000 + 4000] for k in range(6)]
    events: list[dict] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"{injob.MARK}{k}",
            "pid": PID,
            "tid": 2,
            "ts": a / 1000 + 5e12 + 1,
            "dur": 2.0,
        }
        for k, (_, a, _) in enumerate(marks)
    ]
    events.append({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}})
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 7}",
                "pid": 0,
                "tid": 7,
                "ts": 5e12 + 2000 + i,
                "dur": 0.5,
                "args": {"grid": [1, 2, 3], "stream": 7},
            }
        )
        events.append(
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": PID, "tid": PID, "ts": 5e12 + 1990 + i, "id": i}
        )
    return events, marks


def merged(payload: bytes, marks: list, workers: list) -> tuple[list, dict, set]:
    cap = Capture.parse(
        PID, {"clock": marks, "window": [1.0, 2.0], "warnings": [], "framework": "torch"}, payload, workers
    )
    try:
        enc = Encoded([(cap, align(cap))])
        out = [e for text, _ in enc for e in json.loads(f"[{text}]")]
        return out, dict(enc.counts), {type(p).__name__ for p in cap.pieces}
    finally:
        cap.close()


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of a few kB: a small trace is parsed by the workers as a large one would be."""
    monkeypatch.setattr(chunks, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(chunks, "PIECE_BYTES", 2000)


def test_pieces_parsed_by_workers_merge_as_one_parse_does(small_pieces):
    events, marks = trace(300)
    payload = kineto(events, marks)
    workers = chunks.start_workers(3)
    try:
        assert len(chunks.cuts(payload, 3)[1]) == 2  # (three pieces)
        apart, counts, kinds = merged(payload, marks, workers)
    finally:
        chunks.reap_all(workers)
    whole, whole_counts, _ = merged(payload, marks, [])
    assert kinds == {"Remote"} and apart == whole and counts == whole_counts
    assert counts["kernel"] == 300 and len(apart) == len(events)
    # on CLOCK_MONOTONIC (the marks' offset, 5e12 µs, taken off) and the ranks' flow ids kept apart
    kernel = next(e for e in apart if e.get("cat") == "kernel")
    assert abs(kernel["ts"] - 2000) < 5 and kernel["pid"] >= 2_000_000
    assert {e["id"] for e in apart if e["ph"] == "s"} == {f"0:{i}" for i in range(300)}


def test_a_cut_inside_an_event_falls_back_to_one_parse(small_pieces):
    """Another layout where ``\\n  {`` also opens nested objects: the pieces fail to parse, and the
    whole document is parsed here instead, to the same events."""
    events, marks = trace(200)
    body = ",\n".join(json.dumps(e).replace('"args": {', '"args":\n  {') for e in events)
    payload = ('{"traceEvents": [\n' + body + "\n]}").encode()
    workers = chunks.start_workers(2)
    try:
        apart, counts, kinds = merged(payload, marks, workers)
    finally:
        chunks.reap_all(workers)
    assert kinds == {"Local"} and counts["kernel"] == 200 and len(apart) == len(events)


@pytest.mark.parametrize(
    "doc",
    [
        b'{"traceEvents": [\n  {"ph": "X"},\n  {"ph": "X",\n  ]}',  # a piece that is not JSON
        b'{"traceEvents": [\n  {"ph": "X"}\n], "tail": }',  # the document around the array
        b'[{"traceEvents": []}]',  # not an object
    ],
)
def test_a_malformed_trace_is_one_line(small_pieces, doc):
    workers = chunks.start_workers(2)
    try:
        with pytest.raises(UserError, match="not JSON|no traceEvents") as e:
            merged(doc, [], workers)
    finally:
        chunks.reap_all(workers)
    assert "\n" not in str(e.value)
    assert all(not w.proc.is_alive() for w in workers)
