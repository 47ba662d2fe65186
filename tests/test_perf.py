"""perf_event_open: software counters for real; the PMU path on recorded read buffers."""

from __future__ import annotations

import struct
import subprocess
import sys
import time

import psutil
import pytest
from memtop.collectors import perf

from memtop.core.model import CapState


def test_group_read_parsing_and_multiplex_scaling():
    # A hardware group read as the kernel returns it (nr, time_enabled, time_running, values...):
    # 5 counters, counted 60 % of the time (multiplexed).
    buf = struct.pack("=8Q", 5, 1_000_000, 600_000, 3_000_000, 6_000_000, 90_000, 9_000, 1_200)
    values, enabled, running = perf.parse_group_read(buf)
    assert values == [3_000_000, 6_000_000, 90_000, 9_000, 1_200]
    scaled = perf.scaled(values, enabled, running)
    assert scaled[0] == pytest.approx(5_000_000) and scaled[1] == pytest.approx(10_000_000)
    d = perf.derived(dict(zip(["cycles", "instructions", "cache-references", "cache-misses"], scaled)))
    assert d["ipc"] == pytest.approx(2.0) and d["cache-miss-rate"] == pytest.approx(0.1)


def test_attr_layout():
    a = perf.pack_attr(1, 1)
    assert len(a) == perf.ATTR_SIZE
    type_, size, config = struct.unpack_from("=IIQ", a)
    assert (type_, size, config) == (1, 136, 1)


@pytest.fixture
def watched():
    """(child, a PerfCollector not yet sampled on it): a child process running ``code``, its stdin
    and stdout piped (killed afterwards)."""
    started = []

    def start(code: str) -> tuple[subprocess.Popen, perf.PerfCollector]:
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        col = perf.PerfCollector(pids=(child.pid,))
        started.append((child, col))
        col.start()
        return child, col

    yield start
    for child, col in started:
        col.stop()
        child.kill()
        child.wait()


def _cpu(pid: int) -> float:
    """CPU seconds ``pid`` has used, all its threads (the kernel's count, which perf is checked by)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _until(cond, timeout: float = 60.0) -> None:
    """Waits for ``cond`` (the bound is for a loaded machine, not a pace)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "not reached in time"
        time.sleep(0.05)


TICK = 0.02  # /proc counts CPU time in 10 ms ticks: two readings, each up to one tick short


def _counted(col: perf.PerfCollector, now: float, since: tuple[float, float]) -> tuple[float, float, float]:
    """(CPU-seconds perf counted since the sample at ``since`` (its (cpu before, cpu after)), the
    least and the most the kernel's count allows): a sample at virtual ``now``, one second on."""
    pid = col.pids[0]
    before = _cpu(pid)
    (s,) = col.sample(now)
    after = _cpu(pid)
    return s.get("task-clock") * 1.0, before - since[1] - TICK, after - since[0] + TICK


def _baseline(col: perf.PerfCollector, now: float) -> tuple[float, float]:
    """A sample at virtual ``now`` that later ones are compared with: (cpu before it, cpu after)."""
    pid = col.pids[0]
    before = _cpu(pid)
    col.sample(now)
    return before, _cpu(pid)


def test_software_counters_for_real_on_a_busy_child(watched):
    """task-clock is the CPU time the kernel counts for the process between two samples (virtual
    sample times one second apart: the rate is then the CPU-seconds themselves)."""
    _, col = watched("while True: pass")
    since = _baseline(col, 0.0)
    _until(lambda: _cpu(col.pids[0]) > since[1] + 0.1)  # however long a loaded machine takes
    used, least, most = _counted(col, 1.0, since)
    assert 0.1 - TICK <= least <= used <= most
    (s,) = col.sample(2.0)
    assert s.get("context-switches") is not None
    assert any(c.ok for c in col.capabilities())


def test_threads_are_listed_every_scan_interval(watched):
    """A thread started after a scan is counted from the next scan on (SCAN_EVERY_S), not before."""
    child, col = watched(
        "import sys, threading\nprint('ready', flush=True)\nsys.stdin.readline()\n"
        "threading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\n"
        "print('on', flush=True)\nsys.stdin.readline()"
    )
    pid = col.pids[0]
    assert child.stdout.readline() == b"ready\n"  # (its start-up's CPU is not in what follows)
    since = _baseline(col, 0.0)  # a scan: the main thread only
    child.stdin.write(b"go\n")
    child.stdin.flush()
    assert child.stdout.readline() == b"on\n"  # the busy thread runs
    _until(lambda: _cpu(pid) > since[1] + 0.2)
    used, _, _ = _counted(col, 1.0, since)
    assert used < 0.05  # between scans: only the main thread, blocked on its stdin, is counted
    since = _baseline(col, perf.SCAN_EVERY_S)  # the scan opens the busy thread's counters
    _until(lambda: _cpu(pid) > since[1] + 0.1)
    used, least, most = _counted(col, perf.SCAN_EVERY_S + 1.0, since)
    assert 0.1 - TICK <= least <= used <= most  # counted now


def test_no_pmu_path_for_real_or_hardware_counts(watched):
    _, col = watched("import time; time.sleep(30)")
    col.sample(0.0)  # (opens the counters it can)
    if col.hw_ok:
        pytest.skip("this machine has a CPU PMU: the hardware path is live here")
    hw = [c for c in col.capabilities() if c.name == "hardware counters"]
    assert hw and hw[0].state is CapState.UNSUPPORTED and "PMU" in hw[0].detail


def test_explain_messages():
    import errno

    st, reason, fix = perf.explain(OSError(errno.EACCES, "denied"), False)
    assert st is CapState.DENIED and "perf_event_paranoid" in reason and "sysctl" in fix
    assert perf.explain(OSError(errno.ESRCH, "gone"), False)[1] == "process gone"
