"""A stand-in for the part of PyTorch that memtop's agent calls (tests only, never evidence that a
real capture works): a profiler that keeps the record_function ranges opened while it runs, stamped
on CLOCK_REALTIME microseconds as Kineto stamps its trace, and exports them as Chrome trace JSON."""

from types import SimpleNamespace

from . import profiler

__version__ = "0.0+stub"
autograd = SimpleNamespace(profiler=SimpleNamespace(_is_profiler_enabled=False))
cuda = SimpleNamespace(is_initialized=lambda: False)
__all__ = ["autograd", "cuda", "profiler"]
