#!/usr/bin/env bash
# On the GPU machine: py-spy profile (per thread, raw) of `memtop --no-stacks --interval 1` in steady
# state under a compute load. usage: bash bench/profile_live.sh OUTDIR; summarise with bench/profile_sum.py
R=$1
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+50
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
python3 bench/pty_bench.py 40 200x50 8 -- memtop --no-mouse --no-stacks --interval 1 > "$R/profile_bench.json" &
b=$!
sleep 10
echo "load threads: $(ls /proc/$load/task | wc -l)" > "$R/profile_threads.txt"
P=$(pgrep -f "bin/memtop --no-mouse" | head -1)
py-spy record -p "$P" -d 30 -r 1000 -f raw -o "$R/profile_i1.txt" --threads --nonblocking > "$R/profile_pyspy.log" 2>&1
wait $b
kill $load
