#!/usr/bin/env bash
# First lines of a 2-GPU device call: install memtop and the carried wheels, then what the machine
# gives (GPU count, topology, NVLink state, py-spy, GPM NVLink ids, one GPM NVLink reading per GPU,
# NVML's NVLink throughput fields as the non-GPM fallback).
# usage (from the tree's root): bash bench/workloads/ddp_smoke.sh WHEELS_DIR OUTFILE
# (WHEELS_DIR "-": memtop and its wheels are installed already)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
whl=$1 out=$2
{
  if [ "$whl" != - ]; then
    python3 -m pip install -q --no-index --find-links "$whl" textual py-spy nvitop
    python3 -m pip install -q --no-index --no-deps --no-build-isolation .
  fi
  python3 -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version --format=csv
  nvidia-smi topo -m
  nvidia-smi nvlink -s
  command -v py-spy memtop
  python3 - <<'PY'
import time
import pynvml as n
n.nvmlInit()
print("GPM NVLink ids", n.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, n.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC)
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    try:
        a = n.nvmlGpmSampleAlloc(); b = n.nvmlGpmSampleAlloc()
        n.nvmlGpmSampleGet(h, a); time.sleep(0.2); n.nvmlGpmSampleGet(h, b)
        m = n.c_nvmlGpmMetricsGet_t(); m.version = n.NVML_GPM_METRICS_GET_VERSION; m.numMetrics = 2
        m.sample1 = a; m.sample2 = b
        m.metrics[0].metricId = 60; m.metrics[1].metricId = 61
        n.nvmlGpmMetricsGet(m)
        print(i, "GPM NVLink rx/tx MiB/s", [(x.metricId, x.nvmlReturn, round(x.value, 1)) for x in m.metrics[:2]])
    except n.NVMLError as e:
        print(i, "GPM", e)
    try:
        ids = [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX]
        print(i, "NVML NVLink fields", [(v.fieldId, v.nvmlReturn) for v in n.nvmlDeviceGetFieldValues(h, ids)])
    except n.NVMLError as e:
        print(i, "fields", e)
PY
  memtop doctor
} >"$out" 2>&1
