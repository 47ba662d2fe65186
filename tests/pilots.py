"""Waiting on an App under a Pilot: a condition polled, bounded for a loaded machine (not a pace)."""

from __future__ import annotations

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
