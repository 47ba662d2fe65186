"""torch.profiler's names as the agent uses them (see __init__.py)."""

import json
import os
import sys
import threading
import time

_events: list | None = None  # the running profile's events
_only: int | None = None  # the thread whose ranges it records (None: every thread's)


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
        if events is not None and _only in (None, threading.get_ident()):
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
        # as PyTorch's: started from another thread, it records only that thread's CPU ranges
        # unless profile_all_threads is set
        self.all_threads = bool(getattr(experimental_config, "profile_all_threads", False))

    def start(self) -> None:
        global _events, _only
        _events = []
        _only = None if self.all_threads else threading.get_ident()
        sys.modules["torch"].autograd.profiler._is_profiler_enabled = True

    def stop(self) -> None:
        global _events
        self.events, _events = _events or [], None
        sys.modules["torch"].autograd.profiler._is_profiler_enabled = False

    def export_chrome_trace(self, path: str) -> None:
        meta = {"ph": "M", "name": "process_name", "pid": os.getpid(), "args": {"name": "python"}}
        with open(path, "w") as fh:
            json.dump({"traceEvents": [meta, *self.events]}, fh)
