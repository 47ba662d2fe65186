"""CPU perf counters of the training processes through perf_event_open (ctypes).

One software group (task-clock, page faults, CPU migrations) and, where a PMU exists, one
hardware group (cycles, instructions, cache references/misses, LLC load misses) per thread
of each target, rescanning threads each read. User-mode only (works at perf_event_paranoid
2 for one's own processes). Context switches come from /proc: with the kernel excluded the
counter reads 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
from pathlib import Path

from memtop.core.model import Capability, CapState, PerfSample

from .procfs import read, tasks

SYSCALL_NR = {"x86_64": 298, "aarch64": 241}
ATTR_SIZE = 136
FMT_ENABLED, FMT_RUNNING, FMT_GROUP = 1, 2, 8
READ_FORMAT = FMT_GROUP | FMT_ENABLED | FMT_RUNNING
EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 5, 1 << 6
FLAG_FD_CLOEXEC = 8

# Threads are listed (and their context switches read, one /proc file each) every SCAN_EVERY_S:
# a thread list changes rarely, and between scans the counters of known threads are read
SCAN_EVERY_S = 3.0
SOFTWARE = (("task-clock", 1, 1), ("page-faults", 1, 2), ("cpu-migrations", 1, 4))
HARDWARE = (
    ("cycles", 0, 0),
    ("instructions", 0, 1),
    ("cache-references", 0, 2),
    ("cache-misses", 0, 3),
    ("llc-load-misses", 3, 2 | (0 << 8) | (1 << 16)),  # HW_CACHE: LL, read, miss
)


def pack_attr(type_: int, config: int) -> bytes:
    """A perf_event_attr (136 bytes) for a user-mode counting event."""
    head = struct.pack("=IIQQQQQ", type_, ATTR_SIZE, config, 0, 0, READ_FORMAT, EXCLUDE_KERNEL | EXCLUDE_HV)
    return head + bytes(ATTR_SIZE - len(head))


def parse_group_read(buf: bytes) -> tuple[list[int], int, int]:
    """read() of a group leader with GROUP|ENABLED|RUNNING: nr, enabled, running, values[nr]."""
    nr, enabled, running = struct.unpack_from("=QQQ", buf)
    return list(struct.unpack_from(f"={nr}Q", buf, 24)), enabled, running


def scaled(values: list[int], enabled: int, running: int) -> list[float]:
    """Correct for multiplexing: counts x time enabled / time running."""
    if running <= 0:
        return [0.0] * len(values)
    return [v * enabled / running for v in values]


def derived(rates: dict[str, float]) -> dict[str, float]:
    out = {}
    if rates.get("cycles"):
        out["ipc"] = rates.get("instructions", 0.0) / rates["cycles"]
    if rates.get("cache-references"):
        out["cache-miss-rate"] = rates.get("cache-misses", 0.0) / rates["cache-references"]
    return out


class Libc:
    def __init__(self) -> None:
        self.nr = SYSCALL_NR.get(platform.machine())
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.lib.syscall.restype = ctypes.c_long

    def open(self, attr: bytes, tid: int, group_fd: int) -> int:
        if self.nr is None:
            raise OSError(errno.ENOSYS, f"perf_event_open: unknown syscall number on {platform.machine()}")
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = self.lib.syscall(self.nr, buf, tid, -1, group_fd, FLAG_FD_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd


def paranoid() -> int | None:
    try:
        return int(read("/proc/sys/kernel/perf_event_paranoid") or "")
    except ValueError:
        return None


def explain(err: OSError, hardware: bool) -> tuple[CapState, str, str]:
    level = paranoid()
    if err.errno == errno.ENOENT and hardware:
        return (
            CapState.UNSUPPORTED,
            "no CPU PMU (virtual machine?): hardware counters unavailable",
            "run on bare metal, or ask the hypervisor to expose the PMU",
        )
    if err.errno in (errno.EACCES, errno.EPERM):
        return (
            CapState.DENIED,
            f"perf_event_paranoid={level} forbids it (or another user's process)",
            "run as the process owner, or sysctl kernel.perf_event_paranoid=2 (or lower)",
        )
    if err.errno == errno.ESRCH:
        return CapState.ERROR, "process gone", ""
    return CapState.ERROR, f"perf_event_open: {err.strerror}", ""


class EventGroup:
    def __init__(self, libc: Libc, tid: int, events: tuple) -> None:
        self.fds: list[int] = []
        try:
            for _, type_, config in events:
                self.fds.append(libc.open(pack_attr(type_, config), tid, self.fds[0] if self.fds else -1))
        except OSError:
            self.close()
            raise
        self.n = len(events)

    def read(self) -> list[float]:
        buf = os.read(self.fds[0], 24 + 8 * self.n)
        return scaled(*parse_group_read(buf))

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


def ctx_switches(pid: int, tids: list[str]) -> int:
    """Voluntary and involuntary switches of the process's threads so far."""
    total = 0
    for t in tids:
        for line in (read(f"/proc/{pid}/task/{t}/status") or "").splitlines():
            if "ctxt_switches:" in line:
                total += int(line.split(":")[1])
    return total


