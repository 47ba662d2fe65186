"""`memtop serve` under load and noise: many concurrent keep-alive clients, then clients that reset.

Starts a real `memtop serve --demo` on a loopback port (stderr to a file), waits until /-/ready, then:
1. --clients keep-alive connections opened at once, each sending --requests GETs of --path one after
   another; latency per request (the first includes the connect); a client whose request takes
   longer than --timeout counts as timed out and stops.
2. --resets connections that send half a request and close with an RST (SO_LINGER 0), then as many
   that send a whole request and reset before reading the answer.
Then stops the server with SIGTERM and counts its stderr lines beyond the start-up line.

usage: python bench/serve_load.py [--clients 300] [--requests 20] [--resets 200] [--path /metrics]
prints one JSON line: p50/p99/max in ms, requests, timeouts, errors, the server's CPU per request (its
own, from /proc: what it costs whoever else shares the machine) and the client's CPU, resets, stderr
lines, exit code. Another tree's serve: `cd /tmp && PYTHONPATH=OLD_TREE python .../serve_load.py`
(OLD_TREE with memtop/collectors and memtop/tui linked to its collectors/ and tui/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from netutil import free_ports, memtop, wait_ready  # noqa: E402


class _Client(asyncio.Protocol):
    """One keep-alive client as a bare protocol (cheaper than streams: the client shares the CPU with
    the server it measures): sends a request, waits for the whole answer, times it, sends the next."""

    def __init__(self, req: bytes, n: int, done: asyncio.Future) -> None:
        self.req, self.left, self.done = req, n, done
        self.buf = b""
        self.lat: list[float] = []
        self.t0 = time.perf_counter()  # the first request's time includes the connect

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.req)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        i = self.buf.lower().find(b"content-length:", 0, end)
        length = int(self.buf[i + 15 : self.buf.find(b"\r\n", i)])
        if len(self.buf) < end + 4 + length:
            return
        self.buf = b""
        t1 = time.perf_counter()
        self.lat.append(t1 - self.t0)
        self.t0 = t1
        self.left -= 1
        if self.left:
            self.transport.write(self.req)
        elif not self.done.done():
            self.done.set_result("ok")

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result("error")


async def _one(host: str, port: int, path: str, n: int, timeout: float) -> tuple[list[float], str]:
    """One keep-alive client: n requests on one connection. Returns latencies (s) and its end."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    client = _Client(req, n, done)
    try:
        async with asyncio.timeout(timeout):
            transport, _ = await loop.create_connection(lambda: client, host, port)
    except TimeoutError:
        return client.lat, "timeout"
    except OSError:
        return client.lat, "error"
    try:
        while not done.done():  # a timeout is one request taking longer than `timeout`
            seen = len(client.lat)
            await asyncio.wait([done], timeout=timeout)
            if not done.done() and len(client.lat) == seen:
                return client.lat, "timeout"
        return client.lat, done.result()
    finally:
        transport.close()


async def load(port: int, clients: int, requests: int, path: str, timeout: float) -> dict:
    t0 = time.perf_counter()
    runs = await asyncio.gather(*(_one("127.0.0.1", port, path, requests, timeout) for _ in range(clients)))
    wall = time.perf_counter() - t0
    lat = sorted(x for got, _ in runs for x in got)
    ends = [end for _, end in runs]

    def pct(q: float) -> float:
        return round(1000 * lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else float("nan")

    return {
        "requests": len(lat),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * lat[-1], 1) if lat else None,
        "timeouts": ends.count("timeout"),
        "errors": ends.count("error"),
        "wall_s": round(wall, 2),
    }


def resets(port: int, n: int) -> int:
    """n connections reset mid-request and n reset before reading the answer."""
    done = 0
    for whole in (False, True):
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + (b"\r\n" if whole else b""))
            s.close()  # linger 0: an RST, not a FIN
            done += 1
    return done


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=300)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--resets", type=int, default=200)
    ap.add_argument("--path", default="/metrics")
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    (port,) = free_ports(1)
    with tempfile.TemporaryFile() as err:
        p = memtop("serve", "--demo", "--port", str(port), stderr=err)
        try:
            wait_ready(port, timeout=60, proc=p)
            idle = _cpu_s(p.pid)
            mine = time.process_time()
            out = asyncio.run(load(port, a.clients, a.requests, a.path, a.timeout))
            out["client_cpu_s"] = round(time.process_time() - mine, 2)
            out["server_cpu_ms_per_request"] = round(
                1000 * (_cpu_s(p.pid) - idle) / max(1, out["requests"]), 3
            )
            out["resets"] = resets(port, a.resets)
            time.sleep(1.0)  # the handler threads finish with the reset sockets
        finally:
            p.terminate()
            out_rc = p.wait(30)
        err.seek(0)
        lines = err.read().decode(errors="replace").splitlines()
    out["stderr_lines_after_start"] = len([x for x in lines if not x.startswith("memtop serve: http")])
    out["exit"] = out_rc
    out.update(
        clients=a.clients, per_client=a.requests, path=a.path, machine=platform.node(), cpus=os.cpu_count()
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
