"""Record real NVML replies of the per-process calls (processes, process_utilization) beside the
GPU's, for CI to replay (tests/data/nvml_procs_h100.json).

usage: python bench/procs_fixture.py OUT.json [SECONDS]  (on a GPU machine with processes on GPU 0)
"""

from __future__ import annotations

import sys
import time

from memtop.collectors.nvml import NvmlCollector
from memtop.collectors.nvml_calls import RealNvml, RecordingNvml


def main() -> None:
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    rec = RecordingNvml(RealNvml())
    col = NvmlCollector(rec, 0.1, use_gpm=True, series=False)
    col.start()
    out = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        for r in col.readers[:1]:
            g = r.sample(time.monotonic())[0]
            out.append(g)
        time.sleep(0.1)
    # only what the per-process tests replay: the start-up calls and GPU 0's process calls
    keep = {"init", "device", "gpm_supported", "processes", "process_utilization"}
    rec.log = [e for e in rec.log if e["m"] in keep and (not e["a"] or e["a"][0] == 0)]
    rec.save(sys.argv[1], {"recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": secs})
    last = out[-1]
    print(f"recorded {len(rec.log)} calls; last per-process figures: {last.proc_util}")


if __name__ == "__main__":
    main()
