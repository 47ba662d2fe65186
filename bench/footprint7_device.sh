#!/usr/bin/env bash
# On the GPU machine (issue #39, branch foot7): the 1 Hz live view without stacks beside nvitop and main,
# in one call, under footprint_load.py's saturated bf16 load (200x50 ptys, one interpreter; this tree
# installed, main apart in /tmp/oldsite as device_setup.sh does):
# 1. what each NVML call costs here (bench/nvml_cost.py, with the per-process, Xid, energy and health
#    readings) and, with PROFILE=1, a py-spy profile of this tree's `--no-stacks --interval 1` (per thread);
# 2. ROUNDS rounds alternated of nvitop -m full at 1 s, main's and this tree's --no-stacks --interval 1
#    (per thread for both trees), each S s after W s.
# usage (from this tree's root on the device): bash bench/footprint7_device.sh OUTDIR [S] [WARM] [ROUNDS] [OLDTREE]
set -u
R=$1; S=${2:-16}; W=${3:-6}; N=${4:-2}; OLD=${5:-../..}
HERE=$(cd "$(dirname "$0")" && pwd)
. bench/device_setup.sh  # installs, machine.txt, $OLDM
B="python3 bench/pty_bench.py $S 200x50 $W"
python3 "$HERE/footprint_load.py" saturated "$R/ready" &
LOAD=$!
until [ -e "$R/ready" ]; do sleep 0.2; done
sleep 2
echo "saturated load: nvidia-smi $(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits) %" >> "$R/machine.txt"
if [ "${COSTS:-1}" = 1 ]; then
  python3 bench/nvml_cost.py 100 > "$R/nvml_cost.jsonl" 2>&1
fi
if [ "${PROFILE:-1}" = 1 ]; then
  (sleep $((W + 1)); P=$(pgrep -n -f "bin/memtop --no-mouse --no-stacks")
   py-spy record -p "$P" -d $((S - 3)) -r 250 -f raw -o "$R/prof_1hz.txt" --threads --nonblocking >/dev/null 2>&1
   python3 bench/profile_sum.py "$R/prof_1hz.txt" > "$R/prof_1hz.md" 2>&1) &
  PROF=$!
  echo '{"run": "this tree 1 Hz, profiled"}' >> "$R/tui.jsonl"
  $B --threads -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
  wait $PROF
fi
for k in $(seq "$N"); do
  echo "{\"round\": $k}" >> "$R/tui.jsonl"
  $B -- nvitop -m full --interval 1 >> "$R/tui.jsonl"
  $B --threads -- $OLDM --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
  $B --threads -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
done
kill $LOAD; wait $LOAD 2>/dev/null
