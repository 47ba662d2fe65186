"""CPU seconds per test, for finding where the suite's time goes on a shared machine (wall time there
says more about the neighbours than about the test).

    PYTHONPATH=bench CPU_OUT=/tmp/cpu pytest -q -p pytest_cpu ...
    python3 bench/pytest_cpu.py /tmp/cpu        # the table: CPU, wall, wall - CPU per test

Each test's CPU is the worker's own (every thread) plus that of the processes it started and reaped,
tmux servers included: the worker makes itself a child subreaper, so a daemonised tmux server (and the
`memtop` it ran) comes back to the worker when it exits and is reaped here. A measuring aid, not part of
the suite: it reaps zombie children after each test, which a test that waits on a child after the test
ended (none should) would miss.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

_PR_SET_CHILD_SUBREAPER = 36


def _cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _children() -> list[tuple[int, str, str]]:
    """(pid, state, name) of this process's children."""
    me, found = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        if int(fields[1]) == me:
            found.append((int(d.name), fields[0], name))
    return found


def _reap_orphans() -> None:
    """Reaps this process's exited children (orphaned tmux servers come here as zombies), after
    giving a tmux server told to exit by the test's teardown a few seconds to do so."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(s != "Z" and n.startswith("tmux") for _, s, n in _children()):
        time.sleep(0.05)
    for pid, state, _ in _children():
        if state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def pytest_configure(config):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, w0 = _cpu(), time.monotonic()
    yield
    _reap_orphans()
    c1, w1 = _cpu(), time.monotonic()
    out = Path(os.environ.get("CPU_OUT", "/tmp/pytest_cpu"))
    out.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(out / f"{worker}.jsonl", "a") as f:
        f.write(json.dumps({"id": item.nodeid, "cpu": round(c1 - c0, 3), "wall": round(w1 - w0, 3)}) + "\n")


def _table(out: Path, n: int = 60) -> None:
    rows = [json.loads(line) for p in sorted(out.glob("*.jsonl")) for line in p.read_text().splitlines()]
    rows.sort(key=lambda r: -r["cpu"])
    total_cpu = sum(r["cpu"] for r in rows)
    total_wall = sum(r["wall"] for r in rows)
    print(f"{len(rows)} tests, CPU {total_cpu:.1f} s, wall (summed over workers) {total_wall:.1f} s")
    for r in rows[:n]:
        print(f"{r['cpu']:8.2f} {r['wall']:8.2f} {r['wall'] - r['cpu']:8.2f}  {r['id']}")


if __name__ == "__main__":
    _table(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 60)
