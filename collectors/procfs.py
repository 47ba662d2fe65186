"""Small, fast /proc and /sys reads shared by the host, NUMA and perf collectors.

A 1 Hz monitor reads a few dozen such files a second (one per thread of the training process
for placement and context switches); ``os.read`` on a raw descriptor costs a third of
``Path.read_text`` (bench/RESULTS.md), and one pass over /proc/stat replaces psutil's two.
The few things memtop took from psutil are read here as psutil reads them (its import alone was
1 MiB of a live view's RSS: bench/RESULTS.md).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path


def read(path: str | Path) -> str | None:
    """The whole file (procfs files fit one read), or None if it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def tasks(root: Path, pid: int) -> list[str]:
    """Thread ids of a process (as names under /proc/PID/task); empty if it is gone."""
    try:
        return os.listdir(f"{root}/proc/{pid}/task")
    except OSError:
        return []


class CpuTimes:
    """Per-core busy % and overall iowait % from /proc/stat, as deltas between calls.

    Busy is everything but idle and iowait, as psutil counts it; guest time is already inside
    user and nice, so it is left out of the total.
    """

    def __init__(self, root: Path = Path("/")):
        self.path = f"{root}/proc/stat"
        self._prev: dict[str, tuple[int, int, int]] = {}  # cpu name -> (total, idle, iowait)

    def _read(self) -> dict[str, tuple[int, int, int]]:
        out = {}
        for line in (read(self.path) or "").splitlines():
            if not line.startswith("cpu"):
                break  # the cpu lines come first
            name, *vals = line.split()
            v = [int(x) for x in vals]
            total = sum(v[:8])  # user nice system idle iowait irq softirq steal
            out[name] = (total, v[3], v[4] if len(v) > 4 else 0)
        return out

    def sample(self) -> tuple[tuple[float, ...], float]:
        """(busy % per core, iowait % of all cores) since the previous call; zeros on the first."""
        cur = self._read()
        prev, self._prev = self._prev, cur

        def pct(name: str) -> tuple[float, float]:
            t1, i1, w1 = cur[name]
            t0, i0, w0 = prev.get(name, cur[name])
            dt = t1 - t0
            if dt <= 0:
                return 0.0, 0.0
            busy = dt - (i1 - i0) - (w1 - w0)
            return min(100.0, max(0.0, 100.0 * busy / dt)), max(0.0, 100.0 * (w1 - w0) / dt)

        cores = sorted((k for k in cur if k != "cpu"), key=lambda k: int(k[3:]))
        iowait = pct("cpu")[1] if "cpu" in cur else 0.0
        return tuple(pct(k)[0] for k in cores), iowait


