"""A Linux terminal driver whose input thread sleeps until there is input.

Textual's LinuxDriver wakes its input thread every 0.1 s, whether or not a key came, to time
out a lone Escape and to notice the exit flag. On a 1 Hz monitor those wake-ups were a tenth of
memtop's CPU (bench/RESULTS.md). Here the thread waits for the terminal, for the parser's own
Escape deadline when one is pending, or for a pipe written when input is turned off.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class _WakingEvent(threading.Event):
    """The driver's exit flag: setting it also writes to a pipe the input thread waits on."""

    def __init__(self) -> None:
        super().__init__()
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        super().set()
        if self._w >= 0:
            with contextlib.suppress(OSError):  # full: already woken
                os.write(self._w, b"x")

    def drain(self) -> None:
        with contextlib.suppress(OSError):  # empty
            while os.read(self._r, 64):
                pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._r = self._w = -1


if not hasattr(XTermParser(), "_timeout_time"):  # a Textual whose parser changed: use its own driver
    raise ImportError("textual's input parser has no _timeout_time")


def escape_deadline(parser: XTermParser) -> float | None:
    """When the parser must be ticked to turn a pending Escape into a key (Textual's clock)."""
    return parser._timeout_time


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = self._exit = _WakingEvent()

    def run_input_thread(self) -> None:
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        sel = selectors.DefaultSelector()
        sel.register(self.fileno, selectors.EVENT_READ)
        sel.register(self._exit.fileno(), selectors.EVENT_READ)
        try:
            while not self._exit.is_set():
                due = escape_deadline(parser)
                for key, _ in sel.select(None if due is None else max(0.0, due - get_time())):
                    if key.fd != self.fileno:
                        self._exit.drain()
                        continue
                    try:
                        data = decode(os.read(self.fileno, 4096))
                    except OSError:  # EIO: the terminal hung up
                        data = ""
                    if not data:  # end of input: stop polling it; the app's hang-up guard ends the run
                        sel.unregister(self.fileno)
                    for event in parser.feed(data) if data else ():
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            sel.close()

    def close(self) -> None:
        super().close()
        self._exit.close()
