#!/usr/bin/env bash
# On the GPU machine, under a compute load: this build, an older one (a tree in .old, e.g. from
# `git archive REV`) and nvitop -m full, all at a 1 s refresh in a 200x50 pty, interleaved so
# that drifts of the machine fall on all three alike.
# usage: bash bench/tui_ab.sh OUTDIR [SECONDS] [WARM] [ROUNDS]
R=$1; S=${2:-20}; W=${3:-8}; N=${4:-3}
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/oldsite .old >/dev/null
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+3*$N*($S+$W+2)+60
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
for k in $(seq "$N"); do
  python3 bench/pty_bench.py "$S" 200x50 "$W" -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui_ab.jsonl"
  python3 bench/pty_bench.py "$S" 200x50 "$W" -- env PYTHONPATH=/tmp/oldsite python3 -P -m memtop --no-mouse --no-stacks --interval 1 >> "$R/tui_ab.jsonl"
  python3 bench/pty_bench.py "$S" 200x50 "$W" -- nvitop -m full --interval 1 >> "$R/tui_ab.jsonl"
done
kill $load
