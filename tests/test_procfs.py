"""procfs reads: the real /proc of this machine, and synthetic files for the cases it cannot
show (a busy second core, a comm with parentheses)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from memtop.collectors import procfs

STAT = (
    "cpu  {a} 0 {a} {i} {w} 0 0 0 0 0\n"
    "cpu0 {a} 0 {a} {i} {w} 0 0 0 0 0\n"
    "cpu1 {b} 0 0 {j} 0 0 0 0 0 0\n"
    "intr 12345\nctxt 999\n"
)


def test_cpu_times_from_a_synthetic_stat(tmp_path: Path):
    (tmp_path / "proc").mkdir()
    stat = tmp_path / "proc/stat"
    stat.write_text(STAT.format(a=100, i=1000, w=10, b=0, j=2000))
    ct = procfs.CpuTimes(tmp_path)
    assert ct.sample() == ((0.0, 0.0), 0.0)  # no delta yet
    # cpu0: 50 user + 50 system + 50 idle + 50 iowait -> 50 % busy, 25 % iowait
    # cpu1: 90 user + 10 idle -> 90 % busy
    stat.write_text(STAT.format(a=150, i=1050, w=60, b=90, j=2010))
    cores, iowait = ct.sample()
    assert cores == (50.0, 90.0)
    assert iowait == 25.0  # the "cpu" line: 50 of 200


def test_cpu_times_on_this_machine_match_psutil():
    ct = procfs.CpuTimes()
    ct.sample()
    psutil.cpu_percent(percpu=True)

    def busy() -> float:  # user time, niced or not (a suite run under nice counts its loop as nice)
        t = psutil.cpu_times()
        return t.user + t.nice

    end = busy() + 0.05
    while busy() < end:  # keep a core busy for a moment
        pass
    cores, iowait = ct.sample()
    ref = psutil.cpu_percent(percpu=True)
    assert len(cores) == len(ref) == psutil.cpu_count()
    assert all(0.0 <= c <= 100.0 for c in cores) and 0.0 <= iowait <= 100.0
    # the loop ran until the kernel counted 5 ticks of user time between the two samples: some core
    # was busy (a count, not a share of the wall-clock interval)
    assert sum(cores) > 0 and abs(sum(cores) - sum(ref)) < 25 * len(ref)


def test_meminfo_matches_psutil():
    total, avail = procfs.meminfo()
    vm = psutil.virtual_memory()
    assert total == vm.total and abs(avail - vm.available) < 0.05 * vm.total


def test_proc_stat_of_this_process():
    state, ppid, cpu_s, threads, start = procfs.proc_stat(Path("/"), os.getpid())
    assert state == "R" and ppid == os.getppid() and threads == len(os.listdir(f"/proc/{os.getpid()}/task"))
    assert abs(cpu_s - sum(psutil.Process().cpu_times()[:2])) < 0.1 and start > 0
    assert str(threading.get_native_id()) in procfs.tasks(Path("/"), os.getpid())


def test_proc_stat_with_parentheses_in_the_name_and_a_gone_pid(tmp_path: Path):
    (tmp_path / "proc/42").mkdir(parents=True)
    fields = ["S", "7"] + ["0"] * 9 + ["250", "150"] + ["0"] * 4 + ["3", "0", "888"] + ["0"] * 20
    (tmp_path / "proc/42/stat").write_text("42 (a) (b c) " + " ".join(fields) + "\n")
    state, ppid, cpu_s, threads, start = procfs.proc_stat(tmp_path, 42)
    assert (state, ppid, threads, start) == ("S", 7, 3, 888)
    assert cpu_s == 400 / procfs.TICK
    assert procfs.proc_stat(tmp_path, 43) is None and procfs.tasks(tmp_path, 43) == []
    assert procfs.read(tmp_path / "nothing") is None


def test_swap_and_boot_time_match_psutil():
    used, total = procfs.swap()
    ref = psutil.swap_memory()
    assert total == ref.total and abs(used - ref.used) <= max(1 << 20, 0.01 * total)
    assert procfs.boot_time() == psutil.boot_time()


def test_a_process_named_as_psutil_names_it(tmp_path: Path):
    """The host collector's name, user, arguments and start time of a process are psutil's: here a
    command whose name the kernel cuts at 15 characters (psutil gives argv[0]'s longer file name)."""
    from memtop.collectors.host import HostCollector

    exe = tmp_path / "a-sleeper-with-a-long-name"
    exe.symlink_to(sys.executable)
    p = subprocess.Popen([str(exe), "-c", "import time; time.sleep(30)", "an argument with spaces"])
    try:
        # exec'd (the kernel names the process before it sets up the arguments)
        while procfs.comm(Path("/"), p.pid) != "a-sleeper-with-" or not procfs.cmdline(Path("/"), p.pid):
            time.sleep(0.01)
        h = HostCollector(pids=(p.pid, os.getpid()))
        h.start()
        (s,) = h.sample(time.monotonic())
        assert {x.pid for x in s.procs} >= {p.pid, os.getpid()}
        for x in s.procs:
            if x.pid not in (p.pid, os.getpid()):
                continue
            ref = psutil.Process(x.pid)
            assert (x.name, x.user, x.argv) == (ref.name(), ref.username(), tuple(ref.cmdline()))
            # (on the collector's own wall offset: one taken here again can be preempted between its
            # two clock reads on a loaded machine, and be off by as long as it waited)
            assert abs(x.started + h._offset - ref.create_time()) < 0.05
        assert next(x for x in s.procs if x.pid == p.pid).name == "a-sleeper-with-a-long-name"
    finally:
        p.kill()
        p.wait()
    assert procfs.comm(Path("/"), p.pid) is None and procfs.user(Path("/"), p.pid) is None


def test_command_lines_split_as_psutil_splits_them(tmp_path: Path):
    (tmp_path / "proc/42").mkdir(parents=True)
    cases = {
        "python\0train.py\0--lr\0\0": ["python", "train.py", "--lr", ""],  # an empty last argument
        "python\0train.py\0": ["python", "train.py"],
        "worker: rank 3 of 8": ["worker:", "rank", "3", "of", "8"],  # a title rewritten with spaces
        "worker: rank 3\0": ["worker:", "rank", "3"],  # ... and a NUL after it
        "": [],  # a kernel thread, or a zombie
    }
    for text, args in cases.items():
        (tmp_path / "proc/42/cmdline").write_text(text)
        assert procfs.cmdline(tmp_path, 42) == args, text
    assert procfs.cmdline(tmp_path, 43) is None and procfs.comm(tmp_path, 43) is None
    (tmp_path / "proc/42/status").write_text("Name:\tx\nUid:\t4242999\t0\t0\t0\n")
    assert procfs.user(tmp_path, 42) == "4242999"  # a uid without a name
    assert procfs.swap(tmp_path) == (0, 0) and procfs.boot_time(tmp_path) == 0.0
