#!/usr/bin/env bash
# On the GPU machine: the tree end to end on a real GPU. The GPU tests (pytest -m gpu, wheels of pytest
# carried in .whl_test), then a torch job (bench/workload.py, 3 s phases) watched at once by `memtop
# record` (40 s, defaults, its markers attached) and by the live view at its defaults (20 s in a 120x40
# pty; the terminal's bytes kept: `cat live_120x40.bytes` in a 120x40 terminal shows the last screen),
# then `memtop report` of the recording.
# usage (from the tree's root on the device): bash bench/device_e2e.sh OUTDIR
set -u
R=$1; T=$PWD
mkdir -p "$R"
python3 -m pip install -q --no-index --find-links .whl --find-links .whl_test textual py-spy nvidia-ml-py \
  prometheus_client psutil pytest pytest-timeout pytest-asyncio >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/machine.txt"
cd /tmp  # (not the checkout: its memtop/ would shadow the installed package)
python3 -P -m pytest -q -p no:cacheprovider -o addopts=-ra -c "$T/pyproject.toml" --rootdir "$T" -m gpu \
  "$T/tests/test_gpu.py" > "$R/pytest_gpu.txt" 2>&1
(cd "$T/bench" && python3 workload.py --markers /tmp/markers.jsonl --phase-s 3 > "$R/workload.log" 2>&1) &
job=$!
for _ in $(seq 120); do  # (at most 60 s: a job that never starts must not hang the call)
  nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break
  sleep 0.5
done
memtop record -o /tmp/run.memtop --duration 40 --markers /tmp/markers.jsonl > "$R/record.log" 2>&1 &
rec=$!
python3 "$T/bench/pty_bench.py" 20 120x40 3 --dump "$R/live_120x40.bytes" -- memtop --no-mouse > "$R/live.json" 2>&1
wait $rec
memtop report /tmp/run.memtop > "$R/report.txt" 2>&1
echo "report exit $?" >> "$R/report.txt"
kill $job 2>/dev/null
