"""Progress of long passes over a recording (report, export), on stderr when it is a terminal.

rich draws the bar; nothing is shown when stderr is piped or redirected, nor for a pass that ends
within ``DELAY_S`` (a bar that flashes for a moment is noise).
"""

from __future__ import annotations

import sys
import time
from types import TracebackType

DELAY_S = 1.0


def wanted(stream=None) -> bool:
    s = stream or sys.stderr
    try:
        return s.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Progress:
    """``with Progress("exporting", total) as p: p.update(done)``; a no-op when not ``wanted()``."""

    def __init__(self, what: str, total: float, enabled: bool | None = None, unit: str = "s") -> None:
        self.what = what
        self.total = max(float(total), 1e-9)
        self.enabled = wanted() if enabled is None else enabled
        self.unit = unit
        self._t0 = time.monotonic()
        self._bar = None
        self._task = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def update(self, done: float) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            if time.monotonic() - self._t0 < DELAY_S:
                return
            self._start()
        self._bar.update(self._task, completed=min(done, self.total))  # type: ignore[union-attr]

    def _start(self) -> None:
        from rich.console import Console  # only when a bar is drawn
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._bar.add_task(self.what, total=self.total)
        self._bar.start()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
