"""bench/trace_job.py's loop, then the CPU time of `memtop run`'s agent thread in this process, read from
/proc/self/task/<its native id>/stat (bench/agent_idle.sh): issue #38's "agent idle CPU" figure.
usage: agent_idle_job.py SECONDS   (prints trace_job's JSON lines, then one {"agent_cpu_s": …} line)
"""

import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)


def main() -> None:
    seconds = sys.argv[1]
    t0 = time.monotonic()
    sys.argv = ["trace_job.py", seconds, "/dev/null"]
    runpy.run_path(str(Path(__file__).with_name("trace_job.py")), run_name="__main__")
    agents = [t for t in threading.enumerate() if t.name.startswith("memtop-agent")]
    print(
        json.dumps(
            {
                "agent_threads": len(agents),
                "agent_cpu_s": sum(thread_cpu_s(t.native_id) for t in agents if t.native_id),
                "wall_s": round(time.monotonic() - t0, 3),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
