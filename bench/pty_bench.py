"""Run a TUI in a pseudo-terminal and measure what it costs: CPU % of one core (itself and
its reaped children, e.g. py-spy), bytes/s written to the terminal, time to first frame.

usage: python bench/pty_bench.py SECONDS COLSxROWS [WARM] -- COMMAND ...   (prints one JSON line)
WARM (default 3 s) is left out of the CPU and byte figures: start-up is measured by first_output_s,
and memtop's first frames (the sampler starts after the first paint) redraw the whole screen.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / TICK  # utime stime cutime cstime


def main() -> None:
    secs = float(sys.argv[1])
    cols, rows = (int(x) for x in sys.argv[2].split("x"))
    sep = sys.argv.index("--")
    cmd = sys.argv[sep + 1:]
    warm = float(sys.argv[3]) if sep > 3 else 3.0  # skip start-up before measuring steady state
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
            buf = (buf + data)[-4096:]
            if first is None and any(k in buf for k in (b"memtop", b"nvitop", b"NVITOP", b"GPU")):
                first = time.monotonic() - t0
        if c0 is None and time.monotonic() - t0 >= warm:
            c0, b0, w0 = cpu_s(pid), total, time.monotonic()
    if c0 is None:
        sys.exit(f"{' '.join(cmd)} ended during start-up; last output: {buf[-300:]!r}")
    c1, b1, w1 = cpu_s(pid), total, time.monotonic()
    os.write(fd, b"q")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        with contextlib.suppress(OSError):
            os.read(fd, 65536)
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    print(json.dumps({"cmd": " ".join(cmd), "size": f"{cols}x{rows}", "warm_s": warm, "seconds": round(w1 - w0, 1),
                      "cpu_pct_one_core": round(100 * (c1 - c0) / (w1 - w0), 2),
                      "kib_per_s": round((b1 - b0) / 1024 / (w1 - w0), 2),
                      "first_output_s": None if first is None else round(first, 3)}))


if __name__ == "__main__":
    main()
