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


async def _wakeups_in_a_second(cls: type[LinuxDriver]) -> tuple[int, _App, LinuxDriver, threading.Thread, int]:
    app = _App()
    master, slave = pty.openpty()
    tty.setraw(slave)  # as the app sets it: keys arrive one by one
    driver = cls(app)  # type: ignore[arg-type]
    driver.fileno = slave
    thread = threading.Thread(target=driver.run_input_thread, daemon=True)
    thread.start()
    await asyncio.sleep(0.2)
    before = _switches(thread.native_id)
    await asyncio.sleep(1.0)
    return _switches(thread.native_id) - before, app, driver, thread, master


async def _key(app: _App, key: str, timeout: float = 2.0) -> None:
    end = time.monotonic() + timeout
    while key not in app.keys:
        assert time.monotonic() < end, f"{key!r} never arrived: {app.keys}"
        await asyncio.sleep(0.02)


async def test_input_thread_sleeps_until_a_key_and_still_times_out_a_lone_escape():
    theirs, *_, their_driver, their_thread, _ = await _wakeups_in_a_second(LinuxDriver)
    their_driver.exit_event.set()
    ours, app, driver, thread, master = await _wakeups_in_a_second(QuietLinuxDriver)
    # Textual's own polls 10 times a second; if it stops doing so, this driver can go
    assert theirs >= 5 and ours <= 1, (theirs, ours)
    os.write(master, b"q")
    await _key(app, "q")
    os.write(master, b"\x1b")  # no bytes follow: a key only once the parser's timeout passes
    await _key(app, "escape")
    t = time.monotonic()
    driver.exit_event.set()
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - t < 0.5
    their_thread.join(2)
    driver.close()


def test_a_textual_without_the_private_parser_names_gets_its_own_driver(monkeypatch):
    import sys

    from memtop.tui.app import MemtopApp

    from memtop.pipeline import Pipeline, Status

    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is QuietLinuxDriver
    monkeypatch.setitem(sys.modules, "memtop.tui.driver", None)  # importing it now raises ImportError
    assert MemtopApp(Pipeline(Status("live")), hangup_guard=False).driver_class is LinuxDriver
