"""Python stacks of the training processes through ``py-spy dump --json --nonblocking``.

Non-blocking: py-spy reads the target's memory without pausing it. Each dump runs with a
timeout (a hung py-spy is killed, never waited on). Failures become capabilities with a fix.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from memtop.core.model import Capability, CapState, StackFrame, StackSample, ThreadStack
from memtop.core.stackclass import classify

TIMEOUT_S = 2.0
# A --native dump stops the target while py-spy unwinds and symbolises its C++ frames: measured on
# the H100 (bench/native_overhead.py) 60 ms in a torch.cuda.synchronize() wait and 0.56-0.85 s in
# .item()/.nonzero() (libtorch_cuda's symbols). Asked for by the sampler at most this often per pid
# (<= 2.8 % of the target's time at the worst pause measured); a request from the UI is not limited.
NATIVE_EVERY_S = 30.0
# A process whose GPUs are all saturated is dumped at most this often: its label is compute-bound
# whatever its stack says (the stack rules judge under-used GPUs), and a dump is the default view's
# costliest reading (5.5 ms of CPU a dump on the H200: 1.1 % of a core at 2 a second). Scored offline on the held-out runs
# (bench/thin_accuracy.py): no macro-F1 moved at either guard band (bench/RESULTS.md, "fifth pass").
SPARSE_S = 2.0


def find_pyspy() -> str | None:
    """The py-spy installed with memtop (same bin dir as this Python), else PATH."""
    cand = Path(sys.executable).parent / "py-spy"
    if cand.exists():
        return str(cand)
    return shutil.which("py-spy")


def ptrace_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def explain_error(stderr: str, pid: int) -> tuple[CapState, str, str]:
    """Turn py-spy's stderr into (state, reason, fix)."""
    s = stderr.lower()
    if "permission denied" in s or "operation not permitted" in s:
        scope = ptrace_scope()
        fix = "run memtop as the process's owner"
        if scope and scope >= 1:
            fix += f"; kernel.yama.ptrace_scope={scope} (sysctl kernel.yama.ptrace_scope=0 allows same-user attach)"
        fix += "; in a container add --cap-add SYS_PTRACE"
        return CapState.DENIED, "ptrace denied", fix
    if "no such file" in s or "check that the process is running" in s or "no such process" in s:
        return CapState.ERROR, "process gone", ""
    if "failed to find python version" in s or "doesn't appear to be a python" in s:
        return CapState.UNSUPPORTED, "not a Python process", ""
    if "unsupported" in s and "version" in s:
        return CapState.UNSUPPORTED, "unsupported Python version", "upgrade py-spy (pip install -U py-spy)"
    line = stderr.strip().splitlines()[0] if stderr.strip() else "py-spy failed"
    return CapState.ERROR, line[:200], ""


MAX_SOURCE_BYTES = 1 << 20  # a source file is read up to this size; lines past it are unavailable
MAX_LINE = 512
_NEVER = ("/proc/", "/sys/", "/dev/")  # kernel and device files are never source code


def _ids(pid: int) -> tuple[int, set[int]] | None:
    """The target's file-system uid and its gids (from /proc/PID/status), or None if unreadable."""
    uid, gids = None, set()
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                if key == "Uid":
                    uid = int(val.split()[3])  # real, effective, saved, fs: access checks use fs
                elif key == "Gid":
                    gids.add(int(val.split()[3]))
                elif key == "Groups":
                    gids.update(int(g) for g in val.split())
    except (OSError, ValueError, IndexError):
        return None
    return None if uid is None else (uid, gids)


def _may_read(st: os.stat_result, ids: tuple[int, set[int]], bits: tuple[int, int, int]) -> bool:
    """Would the target's user pass the mode check for this owner/group/other permission bit?"""
    uid, gids = ids
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid in gids:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


_READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
_SEARCH = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def read_source(path: str, ids: tuple[int, set[int]] | None) -> list[str] | None:
    """The lines of a regular file, or None: never a device, FIFO, socket or kernel file, never
    more than MAX_SOURCE_BYTES, never blocking; with `ids` (memtop runs as another user than the
    target, e.g. root), only a file whose mode lets the target's user read it (and search its
    directories)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_dev in _kernel_devs():
            return None  # procfs/sysfs files are "regular" with size 0
        if ids is not None:
            if not _may_read(st, ids, _READ):
                return None
            d = os.path.dirname(path)
            while d and d != "/":
                if not _may_read(os.stat(d), ids, _SEARCH):
                    return None
                d = os.path.dirname(d)
        data = os.read(fd, MAX_SOURCE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return [ln[:MAX_LINE] for ln in data.decode("utf-8", "replace").splitlines()]


@functools.cache
def _kernel_devs() -> frozenset[int]:
    devs = set()
    for d in ("/proc", "/sys", "/dev"):
        with contextlib.suppress(OSError):
            devs.add(os.stat(d).st_dev)
    return frozenset(devs)


class SourceLines:
    """Source text of frames, read through /proc/PID/root so containers' files resolve, and only
    what the watched process's own user could read. Only the lines asked for are kept: a torch job's
    stacks name hundreds of files a process (562 in heldout2_torch_s21, for 1 342 lines), and each kept
    whole was tens of MiB of a live view's memory; a line not seen yet reads its file again."""

    MAX_FILES = 2000  # (pid, file) pairs kept; past it the cache starts over

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], dict[int, str] | None] = {}  # None: not readable

    def get(self, pid: int, file: str, line: int) -> str:
        # a relative name is relative to the target's cwd, not ours; kernel files are never source
        if line <= 0 or not file.startswith("/") or os.path.normpath(file).startswith(_NEVER):
            return ""
        key = (pid, file)
        kept = self._cache.get(key, {})
        if kept is None or line in kept:
            return "" if kept is None else kept[line]
        lines = self._read(pid, file)
        if key not in self._cache and len(self._cache) >= self.MAX_FILES:
            self._cache.clear()
        if lines is None:
            self._cache[key] = None
            return ""
        text = lines[line - 1].strip() if line <= len(lines) else ""
        entry = self._cache.get(key)
        if entry is None:  # (a file found unreadable returned above)
            entry = self._cache[key] = {}
        entry[line] = text
        return text

    @staticmethod
    def _read(pid: int, file: str) -> list[str] | None:
        ids = _ids(pid)
        if ids is None:  # gone, or not ours to inspect
            return None
        if ids[0] == os.geteuid():
            ids = None  # the same user: the kernel's own checks are the target's
        for p in (f"/proc/{pid}/root{file}", file):
            lines = read_source(p, ids)
            if lines is not None:
                return lines
        return None


def parse_dump(text: str, pid: int, t: float, src: SourceLines | None = None) -> StackSample:
    """py-spy's JSON (a list of threads) -> StackSample with each thread classified."""
    threads = []
    for th in json.loads(text):
        frames = tuple(
            StackFrame(
                # interned: the same names come in every dump, and a live view keeps ten minutes of them
                sys.intern(f.get("name") or "?"),
                sys.intern(f.get("filename") or f.get("module") or "?"),  # a native frame: its shared object
                int(f.get("line") or 0),
                src.get(pid, f.get("filename") or "", int(f.get("line") or 0)) if src else "",
            )
            for f in th.get("frames") or ()
        )
        active = bool(th.get("active"))
        tid = int(th.get("os_thread_id") or th.get("thread_id") or 0)
        threads.append(
            ThreadStack(
                tid,
                th.get("thread_name") or ("MainThread" if tid == pid else "thread"),
                active,
                bool(th.get("owns_gil")),
                frames,
                classify(frames, active),
            )
        )
    return StackSample(t, pid, tuple(threads))


