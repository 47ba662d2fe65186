#!/usr/bin/env bash
# On the GPU machine, under a bf16 matmul load, in 200x50 ptys, memtop side by side with nvitop:
# 1. seconds to the first power reading on screen, STARTS starts of each command, interleaved
#    (memtop defaults, memtop --interval 1 unless QUICK is set, the tree installed in $OLD if set,
#    nvitop -m full);
# 2. ROUNDS interleaved rounds of WARM+SECONDS windows: RSS at the window's end (10 s with the
#    defaults), CPU % of one core and KiB/s over the window: memtop defaults, the $OLD tree's
#    defaults if set, --no-stacks and --no-stacks --interval 1 (1 Hz) unless QUICK is set, and
#    nvitop -m full --interval 1;
# 3. bench/rss_parts.py: what the RSS is made of (NVML, GPM, Textual, memtop's modules, what
#    release_free_memory gives back).
# usage: PY=python3 [OLD=/tmp/oldsite] [QUICK=1] bash bench/first_reading.sh OUTDIR [STARTS] [SECONDS] [WARM] [ROUNDS]
# (memtop and nvitop importable by $PY; -P keeps a source checkout in the cwd off sys.path)
R=$1; N=${2:-10}; S=${3:-6}; W=${4:-4}; K=${5:-2}
PY=${PY:-python3}
POWER='[0-9]W'  # memtop's GPU row "312W", nvitop's "312W / 700W"
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+4*$N*4+4*$K*($S+$W+2)+60
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
bench() { $PY bench/pty_bench.py "$@"; }
for i in $(seq "$N"); do
  bench 0.5 200x50 2 --until "$POWER" -- $PY -P -m memtop --no-mouse >> "$R/first.jsonl"
  [ -z "${QUICK:-}" ] && bench 0.5 200x50 2 --until "$POWER" -- $PY -P -m memtop --no-mouse --interval 1 >> "$R/first.jsonl"
  [ -n "${OLD:-}" ] && bench 0.5 200x50 2 --until "$POWER" -- env PYTHONPATH="$OLD:$PYTHONPATH" $PY -P -m memtop --no-mouse >> "$R/first_old.jsonl"
  bench 0.5 200x50 2 --until "$POWER" -- $PY -P -m nvitop -m full >> "$R/first.jsonl"
done
for i in $(seq "$K"); do
  bench "$S" 200x50 "$W" -- $PY -P -m memtop --no-mouse >> "$R/steady.jsonl"
  [ -n "${OLD:-}" ] && bench "$S" 200x50 "$W" -- env PYTHONPATH="$OLD:$PYTHONPATH" $PY -P -m memtop --no-mouse >> "$R/steady_old.jsonl"
  if [ -z "${QUICK:-}" ]; then
    bench "$S" 200x50 "$W" -- $PY -P -m memtop --no-mouse --no-stacks >> "$R/steady.jsonl"
    bench "$S" 200x50 "$W" -- $PY -P -m memtop --no-mouse --no-stacks --interval 1 >> "$R/steady.jsonl"
  fi
  bench "$S" 200x50 "$W" -- $PY -P -m nvitop -m full --interval 1 >> "$R/steady.jsonl"
done
$PY -P bench/rss_parts.py --no-ssl >> "$R/rss_parts.jsonl"
kill $load
