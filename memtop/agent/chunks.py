"""A framework trace parsed and re-encoded in pieces, each in a worker process of its own.

A 5 s PyTorch trace of a busy loop is ~100 MB of JSON and ~650 000 events: parsing it (json.loads)
and encoding it again took memtop 6-9 s in one thread (bench/RESULTS.md). The events array is cut
into pieces at event boundaries and each piece is parsed, shifted and encoded by its own process.

Where to cut: Kineto writes every event of ``traceEvents`` starting on a line of its own, ``\\n  {``.
A raw newline never occurs inside a JSON string, so such a cut is between two values or inside an
object's whitespace; a cut of the second kind leaves a piece that is not a list of whole values, and
that piece's parse fails. Each piece is parsed as a list of its own, the last one up to the array's
end (``raw_decode``), and the document with that array emptied (the head before it, the tail after
it) is parsed too: when every parse succeeds, the pieces' lists joined are the array of the whole
document, exactly. A trace laid out otherwise (JAX's) has no such cuts and is one piece.

The pieces stay in their workers between the two steps of the merge (marks and pids first, then the
events shifted by the offset those give, encoded): only a few marks and the encoded text cross back.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

CUT = b"\n  {"  # where Kineto starts an event
MARK = b'"memtop.clock.'  # (memtop.agent.injob.MARK as JSON text: the pieces that hold memtop's marks)
EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
PARALLEL_BYTES = 8 << 20  # a trace smaller than this is parsed here: a worker's start costs more
PIECE_BYTES = 4 << 20  # no piece smaller than this (a process per 4 MB at least)


class Malformed(Exception):
    """The trace is not the JSON document it must be (one line for memtop's warning)."""


def cuts(payload: bytes, parts: int) -> tuple[int, list[int]]:
    """The events array's first byte (after its ``[``) and where to cut it into about ``parts``
    pieces of equal size (event starts, increasing; none if it cannot be cut)."""
    m = EVENTS.search(payload)
    if m is None:
        raise Malformed("the framework's trace has no traceEvents")
    start, size = m.end(), len(payload) - m.end()
    at: list[int] = []
    for i in range(1, parts):
        c = payload.find(CUT, start + size * i // parts)
        if c < 0:
            break
        if not at or c > at[-1]:
            at.append(c)
    return start, at


def parse_piece(piece: bytes, last: bool) -> tuple[list, str]:
    """A piece of the events array: its events (objects with a string ``ph``) and, for the last
    piece, the document's text after the array."""
    try:
        if not last:
            body = piece.rstrip()
            if not body:
                return [], ""
            if not body.endswith(b","):
                raise Malformed("the framework's trace: not JSON")
            values = json.loads(b"[" + body[:-1] + b"]")
            rest = ""
        else:
            values, rest = _last(piece)
    except (ValueError, RecursionError):  # invalid UTF-8 and 5 000-digit integers are ValueErrors
        raise Malformed("the framework's trace: not JSON") from None
    return [e for e in values if isinstance(e, dict) and isinstance(e.get("ph"), str)], rest


def _last(piece: bytes) -> tuple[list, str]:
    """The last piece: its values and the text after the array. Kineto closes the array at the
    start of a line: cut there, a parse that succeeds is the array's (a wrong cut leaves brackets
    unbalanced); else the array's end is found by parsing it whole (slower: str, raw_decode)."""
    end = piece.rfind(b"\n]")
    if end >= 0:
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(b"[" + piece[:end] + b"]"), piece[end + 2 :].decode("utf-8")
    text = "[" + piece.decode("utf-8")
    values, at = json.JSONDecoder().raw_decode(text)
    return values, text[at:]


def check_skeleton(payload: bytes, start: int, rest: str) -> None:
    """The document around the events array must be a JSON object whose traceEvents is that array."""
    try:
        doc = json.loads(payload[:start] + b"]" + rest.encode("utf-8"))
    except (ValueError, RecursionError):
        raise Malformed("the framework's trace: not JSON") from None
    if not isinstance(doc, dict) or doc.get("traceEvents") != []:
        raise Malformed("the framework's trace has no traceEvents")


class Local:
    """A piece parsed in this process."""

    def __init__(self, piece: bytes, last: bool) -> None:
        self.marks = MARK in piece
        self.events, self.rest = parse_piece(piece, last)

    def send(self, fn: Callable, *args: object) -> None:
        self._answer = fn(self.events, *args)

    def receive(self) -> Any:
        return self._answer

    def close(self) -> None:
        self.events = []


class Remote:
    """A piece parsed by a worker process, which keeps its events for the calls that follow."""

    def __init__(self, worker: Worker, piece: bytes, last: bool) -> None:
        self.worker = worker
        self.marks = MARK in piece
        worker.conn.send_bytes(piece)
        worker.conn.send(last)
        self._parsed = False
        self.rest = ""

    def wait(self) -> None:
        if not self._parsed:
            self.rest = self._get()
            self._parsed = True

    def _get(self) -> Any:
        try:
            ok, answer = self.worker.conn.recv()
        except (EOFError, OSError):
            raise Malformed("a worker parsing the framework's trace died") from None
        if not ok:
            raise Malformed(answer)
        return answer

    def send(self, fn: Callable, *args: object) -> None:
        self.wait()
        self.worker.conn.send((fn, args))

    def receive(self) -> Any:
        return self._get()

    def close(self) -> None:
        self.worker.close()


Piece = Local | Remote


def split(payload: bytes, workers: list[Worker]) -> list[Piece]:
    """The trace's events array in pieces: parsed here when small or without workers, else each by
    one of ``workers`` (all are closed but those the pieces hold). A trace whose cuts fall inside
    an event (laid out unlike Kineto's) is parsed again here, whole. The document around the array
    is checked."""
    parts = min(len(workers), len(payload) // PIECE_BYTES) if len(payload) >= PARALLEL_BYTES else 1
    try:
        if parts > 1:
            with contextlib.suppress(Malformed):
                return _pieces(payload, *cuts(payload, parts), workers)
        return _pieces(payload, *cuts(payload, 1), [])
    finally:
        close_all(workers)


def _pieces(payload: bytes, start: int, at: list[int], workers: list[Worker]) -> list[Piece]:
    bounds = [start, *at, len(payload)]
    pieces: list[Piece] = []
    try:
        for i in range(len(bounds) - 1):
            piece, last = payload[bounds[i] : bounds[i + 1]], i == len(bounds) - 2
            pieces.append(Remote(workers.pop(), piece, last) if workers else Local(piece, last))
        for p in pieces:
            if isinstance(p, Remote):
                p.wait()
        check_skeleton(payload, start, pieces[-1].rest)
    except BaseException:
        for p in pieces:
            p.close()
        raise
    return pieces


class Worker:
    """A process that parses one piece, then answers the calls made on its events, then exits."""

    def __init__(self, ctx: Any) -> None:
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(theirs,), name="memtop-trace-parse", daemon=True)
        self.proc.start()
        theirs.close()

    def close(self) -> None:
        """Hang up: the worker exits (waited for by reap, off the way to the file)."""
        with contextlib.suppress(OSError):
            self.conn.close()

    def reap(self) -> None:
        self.close()
        self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def start_workers(n: int | None = None) -> list[Worker]:
    """Worker processes, started now (their interpreter's start overlaps the capture's window).
    Spawned, not forked: the live view that asks has threads of its own."""
    if n is None:
        n = min(8, (os.cpu_count() or 1) // 2)
        n = n if n >= 2 else 0  # (one worker would only parse what this process can)
    ctx = multiprocessing.get_context("spawn")
    return [Worker(ctx) for _ in range(n)]


def _serve(conn: Connection) -> None:
    """A worker's life: one piece, parsed; then calls on its events until memtop hangs up."""
    # a worker of the live view shares its terminal: nothing it could print may reach the screen
    # (its failures go back through the pipe)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    import memtop.outputs.export  # noqa: F401  (what encoding a piece needs, imported while memtop waits)

    try:
        piece, last = conn.recv_bytes(), conn.recv()
        try:
            events, rest = parse_piece(piece, last)
        except Malformed as e:
            conn.send((False, str(e)))
            return
        del piece
        conn.send((True, rest))
        while True:
            fn, args = conn.recv()
            try:
                conn.send((True, fn(events, *args)))
            except Exception as e:  # memtop's own code on any JSON: a bug, said as one line
                conn.send((False, f"{type(e).__name__}: {str(e)[:200]}"))
    except (EOFError, OSError, KeyboardInterrupt):
        return


def close_all(workers: list[Worker]) -> None:
    """Hang up on each worker of the list, emptied (those a piece holds are closed with it)."""
    while workers:
        workers.pop().close()


def reap_all(workers: list[Worker]) -> None:
    for w in workers:
        w.reap()
