"""Run the memtop CLI on the recorded H100 NVML replies, with the driver's start-up delays.

For timing the ORDER of start-up on a machine without a GPU (what waits for what), never for
figures: those come from the GPU machine (bench/first_reading.sh). The delays are sleeps, which
release the GIL as pynvml's ctypes calls do.

usage: python bench/fake_nvml.py [--init-s 0.2] [--gpu-pid PID] -- [memtop arguments]
--gpu-pid: the GPU's process is this local one (the recording's pid is not here), so the host,
stack and perf collectors have a process to watch, as beside a training run.
  e.g. python bench/pty_bench.py 0.5 200x50 3 --until '[0-9]W' -- python bench/fake_nvml.py -- --no-mouse
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "nvml_h100.json"
# seconds per call, from the H100 (nvmlInit 0.1-0.3 s; bench/RESULTS.md's NVML costs for the rest)
DELAYS = {"device": 0.005, "gpm_supported": 0.001, "gpm_metrics": 0.002, "processes": 0.003, "link": 0.002}
CALL_S = 0.0005


def install(init_s: float, gpu_pid: int | None = None) -> None:
    from memtop.collectors import nvml_calls

    class SlowNvml(nvml_calls.ReplayNvml):
        def __init__(self) -> None:
            super().__init__(nvml_calls.json.loads(FIXTURE.read_text())["calls"])
            self._system = None

        def init(self):
            if self._system is None:  # RealNvml.init is idempotent: live starts the driver early
                import pynvml  # noqa: F401  (its import is part of the real start-up)

                time.sleep(init_s)
                self._system = super().init()
            return self._system

        def processes(self, i: int) -> list[tuple[int, int | None]]:
            got = super().processes(i)
            return [(gpu_pid, mem) for _, mem in got] if gpu_pid is not None else got

        def __getattribute__(self, name: str):
            attr = super().__getattribute__(name)
            if name.startswith("_") or name == "init" or not callable(attr):
                return attr

            def slow(*a, **kw):
                time.sleep(DELAYS.get(name, CALL_S))
                return attr(*a, **kw)

            return slow

    nvml_calls.RealNvml = SlowNvml  # type: ignore[misc]  # read by collectors.nvml at its import


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    opts, rest = argv[:cut], argv[cut + 1 :]
    init_s = float(opts[opts.index("--init-s") + 1]) if "--init-s" in opts else 0.2
    gpu_pid = int(opts[opts.index("--gpu-pid") + 1]) if "--gpu-pid" in opts else None
    install(init_s, gpu_pid)
    from memtop.cli import main as memtop_main

    sys.argv = ["memtop", *rest]
    sys.exit(memtop_main(rest))


if __name__ == "__main__":
    main()
