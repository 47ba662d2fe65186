"""The terminal driver's input thread, on a real pseudo-terminal: asleep until a key comes,
a lone Escape still becomes a key, and turning input off wakes the thread and ends it."""

from __future__ import annotations

import asyncio
import os
import pty
import selectors
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


class _Selects:
    """The timeouts a driver's input thread passes to its selector's select(), in order: None is a
    sleep until input comes, a number a poll that wakes that often whether or not any does."""

    def __init__(self, monkeypatch, name: str) -> None:
        self.timeouts: list[float | None] = []
        base = getattr(selectors, name)
        seen = self.timeouts

        class Recording(base):  # type: ignore[valid-type,misc]
            def select(self, timeout=None):
                seen.append(timeout)
                return super().select(timeout)

        monkeypatch.setattr(selectors, name, Recording)


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

    def close(self) -> None:
        self.driver.exit_event.set()
        self.thread.join(60)  # (a hang bound: the thread ends once it sees the event)
        for fd in (self.master, self.slave):
            os.close(fd)


async def _until(cond, what: str, timeout: float = 60.0) -> None:
    """Polled until ``cond()`` holds (the bound is for a loaded machine, not a pace)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, what
        await asyncio.sleep(0.02)


async def _key(app: _App, key: str) -> None:
    await _until(lambda: key in app.keys, f"{key!r} never arrived: {app.keys}")


async def test_input_thread_sleeps_until_a_key_and_still_times_out_a_lone_escape(monkeypatch):
    theirs = _Selects(monkeypatch, "SelectSelector")  # Textual's driver makes one of these
    textual = _Running(LinuxDriver)
    await _until(lambda: theirs.timeouts, "Textual's input thread never selected")
    textual.close()
    # Textual's own polls (10 times a second); if it stops doing so, this driver can go
    assert theirs.timeouts[0] is not None and theirs.timeouts[0] > 0, theirs.timeouts
    ours = _Selects(monkeypatch, "DefaultSelector")
    quiet = _Running(QuietLinuxDriver)
    await _until(lambda: ours.timeouts, "the input thread never selected")
    os.write(quiet.master, b"q")
    await _key(quiet.app, "q")
    assert set(ours.timeouts) == {None}, ours.timeouts  # asleep until a key, then asleep again
    os.write(quiet.master, b"\x1b")  # no bytes follow: a key only once the parser's timeout passes
    await _key(quiet.app, "escape")
    waits = [t for t in ours.timeouts if t is not None]
    assert waits and all(0 <= t <= 1 for t in waits), ours.timeouts  # a timed wait for the Escape only
    await _until(lambda: ours.timeouts[-1] is None, f"not asleep again: {ours.timeouts}")
    # asleep with no timeout: only the exit event's wake can end the thread
    quiet.close()
    assert not quiet.thread.is_alive()
    quiet.driver.close()


def test_a_textual_without_the_private_parser_names_gets_its_own_driver(monkeypatch):
    import sys

    from memtop.tui.app import MemtopApp

    from memtop.live.pipeline import Pipeline, Status

    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is QuietLinuxDriver
    monkeypatch.setitem(sys.modules, "memtop.tui.driver", None)  # importing it now raises ImportError
    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is LinuxDriver
