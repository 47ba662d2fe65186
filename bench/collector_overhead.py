"""CPU cost of memtop's GPU collection vs a minimal loop making the same NVML/GPM calls.

Side by side in one run, same rates (10 Hz GPM + getters, 1 Hz sample-buffer drain and
process list). Prints JSON: CPU % of one core for each, and the ratio.
usage: python bench/collector_overhead.py [SECONDS]
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pynvml

from memtop.live.sampler import Sampler, SamplerConfig


def cpu_of(fn, secs: float) -> float:
    c0, w0 = time.process_time(), time.monotonic()
    fn(secs)
    return 100 * (time.process_time() - c0) / (time.monotonic() - w0)


def bare(secs: float) -> None:
    pynvml.nvmlInit()
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    prev = {}
    ids = [1, 2, 3, 5, 10, 20, 21, 60, 61]
    last_drain = 0.0
    end = time.monotonic() + secs
    due = time.monotonic()
    while time.monotonic() < end:
        for i, h in enumerate(hs):
            s = pynvml.nvmlGpmSampleAlloc()
            pynvml.nvmlGpmSampleGet(h, s)
            if i in prev:
                mg = pynvml.c_nvmlGpmMetricsGet_t()
                mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
                mg.numMetrics = len(ids)
                mg.sample1, mg.sample2 = prev[i], s
                for k, m in enumerate(ids):
                    mg.metrics[k].metricId = m
                pynvml.nvmlGpmMetricsGet(mg)
                pynvml.nvmlGpmSampleFree(prev[i])
            prev[i] = s
            pynvml.nvmlDeviceGetUtilizationRates(h)
            pynvml.nvmlDeviceGetPowerUsage(h)
            pynvml.nvmlDeviceGetTemperature(h, 0)
            pynvml.nvmlDeviceGetClockInfo(h, 1)
            pynvml.nvmlDeviceGetClockInfo(h, 2)
            pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            pynvml.nvmlDeviceGetMemoryInfo(h)
            if time.monotonic() - last_drain >= 1:
                for st in (0, 1, 2):
                    pynvml.nvmlDeviceGetSamples(h, st, 0)
                pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        if time.monotonic() - last_drain >= 1:
            last_drain = time.monotonic()
        due += 0.1
        time.sleep(max(0, due - time.monotonic()))
    pynvml.nvmlShutdown()


def memtop_gpu(secs: float) -> None:
    s = Sampler(SamplerConfig(stacks=False, perf=False, host_interval=3600), on_frame=lambda f: None)
    s.start()
    threading.Event().wait(secs)
    s.stop()


def memtop_full(secs: float) -> None:
    s = Sampler(SamplerConfig(), on_frame=lambda f: None)
    s.start()
    threading.Event().wait(secs)
    s.stop()


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 15
    res = {}
    for name, fn in (
        ("bare_nvml_loop", bare),
        ("memtop_gpu_collectors", memtop_gpu),
        ("bare_nvml_loop_2", bare),
        ("memtop_all_collectors", memtop_full),
    ):
        res[name] = round(cpu_of(fn, secs), 2)
    bare_avg = (res["bare_nvml_loop"] + res["bare_nvml_loop_2"]) / 2
    res["ratio_gpu_collectors_vs_bare"] = round(res["memtop_gpu_collectors"] / bare_avg, 2)
    print(json.dumps(res))
