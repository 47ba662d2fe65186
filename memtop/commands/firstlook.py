"""Numbers before the TUI: one plain screen of GPU readings, painted from the start-up thread the
moment NVML is up, while the main thread is still importing Textual (about 0.2 s of the 0.45 s
to the TUI's first paint on the H100: bench/RESULTS.md). Textual's first paint replaces it.

Plain text on the alternate screen: no colour, only ASCII, every driver string cleaned. Once the
app is about to take the terminal (`hand_over`), nothing more is written; if it never does (a bad
flag found later), `close` gives the terminal back as it was.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, TextIO

from memtop.core.sanitize import clean
from memtop.core.wording import counted

if TYPE_CHECKING:
    from memtop.collectors.nvml_calls import Nvml

ENTER = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"  # alternate screen, cursor hidden, cleared
LEAVE = "\x1b[?1049l\x1b[?25h"


def _row(nv: Nvml, i: int) -> str:
    """A GPU as the TUI's row shows it (util %, power W, memory G, temperature C)."""
    name = clean(nv.device(i)["name"], 40)
    util = nv.utilization(i)[0]
    used, total = nv.memory(i)
    return (
        f"GPU {i}  {name}  util {util}%  {nv.power_mw(i) / 1000:.0f}W  "
        f"{used / 2**30:.1f}/{total / 2**30:.1f}G  {nv.temperature(i)}C"
    )


def lines(nv: Nvml, width: int, height: int) -> list[str]:
    """The screen: a header, then a row per GPU that fits (the TUI follows with everything else)."""
    info = nv.init()  # idempotent: started already
    n = info["count"]
    head = f"memtop  driver {clean(info['driver'], 20)}  {counted(n, 'GPU')}  starting..."
    rows = [_row(nv, i) for i in range(min(n, max(0, height - 2)))]
    return [s.encode("ascii", "replace").decode()[:width] for s in [head, "", *rows]]


class FirstLook:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._handed_over = False
        self.painted = False

    def paint(self, nv: Nvml) -> None:
        """From the start-up thread; a reading that fails leaves the screen to the TUI."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
            # a pty that reports no size: Textual assumes 80x24 there too
            text = "\r\n".join(lines(nv, size.columns or 80, size.lines or 24))
        except Exception:  # noqa: BLE001 - a first look is optional; the TUI says what failed
            return
        with self._lock:
            if self._handed_over:
                return
            self.stream.write(ENTER + text)
            self.stream.flush()
            self.painted = True

    def hand_over(self) -> None:
        """The app takes the terminal now: not one byte more from here."""
        with self._lock:
            self._handed_over = True

    def close(self) -> None:
        """The app never took the terminal: leave the alternate screen painted here."""
        with self._lock:
            if self.painted and not self._handed_over:
                self.stream.write(LEAVE)
                self.stream.flush()
            self._handed_over = True
