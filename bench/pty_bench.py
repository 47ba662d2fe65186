"""Run a TUI in a pseudo-terminal and measure what it costs: CPU % of one core (itself and
its reaped children, e.g. py-spy), bytes/s written to the terminal, time to first frame.

usage: python bench/pty_bench.py SECONDS COLSxROWS [WARM] [--threads] [--until REGEX] -- COMMAND ...
(one JSON line)
WARM (default 3 s) is left out of the CPU and byte figures: start-up is measured by first_output_s,
and memtop's first frames (the sampler starts after the first paint) redraw the whole screen.
--threads: also the CPU % of each thread of a Python command, named by a py-spy dump taken after
the measured window (Python does not name its threads for the OS).
--until REGEX: also the seconds until REGEX (bytes) first matches the screen text with escape sequences
taken out (until_s), e.g. '[0-9]+W' for the first power reading. rss_mib: the command's resident
memory at the end of the window (rss_anon_mib, rss_file_mib: its anonymous and file-backed parts). --dump FILE: every byte the command wrote to the terminal before `q`
(replay it with `cat FILE` in a terminal of the same size to see the last screen). exit: the command's
exit status after `q` (None: killed after 5 s).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces)."""
    with open(path) as fh:
        return fh.read().rsplit(")", 1)[1].split()


def cpu_s(pid: int) -> float:
    return sum(int(x) for x in _stat(f"/proc/{pid}/stat")[11:15]) / TICK  # utime stime cutime cstime


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds used so far by each thread of pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            f = _stat(f"/proc/{pid}/task/{tid}/stat")
            out[int(tid)] = (int(f[11]) + int(f[12])) / TICK
    return out


def thread_names(pid: int) -> dict[int, str]:
    """Python thread names by OS thread id, from a py-spy dump (empty if py-spy cannot attach)."""
    try:
        dump = subprocess.run(
            ["py-spy", "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m[1]): m[2] for m in re.finditer(r'^Thread (\d+) \(\w+\): "([^"]+)"', dump, re.M)}


def main() -> None:
    args = sys.argv[1 : sys.argv.index("--")]
    per_thread = "--threads" in args
    args = [a for a in args if a != "--threads"]
    until = None
    if "--until" in args:
        i = args.index("--until")
        until = re.compile(args[i + 1].encode())
        del args[i : i + 2]
    dump = None
    if "--dump" in args:
        i = args.index("--dump")
        dump = open(args[i + 1], "wb")  # noqa: SIM115 (closed after the window)
        del args[i : i + 2]
    until_s = None
    text = b""
    secs = float(args[0])
    cols, rows = (int(x) for x in args[1].split("x"))
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    warm = float(args[2]) if len(args) > 2 else 3.0  # skip start-up before measuring steady state
    t0 = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.environ["TERM"] = "xterm-256color"
        os.execvp(cmd[0], cmd)
    first = None
    total = 0
    c0 = b0 = w0 = None
    buf = b""
    while time.monotonic() - t0 < secs + warm:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            total += len(data)
            if dump is not None:
                dump.write(data)
            buf = (buf + data)[-4096:]
            if first is None and any(k in buf for k in (b"memtop", b"nvitop", b"NVITOP", b"GPU")):
                first = time.monotonic() - t0
            if until is not None and until_s is None:
                text = (text + re.sub(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-B]", b" ", data))[-8192:]
                if until.search(text):
                    until_s = time.monotonic() - t0
        if c0 is None and time.monotonic() - t0 >= warm:
            c0, b0, w0 = cpu_s(pid), total, time.monotonic()
            t0s = thread_cpu_s(pid) if per_thread else {}
    if c0 is None:
        sys.exit(f"{' '.join(cmd)} ended during start-up; last output: {buf[-300:]!r}")
    c1, b1, w1 = cpu_s(pid), total, time.monotonic()
    mem: dict[str, float] = {}  # VmRSS and its anonymous and file-backed parts, MiB
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
        mem = {
            k: int(v.split()[0]) / 1024
            for k, _, v in (x.partition(":") for x in fh)
            if k.startswith(("VmRSS", "Rss"))
        }
    rss = mem.get("VmRSS")
    threads = {}
    if per_thread:
        names = thread_names(pid)
        for tid, used in thread_cpu_s(pid).items():
            if used > t0s.get(tid, 0.0):
                threads[names.get(tid, str(tid))] = round(100 * (used - t0s.get(tid, 0.0)) / (w1 - w0), 3)
    if dump is not None:
        dump.close()
    os.write(fd, b"q")
    deadline = time.monotonic() + 5
    status = None
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
            break
        with contextlib.suppress(OSError):
            os.read(fd, 65536)
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    print(
        json.dumps(
            {
                "cmd": " ".join(cmd),
                "size": f"{cols}x{rows}",
                "warm_s": warm,
                "seconds": round(w1 - w0, 1),
                "cpu_pct_one_core": round(100 * (c1 - c0) / (w1 - w0), 2),
                "kib_per_s": round((b1 - b0) / 1024 / (w1 - w0), 2),
                "first_output_s": None if first is None else round(first, 3),
                **({"until_s": None if until_s is None else round(until_s, 3)} if until else {}),
                "rss_mib": None if rss is None else round(rss, 1),
                **{
                    k.lower().replace("rss", "rss_") + "_mib": round(v, 1)
                    for k, v in mem.items()
                    if k in ("RssAnon", "RssFile")
                },
                "exit": status,
                **({"threads": threads} if per_thread else {}),
            }
        )
    )


if __name__ == "__main__":
    main()
