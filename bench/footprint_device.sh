#!/usr/bin/env bash
# On the GPU machine (issue #39): live memtop (this tree, installed) beside an older tree (the device
# copy's root, i.e. main) and nvitop -m full, all at 1 s in a 200x50 pty under a bf16 matmul load,
# alternated in one run; then a py-spy profile of memtop's defaults, and rss_parts.py.
# usage (from this tree's root on the device): bash bench/footprint_device.sh OUTDIR [S] [WARM] [ROUNDS] [OLDTREE]
set -u
R=$1; S=${2:-16}; W=${3:-6}; N=${4:-1}; OLD=${5:-../..}
python3 -m pip install -q --no-index --find-links "$OLD/.whl" textual py-spy nvidia-ml-py nvitop >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/oldsite "$OLD" >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/machine.txt"
python3 bench/rss_parts.py --no-ssl > "$R/rss_parts.json" 2>&1
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+4*$N*($S+$W+3)+60
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
B="python3 bench/pty_bench.py $S 200x50 $W"
for k in $(seq "$N"); do
  $B --threads -- memtop --no-mouse >> "$R/tui.jsonl"
  $B --threads -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
  $B -- env PYTHONPATH=/tmp/oldsite python3 -P -m memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
  $B -- env PYTHONPATH=/tmp/oldsite python3 -P -m memtop --no-mouse >> "$R/tui.jsonl"
  $B -- nvitop -m full --interval 1 >> "$R/tui.jsonl"
done
if [ "${PROFILE:-1}" = 1 ]; then
  python3 bench/pty_bench.py 22 200x50 3 -- memtop --no-mouse > "$R/profile_bench.json" &
  b=$!
  sleep 6
  P=$(pgrep -f "bin/memtop --no-mouse" | head -1)
  py-spy record -p "$P" -d 15 -r 200 -f raw -o "$R/profile_default.txt" --threads --subprocesses --nonblocking > "$R/pyspy.log" 2>&1
  wait $b
fi
kill $load
