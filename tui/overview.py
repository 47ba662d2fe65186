"""One line for the whole recording: the selected GPU's phases in their colours and where playback is.
Click to jump there. Replay only; the phases come from the Playback's background scan."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.strip import Strip
from textual.widget import Widget

from memtop.live.playback import Playback

from .palette import Look

_PLAIN = Style()
_CURSOR = Style(reverse=True, bold=True)


def cells(runs: tuple[tuple[float, str], ...], duration: float, width: int) -> list[str | None]:
    """The phase label under the middle of each of ``width`` cells (None: not scanned yet)."""
    if width <= 0 or duration <= 0 or not runs:
        return [None] * max(0, width)
    starts = [t for t, _ in runs]
    out: list[str | None] = []
    for i in range(width):
        t = (i + 0.5) * duration / width
        k = bisect_right(starts, t) - 1
        out.append(runs[k][1] if k >= 0 else None)
    return out


class Overview(Widget):
    DEFAULT_CSS = "Overview { height: 1; }"

    def __init__(self, playback: Playback, gpu: Callable[[], int], look: Callable[[], Look], **kw) -> None:
        super().__init__(**kw)
        self.playback, self.gpu, self.look = playback, gpu, look  # (the app's: theme, --ascii, letters)
        self._key: tuple | None = None

    def on_mount(self) -> None:
        self.set_interval(0.5, self.update)

    def _cursor(self, width: int) -> int:
        d = self.playback.duration
        return min(width - 1, int(self.playback.position / d * width)) if d > 0 else 0

    def update(self) -> None:
        """Refresh only when the cursor cell, the GPU or the scan changed."""
        w = self.size.width
        pb = self.playback
        key = (
            w,
            self.gpu(),
            self._cursor(w) if w else 0,
            len(pb.phase_runs.get(self.gpu(), ())),
            pb.scanned,
            self.look().letters,
        )
        if key != self._key:
            self._key = key
            self.refresh()

    def render_line(self, y: int) -> Strip:
        w = self.size.width
        if y != 0 or w <= 0:
            return Strip.blank(w)
        pb = self.playback
        labs = cells(pb.phase_runs.get(self.gpu(), ()), pb.duration, w)
        cur = self._cursor(w)
        lk = self.look()
        segs = []
        for i, lab in enumerate(labs):
            if i == cur:
                segs.append(Segment("|" if lk.glyphs.ascii else "┃", _CURSOR))
            elif lab is None:
                segs.append(Segment("." if lk.glyphs.ascii else "·", _PLAIN))
            else:
                segs.append(Segment(*lk.mark(lab)))
        return Strip(segs, w)

    def on_click(self, event: events.Click) -> None:
        w = self.size.width
        if w > 0:
            self.playback.seek((event.x + 0.5) / w * self.playback.duration)
