"""Record real NVML calls and replies (GPM and NVML-only modes) for CI to replay.

usage: python bench/nvml_fixture.py OUT.json  (run on a GPU machine, ideally under load)
"""

from __future__ import annotations

import sys
import time

from memtop.collectors.nvml import NvmlCollector
from memtop.collectors.nvml_calls import RealNvml, RecordingNvml


def run(col: NvmlCollector, secs: float) -> int:
    col.start()
    n = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        for r in col.readers:
            r.sample(time.monotonic())
            n += 1
        time.sleep(r.interval if col.readers else 0.1)
    return n


def main() -> None:
    rec = RecordingNvml(RealNvml())
    n_gpm = run(NvmlCollector(rec, 0.1, use_gpm=True), 3.0)
    n_nvml = run(NvmlCollector(rec, 0.2, use_gpm=False), 1.5)
    rec.save(
        sys.argv[1],
        {"recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "samples_gpm": n_gpm, "samples_nvml": n_nvml},
    )
    print(f"recorded {len(rec.log)} calls ({n_gpm} GPM samples, {n_nvml} NVML-only samples)")


if __name__ == "__main__":
    main()
