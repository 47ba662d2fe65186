"""torch.profiler's names as the agent uses them (see __init__.py)."""

import json
import os
import sys
import threading
import time

_events: list | None = None  # the running profile's events


class ProfilerActivity:
    CPU = "cpu"
    CUDA = "cuda"


class _ExperimentalConfig:
    def __init__(self, profile_all_threads: bool = False) -> None:
        self.profile_all_threads = profile_all_threads


class record_function:
    def __init__(self, name: str) -> None:
        self.name = name
        self.t0 = 0

    def __enter__(self) -> "record_function":
        self.t0 = time.time_ns()
        return self

    def __exit__(self, *_: object) -> None:
        events = _events
        if events is not None:
            t1 = time.time_ns()
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": self.name,
                    "pid": os.getpid(),
                    "tid": threading.get_native_id(),
                    "ts": self.t0 / 1000,
                    "dur": (t1 - self.t0) / 1000,
                }
            )


class profile:
    def __init__(
        self, activities: list, with_stack: bool = False, experimental_config: object = None
    ) -> None:
        self.events: list = []

    def start(self) -> None:
        global _events
        _events = []
        sys.modules["torch"].autograd.profiler._is_profiler_enabled = True

    def stop(self) -> None:
        global _events
        self.events, _events = _events or [], None
        sys.modules["torch"].autograd.profiler._is_profiler_enabled = False

    def export_chrome_trace(self, path: str) -> None:
        meta = {"ph": "M", "name": "process_name", "pid": os.getpid(), "args": {"name": "python"}}
        with open(path, "w") as fh:
            json.dump({"traceEvents": [meta, *self.events]}, fh)
