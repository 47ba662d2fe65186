#!/usr/bin/env bash
# On the GPU machine (issue #39, branch foot4): footprint3_device.sh's method (this tree installed, main
# installed apart in /tmp/oldsite, nvitop -m full; one interpreter, 200x50 ptys, a bf16 matmul load):
# 1. STARTS starts of each to the first power reading on screen, interleaved;
# 2. ROUNDS rounds, alternated: defaults and --no-stacks --interval 1 of this tree and main, nvitop at
#    1 s; in the first round, where each one's resident memory is (bench/smaps_top.py) 2 s before its end;
# 3. a py-spy profile of this tree at --no-stacks --interval 1 (the UI thread's share), rss_parts.py.
# usage (from this tree's root on the device): bash bench/footprint4_device.sh OUTDIR [S] [WARM] [ROUNDS] [STARTS] [OLDTREE]
set -u
R=$1; S=${2:-16}; W=${3:-6}; N=${4:-3}; K=${5:-4}; OLD=${6:-../..}
. bench/device_setup.sh  # installs, machine.txt, $OLDM
git -C "$OLD" log -1 --format=%h >> "$R/machine.txt" 2>/dev/null
python3 bench/rss_parts.py --no-ssl > "$R/rss_parts.json" 2>&1
python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+5*$N*($S+$W+3)+3*$K*4+120
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
load=$!
until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
for i in $(seq "$K"); do
  for c in "memtop --no-mouse" "$OLDM --no-mouse" "nvitop -m full"; do
    python3 bench/pty_bench.py 0.5 200x50 2 --until '[0-9]W' -- $c >> "$R/first.jsonl"
  done
done
B="python3 bench/pty_bench.py $S 200x50 $W"
for k in $(seq "$N"); do
  side_round
  smaps "main 1 Hz" "python3 -P -m memtop --no-mouse --no-stacks"
  $B -- $OLDM --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
done
if [ "${PROFILE:-1}" = 1 ]; then
  python3 bench/pty_bench.py 22 200x50 3 -- memtop --no-mouse --no-stacks --interval 1 > "$R/profile_bench.json" &
  b=$!
  sleep 6
  P=$(pgrep -f "bin/memtop --no-mouse" | head -1)
  py-spy record -p "$P" -d 15 -r 200 -f raw -o "$R/profile_1hz.txt" --threads --nonblocking > "$R/pyspy.log" 2>&1
  wait $b
  python3 bench/profile_sum.py "$R/profile_1hz.txt" > "$R/profile_1hz.md" 2>&1
fi
kill $load
