"""LiveController: an exit never waits for a slow NVML start, and a sampler that starts after the
exit is stopped all the same. The sampler is a stand-in: this tests the hand-off, not a collector."""

from __future__ import annotations

import argparse
import threading
import time

import memtop.live.sampler
from memtop.commands.local import LiveController
from memtop.live.pipeline import Pipeline, Status


class SlowSampler:
    """Starts the way nvmlInit does on a node without persistence mode (seconds): here, whenever
    the test opens ``gate``."""

    made: list[SlowSampler] = []
    gate = threading.Event()

    def __init__(self, cfg: object, on_frame: object) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.stops = 0
        SlowSampler.made.append(self)

    def start(self) -> None:
        assert SlowSampler.gate.wait(60)  # (a hang bound for a loaded machine)
        self.started.set()

    def stop(self) -> None:
        self.stops += 1
        self.stopped.set()

    def run_meta(self) -> dict:
        return {"gpus": [{"name": "late"}]}


def _controller(monkeypatch) -> LiveController:
    SlowSampler.made.clear()
    SlowSampler.gate = threading.Event()
    monkeypatch.setattr(memtop.live.sampler, "Sampler", SlowSampler)
    monkeypatch.setattr(
        memtop.live.sampler.SamplerConfig, "from_args", classmethod(lambda cls, a, recording: cls())
    )
    p = Pipeline(Status("live"), meta={"host": "test"})
    return LiveController(argparse.Namespace(), p)


def test_an_exit_during_a_slow_start_does_not_wait_and_the_late_sampler_stops(monkeypatch):
    c = _controller(monkeypatch)
    c.start()
    while not SlowSampler.made:
        time.sleep(0.01)
    joined: list[float | None] = []
    c._thread.join = lambda timeout=None: joined.append(timeout)  # type: ignore[method-assign]
    c.stop()  # while the sampler's start is held: no join of the start-up (it once waited up to 5 s)
    s = SlowSampler.made[0]
    assert not joined and not s.started.is_set() and s.stops == 0
    SlowSampler.gate.set()
    assert s.stopped.wait(60), "the sampler that started after the exit was left running"
    assert s.started.is_set() and s.stops == 1
    del c._thread.join
    c._thread.join(60)
    assert "gpus" not in c.pipeline.meta  # an ended view takes no metadata from it


def test_a_started_sampler_is_stopped_once_by_stop(monkeypatch):
    c = _controller(monkeypatch)
    SlowSampler.gate.set()
    c.start()
    c._thread.join(60)
    s = SlowSampler.made[0]
    assert c.pipeline.meta["gpus"] == [{"name": "late"}]
    c.stop()
    c.stop()
    assert s.stops == 1
