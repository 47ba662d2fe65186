"""What a GPU process's main thread waits on, and who feeds it (issue #35): /proc read for real, on
processes the test starts, and a synthetic /proc for what this kernel cannot be made to show."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memtop.collectors import procfs
from memtop.collectors.host import HostCollector

# each ends by itself after 20 s even if the test dies before it kills it
WAITS = {
    "sleep": "import time; print(flush=True); time.sleep(20)",
    "lock": "import threading; l = threading.Lock(); l.acquire(); print(flush=True); l.acquire(timeout=20)",
    "pipe": "import os, sys; r, w = os.pipe(); print(flush=True); os.read(r, 1)",
}
# a pool whose workers spin while the main thread waits for their results (the case)
POOL = (
    "import multiprocessing as mp, time\n"
    "def work(x):\n"
    "    end = time.time() + 2\n"
    "    while time.time() < end: pass\n"
    "if __name__ == '__main__':\n"
    "    with mp.get_context('fork').Pool(1) as p:\n"
    "        print(flush=True)\n"
    "        for _ in p.imap(work, range(10)): pass\n"
)


@contextlib.contextmanager
def _started(code: str):
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None
        p.stdout.readline()  # it is about to block
        yield p
    finally:
        for kid in (procfs.read(f"/proc/{p.pid}/task/{p.pid}/children") or "").split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(kid), 9)
        p.kill()
        p.wait()


def _blocked(pid: int) -> tuple[str, float, str, str]:
    """The main thread's wait once it has blocked (it may still be on its way there: a bound for a
    loaded machine, not a pace)."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        got = procfs.thread_wait(Path("/"), pid, pid)
        assert got is not None
        if got[0] != "R":
            return got
        time.sleep(0.05)
    raise AssertionError("never blocked")


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_blocked_main_thread_says_what_it_waits_on(kind):
    with _started(WAITS[kind]) as p:
        state, used, wait, target = _blocked(p.pid)
        assert state == "S" and used >= 0 and wait == kind
        if kind == "pipe" and target:  # named where the syscall is readable (ptrace access)
            assert target.startswith("pipe:[")


def test_a_gone_thread_reads_none():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert procfs.thread_wait(Path("/"), p.pid, p.pid) is None


def test_synthetic_proc_running_disk_and_a_file_read(tmp_path: Path):
    """R waits on nothing; D is disk I/O whatever the channel; a read's descriptor names its file."""
    task = tmp_path / "proc/7/task/7"
    task.mkdir(parents=True)
    (tmp_path / "proc/7/fd").mkdir()
    os.symlink("/data/shard-3.tar", tmp_path / "proc/7/fd/5")
    stat = "7 (python) {} 1 7 7 0 -1 0 0 0 0 0 250 50 0 0 20 0 9 0 100 0 0"
    (task / "stat").write_text(stat.format("R"))
    assert procfs.thread_wait(tmp_path, 7, 7) == ("R", 3.0, "", "")
    (task / "stat").write_text(stat.format("D"))
    (task / "wchan").write_text("folio_wait_bit_common")
    assert procfs.thread_wait(tmp_path, 7, 7)[2] == "io"
    (task / "stat").write_text(stat.format("S"))
    read_nr = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)
    if read_nr is None:
        pytest.skip("syscall numbers known for x86_64 and aarch64 only")
    (task / "syscall").write_text(f"{read_nr} 0x5 0x7f00 0x1000 0x0 0x0 0x0 0x7ffc 0x7f01")
    assert procfs.thread_wait(tmp_path, 7, 7)[2:] == ("io", "/data/shard-3.tar")
    (task / "wchan").write_text("0")
    (task / "syscall").write_text("-1 0x7ffc 0x7f01")  # blocked outside a system call
    assert procfs.thread_wait(tmp_path, 7, 7)[2] == "other"


def test_a_pool_fed_main_thread_names_its_busy_worker_as_feeder():
    with _started(POOL) as p:
        _blocked(p.pid)
        kids = (procfs.read(f"/proc/{p.pid}/task/{p.pid}/children") or "").split()
        assert kids
        h = HostCollector()
        h.start()
        h.set_gpu_processes({p.pid: (0,)}, ())
        h.sample(time.monotonic())
        end = time.monotonic() + 60
        while True:  # sampled until the worker has run (a loaded machine may not run it for a while)
            time.sleep(0.5)
            (s,) = h.sample(time.monotonic())
            busy = [x for x in s.procs if x.worker_of == p.pid and x.cpu_pct > 0]
            if busy or time.monotonic() > end:
                break
        main = next(x for x in s.procs if x.pid == p.pid)
        (worker,) = busy
        assert main.wait == "lock" and 0 <= main.main_cpu < worker.cpu_pct
        assert main.feeder.split()[0] == str(worker.pid) and main.feeder_cpu == round(worker.cpu_pct, 1)
        assert all(x.main_cpu == -1.0 and not x.feeder for x in s.procs if x.worker_of == p.pid)


def test_a_pipe_wait_is_said_in_words_not_as_its_inode():
    """The evidence read "waiting (pipe pipe:[11857])": an inode a reader can do nothing with. A real
    recording of a job fed through a pipe: its evidence and advice say "a pipe", a file keeps its path."""
    from memtop.analysis.phases import Classifier
    from memtop.analysis.verdict import _advice, _evidence, wait_words
    from memtop.storage.store import Recording

    rec = Recording(Path(__file__).parent / "data" / "heldout9_pipe_s111.memtop")
    piped = [
        x for x in Classifier().feed_all(rec.frames()).labels[0] if x.evidence.wait_on.startswith("pipe:[")
    ]
    assert piped
    for lab in piped:
        said = " ".join((_evidence(lab), *_advice(lab)))
        assert "waiting on a pipe" in said and "pipe:[" not in said, said
    assert wait_words("io", "/data/shard-7.bin") == "waiting on disk I/O (/data/shard-7.bin)"
    assert wait_words("socket", "socket:[991]") == "waiting on a socket"
