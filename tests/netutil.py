"""Loopback helpers for the serve/cluster tests: free ports from a range other helpers avoid, and
processes that are always killed."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request


def _worker_ports() -> range:
    """1 500 ports of this xdist worker's own, below Linux's ephemeral range (32768-60999): a port
    picked there could be taken by any test's client socket between the check and the server's bind
    (test_serve once met "Address already in use" so), and two workers never race for one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = 20000 + 1500 * (int(worker) % 8 if worker.isdigit() else 0)
    return range(start, start + 1500)


PORTS = _worker_ports()


def free_ports(n: int, ports: range = PORTS) -> list[int]:
    """n free loopback ports of ``ports`` (bench/cluster_bench.py asks for up to 4 000 from its own range)."""
    got: list[int] = []
    for port in random.sample(ports, len(ports)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        got.append(port)
        if len(got) == n:
            return got
    raise RuntimeError("no free loopback ports")


def memtop(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memtop", *argv], **kw)


def wait_ready(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port} not ready")


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
