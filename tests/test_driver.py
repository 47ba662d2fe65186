"""The terminal driver's input thread, on a real pseudo-terminal: asleep until a key comes,
a lone Escape still becomes a key, and turning input off ends the thread at once."""

from __future__ import annotations

import asyncio
import os
import pty
import threading
import time
import tty

from memtop.tui.driver import QuietLinuxDriver
from textual import events
from textual.drivers.linux_driver import LinuxDriver


class _App:
    """What a driver needs of its app: somewhere to post parsed input."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def _post_message(self, message) -> bool:
        if isinstance(message, events.Key):
            self.keys.append(message.key)
        return True


def _switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as fh:
        return sum(int(line.split(":")[1]) for line in fh if "ctxt_switches" in line)


class _Running:
    """A driver's input thread reading a fresh raw pty."""

    def __init__(self, cls: type[LinuxDriver]) -> None:
        self.app = _App()
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)  # as the app sets it: keys arrive one by one
        self.driver = cls(self.app)  # type: ignore[arg-type]
        self.driver.fileno = self.slave
        self.thread = threading.Thread(target=self.driver.run_input_thread, daemon=True)
        self.thread.start()

    async def wakeups_in_a_second(self) -> int:
        await asyncio.sleep(0.2)
        before = _switches(self.thread.native_id)
        await asyncio.sleep(1.0)
        return _switches(self.thread.native_id) - before

    def close(self) -> None:
        self.driver.exit_event.set()
        self.thread.join(2)
        for fd in (self.master, self.slave):
            os.close(fd)


async def _key(app: _App, key: str, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while key not in app.keys:
        assert time.monotonic() < end, f"{key!r} never arrived: {app.keys}"
        await asyncio.sleep(0.02)


async def test_input_thread_sleeps_until_a_key_and_still_times_out_a_lone_escape():
    textual = _Running(LinuxDriver)
    theirs = await textual.wakeups_in_a_second()
    textual.close()
    quiet = _Running(QuietLinuxDriver)
    ours = await quiet.wakeups_in_a_second()
    # Textual's own polls 10 times a second; if it stops doing so, this driver can go
    assert theirs >= 5 and ours <= 1, (theirs, ours)
    os.write(quiet.master, b"q")
    await _key(quiet.app, "q")
    os.write(quiet.master, b"\x1b")  # no bytes follow: a key only once the parser's timeout passes
    await _key(quiet.app, "escape")
    t = time.monotonic()
    quiet.driver.exit_event.set()
    quiet.thread.join(2)
    assert not quiet.thread.is_alive() and time.monotonic() - t < 0.5
    quiet.close()
    quiet.driver.close()


def test_a_textual_without_the_private_parser_names_gets_its_own_driver(monkeypatch):
    import sys

    from memtop.tui.app import MemtopApp

    from memtop.live.pipeline import Pipeline, Status

    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is QuietLinuxDriver
    monkeypatch.setitem(sys.modules, "memtop.tui.driver", None)  # importing it now raises ImportError
    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is LinuxDriver
