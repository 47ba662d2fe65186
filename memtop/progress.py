"""Progress of long passes over a recording (report, export), on stderr when it is a terminal.

rich draws the bar; nothing is shown when stderr is piped or redirected, nor for a pass that ends
within ``DELAY_S`` (a bar that flashes for a moment is noise).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich loads only when a bar is drawn
    from rich.progress import Progress as Bar
    from rich.progress import TaskID

DELAY_S = 1.0


def wanted() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Progress:
    """``with Progress("exporting", total) as p: p.update(done)``; a no-op when not ``wanted()``."""

    def __init__(self, what: str, total: float, enabled: bool | None = None) -> None:
        self.what = what
        self.total = max(float(total), 1e-9)
        self.enabled = wanted() if enabled is None else enabled
        self._t0 = time.monotonic()
        self._bar: tuple[Bar, TaskID] | None = None  # the bar and its one task, once drawn

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def update(self, done: float) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            if time.monotonic() - self._t0 < DELAY_S:
                return
            self._bar = self._start(min(done, self.total))
        bar, task = self._bar
        bar.update(task, completed=min(done, self.total))

    def _start(self, done: float) -> tuple[Bar, TaskID]:
        from rich.console import Console  # only when a bar is drawn
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        task = bar.add_task(self.what, total=self.total)
        bar.update(task, completed=done)  # before the first frame
        bar.start()
        return bar, task

    def close(self) -> None:
        if self._bar is not None:
            self._bar[0].stop()
            self._bar = None