def _meminfo(root: Path, keys: tuple[str, str]) -> tuple[int, int] | None:
    """Two fields of /proc/meminfo in bytes; None if either cannot be read."""
    found = {}
    for line in (read(f"{root}/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            found[key] = int(rest.split()[0]) * 1024
            if len(found) == 2:
                return found[keys[0]], found[keys[1]]
    return None


def meminfo(root: Path = Path("/")) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes; zeros if /proc/meminfo cannot be read."""
    return _meminfo(root, ("MemTotal", "MemAvailable")) or (0, 0)


TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(root: Path, pid: int) -> tuple[str, int, float, int, int] | None:
    """From /proc/PID/stat: (state, ppid, CPU seconds used, threads, start time in ticks)."""
    text = read(f"{root}/proc/{pid}/stat")
    if not text:
        return None
    f = text.rsplit(")", 1)[-1].split()  # comm may hold spaces and parentheses
    if len(f) < 20:
        return None
    # fields 3, 4, 14, 15, 20, 22 of proc(5); two precede this slice
    return f[0], int(f[1]), (int(f[11]) + int(f[12])) / TICK, int(f[17]), int(f[19])


def swap(root: Path = Path("/")) -> tuple[int, int]:
    """(used, total) swap in bytes from /proc/meminfo: used is SwapTotal - SwapFree, as psutil counts it."""
    total, free = _meminfo(root, ("SwapTotal", "SwapFree")) or (0, 0)
    return total - free, total


def boot_time(root: Path = Path("/")) -> float:
    """The boot time in Unix seconds (/proc/stat's btime); 0 if it cannot be read."""
    for line in (read(f"{root}/proc/stat") or "").splitlines():
        if line.startswith("btime"):
            return float(line.split()[1])
    return 0.0


def comm(root: Path, pid: int) -> str | None:
    """The kernel's name of a process (cut at 15 characters), from /proc/PID/stat; None if it is gone."""
    text = read(f"{root}/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    return text[text.find("(") + 1 : text.rfind(")")]


def cmdline(root: Path, pid: int) -> list[str] | None:
    """A process's arguments, split as psutil splits them: on NUL, or on spaces where the process
    rewrote its title that way (setproctitle); [] for a kernel thread or a zombie; None if unreadable."""
    text = read(f"{root}/proc/{pid}/cmdline")
    if not text:
        return None if text is None else []
    sep = "\0" if text.endswith("\0") else " "
    if text.endswith(sep):
        text = text[:-1]
    args = text.split(sep)
    if sep == "\0" and len(args) == 1 and " " in text:
        args = text.split(" ")
    return args


def user(root: Path, pid: int) -> str | None:
    """The name of the process's real user (the uid itself when it has none); None if it is gone."""
    for line in (read(f"{root}/proc/{pid}/status") or "").splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
    return None


# What a blocked thread waits on, from the kernel's view of it (no ptrace, no stacks): its wait channel
# (/proc/PID/task/TID/wchan, a kernel function, readable by the process's user), else its system call
# (/proc/PID/task/TID/syscall: number and arguments; needs ptrace access, so often refused). Classes:
# sleep (a timed sleep), lock (a futex: a lock, condition, queue.get, a future, a shared-memory
# semaphore), pipe, socket, poll (poll/select/epoll on descriptors), io (disk), tty (user input), child
# (waitpid), other (blocked elsewhere).
_WCHAN = (
    ("sleep", ("nanosleep", "hrtimer_nanosleep", "do_nanosleep")),
    ("lock", ("futex",)),
    ("pipe", ("pipe_read", "pipe_write", "pipe_wait")),
    ("tty", ("n_tty_read", "tty_read")),
    ("socket", ("sk_wait", "unix_stream", "unix_dgram", "tcp_recv", "inet_csk_accept", "sock_", "skb_")),
    ("poll", ("poll", "select", "epoll", "ep_poll")),
    ("child", ("do_wait", "wait4", "waitid")),
    ("io", ("io_schedule", "folio_wait", "wait_on_page", "blk_", "jbd2", "nfs", "fuse")),
)
# syscall numbers by machine: (read-like calls whose first argument is the descriptor waited on, and
# each class's calls)
_SYSCALLS = {
    "x86_64": ({0, 17, 19, 45, 47, 43, 288}, {35: "sleep", 230: "sleep", 202: "lock", 449: "lock", 7: "poll",
               23: "poll", 270: "poll", 271: "poll", 232: "poll", 281: "poll", 441: "poll", 61: "child",
               247: "child", 45: "socket", 47: "socket", 43: "socket", 288: "socket"}),
    "aarch64": ({63, 67, 65, 207, 212, 202, 242}, {101: "sleep", 115: "sleep", 98: "lock", 449: "lock",
                73: "poll", 72: "poll", 22: "poll", 441: "poll", 260: "child", 95: "child", 207: "socket",
                212: "socket", 202: "socket", 242: "socket"}),
}  # fmt: skip
_MACHINE = os.uname().machine


def thread_wait(root: Path, pid: int, tid: int) -> tuple[str, float, str, str] | None:
    """(state, CPU seconds used, what it waits on, the descriptor's target where the call names one:
    "pipe:[123]", "socket:[456]", a file) of one thread; None once it is gone. A running thread
    (R) waits on nothing; a thread in D state waits on I/O."""
    base = f"{root}/proc/{pid}/task/{tid}"
    text = read(f"{base}/stat")
    if not text:
        return None
    f = text.rsplit(")", 1)[-1].split()
    if len(f) < 13:
        return None
    state, used = f[0], (int(f[11]) + int(f[12])) / TICK
    if state == "R":
        return state, used, "", ""
    fd_calls, classes = _SYSCALLS.get(_MACHINE, (set(), {}))
    call = (read(f"{base}/syscall") or "").split()
    nr = int(call[0]) if call and call[0].lstrip("-").isdigit() else -1
    target = ""
    if nr in fd_calls and len(call) > 1:
        try:
            target = os.readlink(f"{root}/proc/{pid}/fd/{int(call[1], 16)}")[:200]
        except (OSError, ValueError):
            target = ""
    wait = _of_target(target) or classes.get(nr, "")
    if not wait:
        chan = read(f"{base}/wchan") or ""
        wait = next((k for k, keys in _WCHAN if any(s in chan for s in keys)), "")
    if state == "D":
        wait = "io"
    return state, used, wait or "other", target


def _of_target(target: str) -> str:
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith(("/dev/pts/", "/dev/tty")):
        return "tty"
    return "io" if target.startswith("/") else ""


def nspid(proc: str, pid: int | str) -> tuple[int, ...]:
    """The process's PID in each PID namespace it is in, from the one ``proc`` (a procfs mount) was
    mounted in down to its own (/proc/PID/status NSpid); () if it is gone or not visible there."""
    for line in (read(f"{proc}/{pid}/status") or "").splitlines():
        if line.startswith("NSpid:"):
            return tuple(int(x) for x in line.split()[1:] if x.isdigit())
    return ()


def start_ticks(proc: str, pid: int | str) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot: the same seen from any PID
    namespace), or None if it is gone."""
    text = read(f"{proc}/{pid}/stat")
    if not text or ")" not in text:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[19]) if len(rest) > 19 and rest[19].isdigit() else None
