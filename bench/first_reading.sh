#!/usr/bin/env bash
# On the GPU machine, under a bf16 matmul load, in 200x50 ptys: seconds to the first power reading on
# screen (STARTS starts of each command, interleaved), then CPU % of one core, KiB/s and RSS in steady
# state (ROUNDS rounds, interleaved). Commands: this build at defaults and at --interval 1, the tree
# installed in $OLD (the branch's base, for "before"), and nvitop -m full.
# usage: PY=python3 OLD=/tmp/oldsite bash bench/first_reading.sh OUTDIR [STARTS] [SECONDS] [WARM] [ROUNDS]
# (memtop and nvitop importable by $PY; -P keeps a source checkout in the cwd off sys.path)
R=$1; N=${2:-10}; S=${3:-15}; W=${4:-6}; K=${5:-2}
PY=${PY:-python3}
POWER='[0-9]W'  # memtop's GPU row "312W", nvitop's "312W / 700W"
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+4*$N*5+3*$K*($S+$W+3)+60
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
bench() { $PY bench/pty_bench.py "$@"; }
for i in $(seq "$N"); do
  bench 0.5 200x50 3 --until "$POWER" -- $PY -P -m memtop --no-mouse >> "$R/first.jsonl"
  bench 0.5 200x50 3 --until "$POWER" -- $PY -P -m memtop --no-mouse --interval 1 >> "$R/first.jsonl"
  [ -n "${OLD:-}" ] && bench 0.5 200x50 3 --until "$POWER" -- env PYTHONPATH="$OLD:$PYTHONPATH" $PY -P -m memtop --no-mouse >> "$R/first_old.jsonl"
  bench 0.5 200x50 3 --until "$POWER" -- $PY -P -m nvitop -m full >> "$R/first.jsonl"
done
for i in $(seq "$K"); do
  bench "$S" 200x50 "$W" -- $PY -P -m memtop --no-mouse >> "$R/steady.jsonl"
  bench "$S" 200x50 "$W" -- $PY -P -m memtop --no-mouse --no-stacks --interval 1 >> "$R/steady.jsonl"
  bench "$S" 200x50 "$W" -- $PY -P -m nvitop -m full --interval 1 >> "$R/steady.jsonl"
done
kill $load