class PerfCollector:
    name = "perf"
    jitter = 0.0

    def __init__(self, interval: float = 1.0, pids: tuple[int, ...] = ()):
        self.interval = interval
        self.pids: tuple[int, ...] = tuple(pids)
        self._libc: Libc | None = None
        self._groups: dict[tuple[int, int, bool], EventGroup] = {}  # (pid, tid, hw) -> group
        self._totals: dict[int, tuple[float, dict[str, float]]] = {}
        self.status: dict[str, Capability] = {}
        self.hw_ok: bool | None = None
        self._ctx: dict[
            int, tuple[float, float, float]
        ] = {}  # pid -> (read at, total, rate since the read before)
        self._scanned: dict[int, float] = {}  # pid -> when its threads were last listed

    def _ctx_switches(self, pid: int, now: float, tids: list[str] | None) -> float:
        """Context switches so far: read at each thread scan (``tids``), extrapolated at the
        measured rate in between."""
        at, total, rate = self._ctx.get(pid, (-1e9, 0.0, 0.0))
        if tids is not None:
            fresh = float(ctx_switches(pid, tids))
            rate = (fresh - total) / (now - at) if at > 0 else 0.0
            self._ctx[pid] = (now, fresh, max(0.0, rate))
            return fresh
        return total + rate * (now - at)

    def start(self) -> None:
        try:
            self._libc = Libc()
        except OSError as e:
            self.status["perf"] = Capability("perf", "perf_event_open", CapState.UNSUPPORTED, str(e))

    def set_targets(self, pids: tuple[int, ...]) -> None:
        self.pids = tuple(pids)

    def capabilities(self) -> tuple[Capability, ...]:
        return tuple(self.status.values())

    def _scan(self, pid: int, now: float) -> list[str] | None:
        """Every SCAN_EVERY_S: list the threads, open groups for new ones, drop those of exited
        ones; the thread ids, or None between scans. An empty list: the pid is gone."""
        if now - self._scanned.get(pid, -1e9) < SCAN_EVERY_S:
            return None
        self._scanned[pid] = now
        listed = tasks(Path("/"), pid)
        tids = {int(t) for t in listed}
        if not tids:
            return []
        assert self._libc is not None
        for key in [k for k in self._groups if k[0] == pid and k[1] not in tids]:
            g = self._groups.pop(key)
            g.close()
        for tid in tids:
            for hw, events in ((False, SOFTWARE), (True, HARDWARE)):
                if (pid, tid, hw) in self._groups or (hw and self.hw_ok is False):
                    continue
                try:
                    self._groups[(pid, tid, hw)] = EventGroup(self._libc, tid, events)
                    if hw:
                        self.hw_ok = True
                except OSError as e:
                    if e.errno == errno.ESRCH:
                        continue
                    state, reason, fix = explain(e, hw)
                    self.status["hw" if hw else f"pid {pid}"] = Capability(
                        "perf", "hardware counters" if hw else f"pid {pid}", state, reason, fix
                    )
                    if hw and e.errno in (errno.ENOENT, errno.EOPNOTSUPP):
                        self.hw_ok = False
        return listed

    def sample(self, now: float) -> list[object]:
        if self._libc is None:
            return []
        out: list[object] = []
        for pid in self.pids:
            tids = self._scan(pid, now)
            if tids == []:
                continue
            counts: dict[str, float] = {}
            for (p, _tid, hw), g in list(self._groups.items()):
                if p != pid:
                    continue
                try:
                    vals = g.read()
                except OSError:
                    continue
                for (name, _, _), v in zip(HARDWARE if hw else SOFTWARE, vals):
                    counts[name] = counts.get(name, 0.0) + v
            counts["context-switches"] = self._ctx_switches(pid, now, tids)
            prev = self._totals.get(pid)
            self._totals[pid] = (now, counts)
            if any(k[0] == pid and not k[2] for k in self._groups):
                self.status[f"pid {pid}"] = Capability(
                    "perf",
                    f"pid {pid}",
                    CapState.AVAILABLE,
                    "software + hardware counters" if self.hw_ok else "software counters",
                )
            if prev is None or now <= prev[0]:
                continue
            dt = now - prev[0]
            # Counts of threads that exited vanish from the sum: clamp rates at 0.
            rates = {k: max(0.0, v - prev[1].get(k, 0.0)) / dt for k, v in counts.items()}
            rates["task-clock"] = rates.get("task-clock", 0.0) / 1e9  # ns/s -> CPU-s/s
            rates.update(derived(rates))
            out.append(PerfSample(now, pid, tuple(sorted(rates.items()))))
        for pid in set(self._totals) - set(self.pids):
            del self._totals[pid]
        for cache in (self._ctx, self._scanned):
            for pid in set(cache) - set(self.pids):
                del cache[pid]
        for key in [k for k in self._groups if k[0] not in self.pids]:
            self._groups.pop(key).close()
        return out

    def stop(self) -> None:
        for g in self._groups.values():
            g.close()
        self._groups.clear()
