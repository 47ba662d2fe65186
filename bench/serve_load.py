"""`memtop serve` under load and noise: many concurrent keep-alive clients, then clients that reset.

Starts a real `memtop serve --demo` on a loopback port (stderr to a file), waits until /-/ready, then:
1. --clients keep-alive connections opened at once, each sending --requests GETs of --path one after
   another; latency per request (the first includes the connect); a client whose request takes
   longer than --timeout counts as timed out and stops.
2. --resets connections that send half a request and close with an RST (SO_LINGER 0), then as many
   that send a whole request and reset before reading the answer.
Then stops the server with SIGTERM and counts its stderr lines beyond the start-up line.

usage: python bench/serve_load.py [--clients 300] [--requests 20] [--resets 200] [--path /metrics]
prints one JSON line: p50/p99/max in ms, requests, timeouts, errors, resets, stderr lines, exit code.
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


async def _one(host: str, port: int, path: str, n: int, timeout: float) -> tuple[list[float], str]:
    """One keep-alive client: n requests on one connection. Returns latencies (s) and its end."""
    lat: list[float] = []
    req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return lat, "timeout"
    except OSError:
        return lat, "error"
    try:
        for _ in range(n):
            try:
                async with asyncio.timeout(timeout):
                    writer.write(req)
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    await reader.readexactly(length)
            except TimeoutError:
                return lat, "timeout"
            except (OSError, asyncio.IncompleteReadError, StopIteration):
                return lat, "error"
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            t0 = t1
        return lat, "ok"
    finally:
        writer.close()


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
            out = asyncio.run(load(port, a.clients, a.requests, a.path, a.timeout))
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