class StacksCollector:
    name = "stacks"
    # Training steps are periodic: dumps at a fixed period can alias with the step and miss a
    # short sync wait for seconds (seen on the H100: one .item() sample in 6 s where 27 % of
    # the time was spent in it). Random intervals make each dump an unbiased sample.
    jitter = 0.3

    def __init__(self, interval: float = 1.0, worker_every: int = 5, pids: tuple[int, ...] = ()):
        self.interval = self.base_interval = interval
        self.worker_every = worker_every  # DataLoader workers are dumped every Nth cycle
        self.pyspy = find_pyspy()
        self.targets: dict[int, int | None] = {p: None for p in pids}  # pid -> parent (workers)
        self.status: dict[int, Capability] = {}
        self._src = SourceLines()
        self._cycle = 0
        self._native: set[int] = set()  # pids asked for a one-off --native dump
        self.native_every = NATIVE_EVERY_S
        self._native_last: dict[int, float] = {}  # pid -> when the sampler last asked for one
        self.native_asked = 0  # how many the sampler asked for
        self.sparse: frozenset[int] = frozenset()  # pids on saturated GPUs (see SPARSE_S)
        self._dumped: dict[int, float] = {}  # pid -> when its last plain dump started

    def request_native(self, pid: int) -> None:
        """Ask for one --native dump of pid at the next cycle (it pauses the target 0.06-0.85 s)."""
        self._native.add(pid)

    def want_native(self, pid: int, now: float) -> bool:
        """The sampler's sparse ask: one --native dump of pid, at most once per ``native_every`` s."""
        if now - self._native_last.get(pid, -math.inf) < self.native_every:
            return False
        self._native_last[pid] = now
        self.native_asked += 1
        self.request_native(pid)
        return True

    def start(self) -> None:
        pass

    def set_fast(self, fast: bool) -> None:
        """Dump twice as often while the stacks decide the label (see Sampler._pace_stacks)."""
        self.interval = self.base_interval / 2 if fast else self.base_interval

    def set_sparse(self, pids: frozenset[int]) -> None:
        """The processes on saturated GPUs (their workers follow them): dumped every SPARSE_S."""
        self.sparse = pids

    def set_targets(self, targets: dict[int, int | None]) -> None:
        self.targets = targets
        for gone in set(self.status) - set(targets):
            del self.status[gone]
        for kept in (self._native_last, self._dumped):
            for gone in set(kept) - set(targets):
                del kept[gone]

    def _due(self, pid: int, parent: int | None, now: float) -> bool:
        if parent is not None and self._cycle % self.worker_every:
            return False
        root = pid if parent is None else parent
        return root not in self.sparse or now - self._dumped.get(pid, -math.inf) >= SPARSE_S

    def capabilities(self) -> tuple[Capability, ...]:
        if self.pyspy is None:
            return (
                Capability(
                    "stacks",
                    "py-spy",
                    CapState.UNSUPPORTED,
                    "py-spy not found",
                    "pip install py-spy (it is a memtop dependency)",
                ),
            )
        return tuple(self.status[p] for p in sorted(self.status))

    def _spawn(self, pid: int, native: bool = False) -> subprocess.Popen:
        args = [self.pyspy or "py-spy", "dump", "--json", "--pid", str(pid)]
        args += ["--native"] if native else ["--nonblocking"]
        env = {"PATH": os.environ.get("PATH", ""), "RUST_BACKTRACE": "0"}
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def sample(self, now: float) -> list[StackSample]:
        if self.pyspy is None:
            return []
        self._cycle += 1
        natives = []
        while self._native:
            pid = self._native.pop()
            natives.append(self.native_dump(pid))
        native_pids = {n.pid for n in natives}
        pids = [p for p, parent in self.targets.items() if p not in native_pids and self._due(p, parent, now)]
        running = []
        for pid in pids:  # start all dumps, then collect: one slow target delays none other
            self._dumped[pid] = now
            try:
                running.append((pid, self._spawn(pid), time.monotonic()))
            except OSError as e:
                self.status[pid] = Capability("stacks", f"pid {pid}", CapState.ERROR, f"py-spy: {e}")
        return natives + [s for s in (self._collect(pid, proc, t0) for pid, proc, t0 in running) if s]

    def _collect(self, pid: int, proc: subprocess.Popen, t0: float) -> StackSample | None:
        try:
            out, err = proc.communicate(timeout=max(0.1, TIMEOUT_S - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.status[pid] = Capability(
                "stacks", f"pid {pid}", CapState.ERROR, f"py-spy hung (> {TIMEOUT_S:.0f} s) and was killed"
            )
            return None
        t = time.monotonic()
        if proc.returncode != 0:
            state, reason, fix = explain_error(err, pid)
            self.status[pid] = Capability("stacks", f"pid {pid}", state, reason, fix)
            return StackSample(t, pid, (), reason)
        try:
            sample = parse_dump(out, pid, t, self._src)
        except (ValueError, TypeError, AttributeError) as e:
            self.status[pid] = Capability(
                "stacks", f"pid {pid}", CapState.ERROR, f"unreadable py-spy output: {e}"
            )
            return None
        self.status[pid] = Capability("stacks", f"pid {pid}", CapState.AVAILABLE, "py-spy --nonblocking")
        return sample

    def native_dump(self, pid: int) -> StackSample:
        """One-off dump with native frames (on request only: it briefly pauses the target)."""
        proc = self._spawn(pid, native=True)
        s = self._collect(pid, proc, time.monotonic()) or StackSample(
            time.monotonic(), pid, (), "native dump failed"
        )
        return replace(s, native=True)

    def stop(self) -> None:
        pass
