"""What a replayed run offers the TUI: the seam between the app and ReplaySource (typed, so a
live view can never be handed replay actions it does not have)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Playback(Protocol):
    """A recording played into a Pipeline. Positions are seconds from the recording's start."""

    position: float
    speed: float
    paused: bool
    loop: bool  # starts over at the end (the demo)
    # per GPU, (offset, label) where each run of one phase label starts, over the whole recording
    # (filled in by a background scan; partial until ``scanned``)
    phase_runs: dict[int, tuple[tuple[float, str], ...]]
    scanned: bool

    @property
    def duration(self) -> float: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def toggle_pause(self) -> None: ...

    def seek(self, offset: float) -> None: ...

    def set_speed(self, speed: float) -> None: ...

    def next_change(self, gpu: int | None = None) -> float | None: ...

    def prev_change(self, gpu: int | None = None) -> float | None: ...
