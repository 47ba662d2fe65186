"""Hostile nodes and a hostile Prometheus on loopback (real sockets): each port plays one behaviour.

Used by tests/test_fleet_boundary.py and bench/fleet_hostile.py. Every answer comes from a real
snapshot (`memtop snapshot --json --demo`) or a real Prometheus answer shape, then made hostile:
escape sequences in every string, wrong types, huge numbers, deep nesting, redirects to another
origin (127.0.0.2, which records what reaches it), bodies of 60 MB, one byte a second.
"""

from __future__ import annotations

import copy
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

from hostile import HOSTILE

ESC_ALL = "".join(HOSTILE[:9])  # OSC 0, OSC 52, OSC 8, CSI, DCS, bidi, NUL, C1 CSI, bad UTF-8


def _walk_strings(v: object, s: str) -> object:
    if isinstance(v, str):
        return s
    if isinstance(v, dict):
        return {k: _walk_strings(x, s) for k, x in v.items()}
    if isinstance(v, list):
        return [_walk_strings(x, s) for x in v]
    return v


def snapshot_variants(real: dict) -> dict[str, object]:
    """name -> the JSON value a hostile node answers with (bytes: sent as they are)."""
    esc = _walk_strings(real, ESC_ALL)
    assert isinstance(esc, dict)
    esc_keys = copy.deepcopy(esc)
    esc_keys["gpus"][0]["gauges"] = {ESC_ALL: 1.0}
    esc_keys["gpus"][0]["shares"] = {ESC_ALL: 0.5, "compute": 0.5}
    esc_keys["gpus"][0]["job"] = {"slurm_job_id": ESC_ALL, "pod": ESC_ALL, ESC_ALL: "x"}
    types = copy.deepcopy(real)
    g = types["gpus"][0]
    g.update(name=["x"], uuid={"a": 1}, phase=7, band=None, gauges=[1], shares="x", verdict=[], job=1)
    types.update(hostname=3, mode=[], time="now", processes={"pid": "x"}, notes=[1, {}])
    huge = copy.deepcopy(real)
    huge["gpus"][0]["gauges"] = {"sm": 1e308, "util": 10**300, "power_w": -1e308}
    huge["gpus"][0]["shares"] = {"compute": 1e308, "idle": 10**300}
    huge["time"] = 10**300
    out: dict[str, object] = {
        "escapes": esc,
        "escape-keys": esc_keys,
        "types": types,
        "huge": huge,
        "index-osc52": {**real, "gpus": [{**real["gpus"][0], "index": HOSTILE[1] + HOSTILE[0] + HOSTILE[3]}]},
        "index-300-digits": {**real, "gpus": [{**real["gpus"][0], "index": 10**300}]},
        "index-dict": {**real, "gpus": [{**real["gpus"][0], "index": {"a": 1}}]},
        "index-float": {**real, "gpus": [{**real["gpus"][0], "index": 0.5}]},
        "many-gpus": {**real, "gpus": [{**real["gpus"][0], "index": i} for i in range(100)]},
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "deep-dict": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        "deep-under-cap": b"[" * 15_000 + b"]" * 15_000,  # fewer brackets than the object cap
        "object-bomb": b'{"gpus":[' + b"{}," * 300_000 + b"{}]}",
        "not-json": HOSTILE[0].encode() + b"\xff\xfe",
        "long-digits": b'{"gpus":[{"index":' + b"9" * 5000 + b"}]}",
    }
    return out


def prom_variants() -> dict[str, bytes]:
    """Prometheus answers (the same body for every query)."""

    def ok(result: list) -> bytes:
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    labels = {"instance": ESC_ALL, "hostname": ESC_ALL, "gpu": "0", "uuid": ESC_ALL, "phase": "compute"}
    return {
        "escapes": ok([{"metric": {**labels, "name": ESC_ALL, "pod": ESC_ALL}, "value": [1.0, "0.5"]}]),
        "gpu-label-osc": ok([{"metric": {**labels, "gpu": HOSTILE[1]}, "value": [1.0, "1"]}]),
        "labels-list": ok([{"metric": {"instance": ["a"], "gpu": ["0"]}, "value": [1.0, "1"]}]),
        "labels-dict": ok([{"metric": {"gpu": {"x": 1}}, "value": [1.0, "1"]}]),
        "no-value": ok([{"metric": labels}]),
        "value-types": ok([{"metric": labels, "value": ["x", 1]}]),
        "value-nan": ok(
            [{"metric": labels, "value": [1.0, "NaN"]}, {"metric": labels, "value": [1.0, "+Inf"]}]
        ),
        "empty-dicts": ok([{}] * 1000),
        "error": json.dumps({"status": "error", "error": ESC_ALL}).encode(),
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "result-not-list": json.dumps({"status": "success", "data": {"result": {"a": 1}}}).encode(),
        "huge-values": ok([{"metric": labels, "value": [1e308, "1e308"]}]),
    }


def bomb_60mb() -> bytes:
    """60 MB of `{"status":"success","data":{"result":[{},{},...]}}` (the issue's memory bomb)."""
    head, tail = b'{"status":"success","data":{"result":[', b"{}]}}"
    return head + b"{}," * (60_000_000 // 3) + tail


class Server:
    """A threaded TCP server on `host`, one port per behaviour; records every request's headers."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.seen: list[tuple[int, str, dict[str, str]]] = []  # (port, request line, headers)
        self._servers: list[socketserver.ThreadingTCPServer] = []
        self._lock = threading.Lock()

    def add(self, respond: Callable[[socket.socket, str], None]) -> int:
        """A port whose every request is answered by respond(sock, request_path)."""
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(30)
                buf = b""
                try:
                    while True:
                        while b"\r\n\r\n" not in buf:
                            chunk = sock.recv(65536)
                            if not chunk:
                                return
                            buf += chunk
                        head, _, buf = buf.partition(b"\r\n\r\n")
                        line, *rest = head.decode("latin-1").split("\r\n")
                        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
                        with owner._lock:
                            owner.seen.append((sock.getsockname()[1], line, headers))
                        respond(sock, line.split(" ")[1])
                except OSError:
                    return

        class S(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = S((self.host, 0), Handler)
        threading.Thread(target=srv.serve_forever, args=(0.1,), daemon=True).start()
        self._servers.append(srv)
        return srv.server_address[1]

    def close(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()


def send(body: bytes, status: str = "200 OK", length: bool = True, extra: str = "") -> Callable:
    def respond(sock: socket.socket, path: str) -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
        head += f"Content-Length: {len(body)}\r\n\r\n" if length else "Connection: close\r\n\r\n"
        sock.sendall(head.encode() + body)
        if not length:
            sock.shutdown(socket.SHUT_WR)

    return respond


def trickle(body: bytes, every: float = 1.0) -> Callable:
    """One byte every `every` seconds, headers included (a per-recv timeout never trips)."""

    def respond(sock: socket.socket, path: str) -> None:
        data = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
            time.sleep(every)

    return respond


def redirect(location: str) -> Callable:
    return send(b"", status="302 Found", extra=f"Location: {location}\r\n")


def jsonable(v: object) -> bytes:
    return v if isinstance(v, bytes) else json.dumps(v).encode("utf-8", "surrogateescape")


def ports_of(server: Server, answers: dict[str, object]) -> Iterator[tuple[str, int]]:
    for name, v in answers.items():
        yield name, server.add(send(jsonable(v)))
