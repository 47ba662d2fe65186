#!/usr/bin/env bash
# Issue 36 on the GPU machine: bench/health_device.py (nvidia-smi -q against memtop's health reads,
# energy against the driver counter; with STEPS, only those) -> $OUT/health.tgz
# usage (from the tree's root on the device): bash bench/health_device.sh [STEP ...]
set -u
R=$OUT/r; mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --target /tmp/site ../../.whl/*.whl >"$R/install.txt" 2>&1
# memtop as installed (collectors/ and tui/ are memtop.collectors and memtop.tui): a view of symlinks
V=/tmp/view; rm -rf $V; mkdir -p $V/memtop
for f in "$PWD"/memtop/*; do ln -s "$f" $V/memtop/; done
ln -s "$PWD/collectors" $V/memtop/collectors; ln -s "$PWD/tui" $V/memtop/tui
export PYTHONPATH=$V:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --version > "$R/smi_version.txt" 2>&1
nvidia-smi --help-query-gpu > "$R/smi_help_query.txt" 2>&1
nvidia-smi -q -x -i 0 > "$R/smi_before.xml" 2>&1
nvidia-smi nvlink -e -i 0 > "$R/smi_nvlink.txt" 2>&1
(dmesg 2>&1 | grep -i -E "xid|nvrm" | tail -20) > "$R/dmesg_xid.txt"
timeout 200 python3 bench/health_device.py "$R" "$@" > "$R/log.txt" 2>&1
rm -f "$R/energy.memtop-wal" "$R/energy.memtop-shm"
tar czf "$OUT/health.tgz" -C "$R" .
tail -c 6000 "$R/log.txt"
