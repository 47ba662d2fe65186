#!/usr/bin/env bash
# Issue 36 on the GPU machine: nvidia-smi's health/energy view before and after, then
# bench/health_device.py (NVML call cost, roofline vs known kernels, energy vs the driver counter).
# usage (from the tree's root on the device): bash bench/health_device.sh   -> $OUT/health.tgz
set -u
R=$OUT/r; mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --target /tmp/site ../../.whl/*.whl >"$R/install.txt" 2>&1
# memtop as installed (collectors/ and tui/ are memtop.collectors and memtop.tui): a view of symlinks
V=/tmp/view; rm -rf $V; mkdir -p $V/memtop
for f in "$PWD"/memtop/*; do ln -s "$f" $V/memtop/; done
ln -s "$PWD/collectors" $V/memtop/collectors; ln -s "$PWD/tui" $V/memtop/tui
export PYTHONPATH=$V:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
Q=ECC,ROW_REMAPPER,POWER,PAGE_RETIREMENT,PERFORMANCE  # (PCIe is no -d section: the query below)
nvidia-smi -q -d $Q > "$R/smi_before.txt" 2>&1
nvidia-smi --help-query-gpu 2>&1 | grep -i -B1 -A3 "energy" > "$R/smi_energy_help.txt"
nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max --format=csv >> "$R/smi_before.txt" 2>&1
nvidia-smi nvlink -e >> "$R/smi_before.txt" 2>&1
timeout 300 python3 bench/health_device.py "$R" > "$R/log.txt" 2>&1
nvidia-smi -q -d $Q > "$R/smi_after.txt" 2>&1
rm -f "$R/energy.memtop-wal" "$R/energy.memtop-shm"
tar czf "$OUT/health.tgz" -C "$R" .
tail -c 5000 "$R/log.txt"
