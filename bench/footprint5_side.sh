#!/usr/bin/env bash
# On the GPU machine (issue #39, branch foot5): this tree beside nvitop and main in one call, footprint4's
# method (this tree installed, main installed apart in /tmp/oldsite, nvitop -m full; one interpreter,
# 200x50 ptys):
# 1. under footprint4's saturated bf16 matmul load: STARTS starts of each to the first power reading,
#    interleaved; ROUNDS rounds alternated of this tree's defaults, main's defaults, nvitop at 1 s and
#    this tree's --no-stacks --interval 1 (per thread for this tree; smaps 2 s before the end, round 1);
# 2. two part-busy loads: two matmuls, .item(), 5 ms asleep (the GPU and the process each ~40 % busy:
#    the stacks at their normal pace), and four matmuls, .item(), 5 ms spinning (the GPU ~55 % busy, the
#    process on a core: the stacks' fast pace, 4 dumps a second); this tree's and main's defaults, one
#    round each.
# (Run once at a1aa7b6 with the load's start awaited by the GPU's util above 30 %: the last load's util
# lingered, and the "sleep" load's window began before it ran (util 0 % 2 s in); it now waits for the
# load's own first result. Run again at 13d1938 with SATURATED=0 PART_ROUNDS=2: the GPM line failed there,
# the checkout's memtop/ shadowing the installed one; it now runs with -P.)
# (foot6: the load runs from bench/footprint_load.py, a file, so that the stacks read its lines as a real
# job's; from its former `python3 -c` string no stack read as a sync wait.)
# SATURATED=0 leaves out step 1; PART_ROUNDS=N (default 1) rounds of step 2; LOADS="spin" its loads (default "sleep spin").
# usage (from this tree's root on the device): bash bench/footprint5_side.sh OUTDIR [S] [WARM] [ROUNDS] [STARTS] [OLDTREE]
set -u
R=$1; S=${2:-16}; W=${3:-6}; N=${4:-3}; K=${5:-4}; OLD=${6:-../..}
HERE=$(cd "$(dirname "$0")" && pwd)
. bench/device_setup.sh  # installs, machine.txt, $OLDM
B="python3 bench/pty_bench.py $S 200x50 $W"
busy() {
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits
}
load() {  # KIND: saturated, sleep or spin
  python3 "$HERE/footprint_load.py" "$1" "$R/ready.$1" &
  LOAD=$!
  until [ -e "$R/ready.$1" ]; do sleep 0.2; done  # (not the GPU's util: the last load's lingers)
  sleep 2
  echo "$1 load: nvidia-smi util $(busy) %; GPM $(gpm)" >> "$R/machine.txt"
}
gpm() {  # the GPU's GPM graphics and SM activity over 1 s, as memtop reads them (-P: the installed memtop)
  python3 -P -c "
import time
from memtop.collectors.nvml import GPM_IDS, gpm_values
from memtop.collectors.nvml_calls import RealNvml
nv = RealNvml(); nv.init(); nv.gpm_metrics(0, GPM_IDS); time.sleep(1)
v = gpm_values(nv.gpm_metrics(0, GPM_IDS) or {})
print('graphics %.0f %%, SM %.0f %%' % (v.get('graphics', -1), v.get('sm', -1)))" 2>&1 | tail -1
}
if [ "${SATURATED:-1}" = 1 ]; then
load saturated
for i in $(seq "$K"); do
  for c in "memtop --no-mouse" "$OLDM --no-mouse" "nvitop -m full"; do
    python3 bench/pty_bench.py 0.5 200x50 2 --until '[0-9]W' -- $c >> "$R/first.jsonl"
  done
done
for k in $(seq "$N"); do
  side_round
done
kill $LOAD; wait $LOAD 2>/dev/null
fi
for kind in ${LOADS:-sleep spin}; do
  load $kind
  for k in $(seq "${PART_ROUNDS:-1}"); do
    echo "{\"load\": \"$kind\"}" >> "$R/tui.jsonl"
    $B --threads -- memtop --no-mouse >> "$R/tui.jsonl"
    $B -- $OLDM --no-mouse >> "$R/tui.jsonl"
  done
  kill $LOAD; wait $LOAD 2>/dev/null
done
wait
