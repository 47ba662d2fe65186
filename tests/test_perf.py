"""perf_event_open: software counters for real; the PMU path on recorded read buffers."""

from __future__ import annotations

import struct
import subprocess
import sys
import time

import pytest
from memtop.collectors import perf

from memtop.model import CapState


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
    """A PerfCollector started on a child process running ``code`` (killed afterwards)."""
    started = []

    def start(code: str) -> perf.PerfCollector:
        child = subprocess.Popen([sys.executable, "-c", code])
        col = perf.PerfCollector(pids=(child.pid,))
        started.append((child, col))
        col.start()
        col.sample(time.monotonic())
        return col

    yield start
    for child, col in started:
        col.stop()
        child.kill()
        child.wait()


def test_software_counters_for_real_on_a_busy_child(watched):
    col = watched("while True: pass")
    time.sleep(1.0)
    (s,) = col.sample(time.monotonic())
    assert 0.1 < s.get("task-clock") < 1.3  # one busy thread (sharing 2 cores with the test run)
    assert s.get("context-switches") is not None
    assert any(c.ok for c in col.capabilities())


def test_threads_are_listed_every_scan_interval(watched):
    """A thread started after a scan is counted from the next scan on (SCAN_EVERY_S), not before."""
    col = watched(
        "import threading, time\ntime.sleep(1.5)\n"
        "threading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\ntime.sleep(30)"
    )
    time.sleep(0.6)  # the child's start-up is done
    t0 = time.monotonic()
    col.sample(t0)
    time.sleep(1.4)  # the busy thread has been running for about half a second
    (s,) = col.sample(t0 + 1.4)
    assert s.get("task-clock") < 0.05  # between scans: only the sleeping main thread is counted
    col.sample(t0 + perf.SCAN_EVERY_S)  # the scan opens the busy thread's counters
    time.sleep(0.5)
    (s,) = col.sample(t0 + perf.SCAN_EVERY_S + 0.5)
    assert s.get("task-clock") > 0.1  # counted now (a busy thread sharing 2 cores with the test run)


def test_no_pmu_path_for_real_or_hardware_counts(watched):
    col = watched("import time; time.sleep(30)")
    if col.hw_ok:
        pytest.skip("this machine has a CPU PMU: the hardware path is live here")
    hw = [c for c in col.capabilities() if c.name == "hardware counters"]
    assert hw and hw[0].state is CapState.UNSUPPORTED and "PMU" in hw[0].detail


def test_explain_messages():
    import errno

    st, reason, fix = perf.explain(OSError(errno.EACCES, "denied"), False)
    assert st is CapState.DENIED and "perf_event_paranoid" in reason and "sysctl" in fix
    assert perf.explain(OSError(errno.ESRCH, "gone"), False)[1] == "process gone"
