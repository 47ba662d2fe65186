"""Screens from a bench/pty_keys.py run: its bytes played into a tmux pane of the same sizes, step by step.

usage: python bench/pty_screens.py RUNDIR [FIRST_COLSxROWS]

Writes RUNDIR/screens.txt: the pane before each key (what the user saw when pressing it) and at the
end, each headed by the step. Resizes happen in tmux where they happened in the run, so a stale cell
left after one shows as it would in a real terminal. Needs tmux (not on the lent GPU machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    run = sys.argv[1]
    with open(os.path.join(run, "steps.json")) as fh:
        meta = json.load(fh)
    with open(os.path.join(run, "bytes.bin"), "rb") as fh:
        data = fh.read()
    steps = meta["steps"]
    first = sys.argv[2] if len(sys.argv) > 2 else None
    cols, rows = (int(x) for x in first.split("x")) if first else steps[0]["size"]
    sock = f"pty_screens_{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "in")
        os.mkfifo(fifo)
        _tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "s", "-x", str(cols), "-y", str(rows),
              f"stty raw -echo; cat {fifo}; sleep 3600")  # fmt: skip
        _tmux(sock, "set-option", "-g", "window-size", "manual")
        feed = open(fifo, "wb")  # noqa: SIM115 (open until the last byte is played)
        shown, done = [], 0
        try:
            for i, st in enumerate([*steps, {"key": "(end)", "offset": meta["end"], "size": None}]):
                feed.write(data[done : st["offset"]])
                feed.flush()
                done = st["offset"]
                time.sleep(0.4)
                head = f"=== {i:02d} before {st['key']!r} at {st.get('t', '')} s, {cols}x{rows}"
                shown.append(head + "\n" + _tmux(sock, "capture-pane", "-p", "-t", "s"))
                if st["size"] and st["size"] != [cols, rows]:
                    cols, rows = st["size"]
                    _tmux(sock, "resize-window", "-t", "s", "-x", str(cols), "-y", str(rows))
                    time.sleep(0.2)
        finally:
            feed.close()
            subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
    with open(os.path.join(run, "screens.txt"), "w") as fh:
        fh.write("\n".join(shown) + f"\nexit: {meta['exit']}\n")
    print(os.path.join(run, "screens.txt"), len(shown), "screens; exit", meta["exit"])


if __name__ == "__main__":
    main()
