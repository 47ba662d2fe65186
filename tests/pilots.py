"""Waiting on an App under a Pilot: a condition polled, bounded for a loaded machine (not a pace)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(pilot, cond: Callable[[], object], timeout: float = 60.0) -> bool:
    """True once ``cond()`` holds; False after ``timeout`` s. A message the app posts (a notice, a
    frame) is handled on a later turn of its loop: one ``pilot.pause()`` is not enough under load."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        await pilot.pause(0.05)
    return True


async def refreshed(pilot, timeout: float = 60.0) -> bool:
    """True once the screen has laid out and painted what was asked of it before this call (Textual
    runs ``call_after_refresh`` callbacks only when nothing is left to refresh); False after
    ``timeout`` s. For a screen read as a reference, where there is no condition to wait on: a
    ``pilot.pause(0.2)`` there is a guess that a loaded machine makes wrong."""
    try:
        await asyncio.wait_for(pilot.app.screen.wait_for_refresh(), timeout)
    except TimeoutError:
        return False
    return True


async def steady(pilot, look: Callable[[], object], timeout: float = 60.0) -> bool:
    """True once ``look()`` reads the same on each side of a refresh (what a paint, a layout or a mount
    it started would change has come); False after ``timeout`` s. For a screen kept as a reference."""
    end = time.monotonic() + timeout
    before = look()
    while time.monotonic() < end:
        if not await refreshed(pilot, max(0.0, end - time.monotonic())):
            return False
        now = look()
        if now == before:
            return True
        before = now
    return False


async def opened(pilot, kind: type, timeout: float = 60.0) -> bool:
    """True once a screen of ``kind`` is on top, composed and focused as it focuses itself (a key typed
    before then goes to the screen under it, or to no input); False after ``timeout`` s."""

    def ready() -> bool:
        s = pilot.app.screen
        return isinstance(s, kind) and bool(s.children) and (s.focused is not None or not s.focus_chain)

    return await until(pilot, ready, timeout)
