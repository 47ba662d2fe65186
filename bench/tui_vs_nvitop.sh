#!/usr/bin/env bash
# On the GPU machine, under a compute load: memtop live vs nvitop -m full, same refresh (1 s), 200x50 pty.
R=$1; S=${2:-20}; W=${3:-8}  # W: seconds of start-up left out of CPU and bytes (first output is its own figure)
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+8*($S+$W)+80
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
for run in 1 2; do
  python3 bench/pty_bench.py $S 200x50 $W -- memtop --no-mouse >> "$R/tui_bench.jsonl"
  python3 bench/pty_bench.py $S 200x50 $W -- memtop --no-mouse --no-stacks >> "$R/tui_bench.jsonl"
  python3 bench/pty_bench.py $S 200x50 $W -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui_bench.jsonl"
  python3 bench/pty_bench.py $S 200x50 $W -- nvitop -m full --interval 1 >> "$R/tui_bench.jsonl"
done
kill $load
