"""CPU time (thread time, not wall) of each NVML call memtop makes, and of nvmlGpmMetricsGet by
how many metrics it is asked for. Run on the GPU machine, ideally under load.

usage: python bench/nvml_cost.py [N]   (prints one JSON line per measurement)
"""

from __future__ import annotations

import json
import sys
import time

from memtop.collectors.nvml_calls import RealNvml

from memtop.core.metrics import GPM_METRICS


def cpu_us(fn, n: int) -> float:
    t = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t) / n * 1e6


def gpm_cost(nv: RealNvml, i: int, metrics: dict[str, int], n: int) -> float:
    """Mean CPU time of nvmlGpmMetricsGet alone over n sample pairs 100 ms apart."""
    pm = nv._nv
    h = nv._handles[i]
    total = 0.0
    for _ in range(n):
        a, b = pm.nvmlGpmSampleAlloc(), pm.nvmlGpmSampleAlloc()
        pm.nvmlGpmSampleGet(h, a)
        time.sleep(0.1)
        pm.nvmlGpmSampleGet(h, b)
        mg = pm.c_nvmlGpmMetricsGet_t()
        mg.version = pm.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(metrics)
        mg.sample1, mg.sample2 = a, b
        for k, mid in enumerate(metrics.values()):
            mg.metrics[k].metricId = mid
        t = time.thread_time()
        pm.nvmlGpmMetricsGet(mg)
        total += time.thread_time() - t
        pm.nvmlGpmSampleFree(a)
        pm.nvmlGpmSampleFree(b)
    return total / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    nv = RealNvml()
    nv.init()
    i = 0
    calls = {
        "utilization": lambda: nv.utilization(i),
        "power_mw": lambda: nv.power_mw(i),
        "temperature": lambda: nv.temperature(i),
        "clocks": lambda: nv.clocks(i),
        "clock_events": lambda: nv.clock_events(i),
        "memory": lambda: nv.memory(i),
        "processes": lambda: nv.processes(i),
        "gpm_sample_get": lambda: nv._nv.nvmlGpmSampleGet(nv._handles[i], sample),
        # (foot7) the slower readings: per-process utilisation (each second), Xid events (each second),
        # the energy counter and the health counters (every HEALTH_EVERY_S)
        "process_utilization": lambda: nv.process_utilization(i, int((time.time() - 2) * 1e6)),
        "xids": lambda: nv.xids(i),
        "energy_mj": lambda: nv.energy_mj(i),
        "health": lambda: nv.health(i),
    }
    sample = nv._nv.nvmlGpmSampleAlloc()
    for name, fn in calls.items():
        k = n if name not in ("energy_mj", "health") else max(5, n // 10)
        print(json.dumps({"call": name, "cpu_us": round(cpu_us(fn, k), 1)}), flush=True)
    nv._nv.nvmlGpmSampleFree(sample)
    ids = {m.name: m.gpm_id for m in GPM_METRICS if m.gpm_id is not None}
    names = list(ids)
    for subset in (names[:1], names[:5], names[:7], names):
        sub = {k: ids[k] for k in subset}
        print(
            json.dumps(
                {
                    "call": "gpm_metrics_get",
                    "metrics": len(sub),
                    "cpu_us": round(gpm_cost(nv, i, sub, max(10, n // 10)), 1),
                }
            ),
            flush=True,
        )
    nv.shutdown()


if __name__ == "__main__":
    main()
