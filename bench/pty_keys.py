"""Drive a TUI in a pseudo-terminal with timed keys and resizes, keeping every byte it writes.

usage: python bench/pty_keys.py COLSxROWS OUTDIR "WAIT:KEY ..." -- COMMAND ...

Each step waits WAIT seconds, then sends KEY: a character, or one of esc space left right pgup pgdn
home end enter, or `COLSxROWS` (a resize: the terminal's size changes and the command gets SIGWINCH).
The last key should be `q`. OUTDIR gets bytes.bin (everything written to the terminal) and steps.json
(per step: the key, when it was sent, the byte offset before it, the terminal's size after it; then
the command's exit status, None if it had to be killed 5 s after the last key). bench/pty_screens.py
turns them back into screens in tmux, for a machine without tmux (the lent GPU's).
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

NAMED = {
    "esc": b"\x1b",
    "space": b" ",
    "enter": b"\r",
    "left": b"\x1b[D",
    "right": b"\x1b[C",
    "pgup": b"\x1b[5~",
    "pgdn": b"\x1b[6~",
    "home": b"\x1b[H",
    "end": b"\x1b[F",
}


def _size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main() -> None:
    cut = sys.argv.index("--")
    size, outdir, plan = sys.argv[1:cut]
    cmd = sys.argv[cut + 1 :]
    cols, rows = (int(x) for x in size.split("x"))
    os.makedirs(outdir, exist_ok=True)
    pid, fd = pty.fork()
    if pid == 0:
        _size(0, cols, rows)
        os.environ["TERM"] = "xterm-256color"
        os.execvp(cmd[0], cmd)
    out = open(os.path.join(outdir, "bytes.bin"), "wb")  # noqa: SIM115 (closed at the end)
    total = 0
    t0 = time.monotonic()

    def pump(secs: float) -> None:
        nonlocal total
        end = time.monotonic() + secs
        while (left := end - time.monotonic()) > 0:
            if select.select([fd], [], [], min(left, 0.1))[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    return
                out.write(data)
                total += len(data)

    steps = []
    for item in plan.split():
        wait, key = item.split(":", 1)
        pump(float(wait))
        offset = total
        if "x" in key and key.replace("x", "").isdigit():
            cols, rows = (int(x) for x in key.split("x"))
            _size(fd, cols, rows)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGWINCH)
        else:
            with contextlib.suppress(OSError):
                os.write(fd, NAMED.get(key, key.encode()))
        steps.append(
            {"key": key, "t": round(time.monotonic() - t0, 2), "offset": offset, "size": [cols, rows]}
        )
    status = None
    deadline = time.monotonic() + 5
    while status is None and time.monotonic() < deadline:
        pump(0.1)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
    if status is None:
        os.kill(pid, signal.SIGKILL)
    out.close()
    with open(os.path.join(outdir, "steps.json"), "w") as fh:
        json.dump({"cmd": cmd, "steps": steps, "end": total, "exit": status}, fh, indent=1)
    print(json.dumps({"cmd": " ".join(cmd), "bytes": total, "exit": status}))


if __name__ == "__main__":
    main()
