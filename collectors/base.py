"""The one small Protocol every collector implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memtop.core.model import Capability


class Collector(Protocol):
    """A source of Frame parts.

    ``sample`` may block (NVML, /proc, subprocesses): the sampler always calls it in a
    worker thread, one collector per thread, so one slow source never delays another.
    Faults become capabilities or notes, never exceptions out of ``sample``.
    """

    name: str
    interval: float  # seconds between samples (the mean, when jittered)
    jitter: float  # each interval is drawn from interval x (1 ± jitter); 0 for fixed rates

    def start(self) -> None: ...

    def sample(self, now: float) -> Sequence[object]:
        """Return Frame parts (GpuSample, SeriesChunk, HostSample, StackSample, PerfSample)."""
        ...

    def capabilities(self) -> tuple[Capability, ...]: ...

    def stop(self) -> None: ...
