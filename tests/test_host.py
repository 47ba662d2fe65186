"""Host collector for real: psutil and /proc on processes the test starts."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil
from memtop.collectors.host import HostCollector

from memtop.core.model import HostSample

# children end by themselves after 20 s even if the test dies before it kills them
PARENT = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', c]) for c in ("
    "'import time\\nend = time.time() + 20\\nwhile time.time() < end: pass', "
    "'import time; time.sleep(20)')]\n"
    "time.sleep(20)\n"
)


def _until(cond, timeout: float = 60.0) -> None:
    """Waits for ``cond`` (the bound is for a loaded machine, not a pace)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "not reached in time"
        time.sleep(0.1)


@contextlib.contextmanager
def _process_tree(code: str, kids: int):
    """A Python process running ``code``, yielded once its ``kids`` children run their own code (not
    the parent's, as between fork and exec); the whole tree is killed on the way out."""
    p = subprocess.Popen([sys.executable, "-c", code])
    try:

        def started() -> bool:
            with contextlib.suppress(psutil.Error):
                ks = psutil.Process(p.pid).children()
                return len(ks) == kids and all(k.cmdline()[1:2] == ["-c"] for k in ks)
            return False

        _until(started)
        yield p
    finally:
        for k in psutil.Process(p.pid).children(recursive=True):
            k.kill()
        p.kill()
        p.wait()


def _collector(gpu_pids: dict[int, tuple[int, ...]], bus_ids: tuple[str, ...] = ()) -> HostCollector:
    h = HostCollector()
    h.start()
    h.set_gpu_processes(gpu_pids, bus_ids)
    return h


def test_gpu_process_and_its_children_as_workers():
    with _process_tree(PARENT, kids=2) as p:
        h = _collector({p.pid: (0,)}, ("00000000:00:06.0",))
        h.sample(time.monotonic())
        seen: list = []

        def busy_counted() -> bool:
            """The busy loop's CPU shows (sampled until then: a loaded machine may not run it for a
            while) and the sleeper sleeps, using none."""
            time.sleep(0.2)
            (s,) = h.sample(time.monotonic())
            ws = {"while" in w.cmdline: w for w in s.procs if w.worker_of == p.pid}
            seen[:] = [s, ws]
            return len(ws) == 2 and ws[True].cpu_pct > 0 and ws[False].cpu_pct == 0 and ws[False].state == "S"

        _until(busy_counted)
        s, ws = seen
        assert isinstance(s, HostSample) and len(s.cpu_pct) >= 1 and s.mem_total > 0
        main = next(x for x in s.procs if x.pid == p.pid)
        assert main.gpus == (0,) and main.worker_of is None and main.cmdline.startswith(sys.executable)
        assert len([x for x in s.procs if x.worker_of == p.pid]) == 2
        assert main.cpus_allowed and main.placement == "n/a"  # one NUMA node here
    (s,) = h.sample(time.monotonic())
    assert all(x.pid != p.pid for x in s.procs)  # a process that exits leaves the list


# (the thread waits for its child: killed, it is reaped at once and leaves /proc)
THREAD_PARENT = (
    "import subprocess, sys, threading, time\n"
    "threading.Thread(target=lambda: subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(20)']).wait()).start()\n"
    "time.sleep(20)\n"
)


def test_child_of_another_thread_is_found_and_kept():
    """Only the main thread's children are read every sample; other threads' every NUMA_EVERY_S."""
    with _process_tree(THREAD_PARENT, kids=1) as p:
        (kid,) = psutil.Process(p.pid).children()
        h = _collector({p.pid: (0,)})
        t = time.monotonic()
        for k in range(4):  # one full walk, then three between walks
            (s,) = h.sample(t + 0.5 * k)
            assert [x.pid for x in s.procs if x.worker_of == p.pid] == [kid.pid]
        kid.kill()
        kid.wait(timeout=60)
        (s,) = h.sample(t + 2.5)
        assert all(x.pid != kid.pid for x in s.procs)


def test_pid_from_another_namespace_is_a_capability():
    h = _collector({999_999_99: (0,)})
    h.sample(time.monotonic())
    cap = next(c for c in h.capabilities() if c.name == "pid 99999999")
    assert "PID namespace" in cap.detail and "--pid=host" in cap.fix
