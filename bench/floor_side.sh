#!/usr/bin/env bash
# On the GPU machine (issue #39): what any Textual monitor pays before its own work, beside nvitop and
# memtop, in one call under one load (footprint_load.py saturated; 200x50 ptys; one interpreter):
# ROUNDS rounds alternated of nvitop at 1 s, bench/textual_floor.py still and tick (1 s), each also
# --lean (memtop's process-wide trims), memtop
# --no-stacks --interval 1 and memtop's defaults; smaps of each in round 1.
# usage (from this tree's root on the device): bash bench/floor_side.sh OUTDIR [S] [WARM] [ROUNDS] [OLDTREE (default .)]
set -u
R=$1; S=${2:-16}; W=${3:-6}; N=${4:-3}; OLD=${5:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
. bench/device_setup.sh
B="python3 bench/pty_bench.py $S 200x50 $W"
python3 "$HERE/footprint_load.py" saturated "$R/ready" &
LOAD=$!
until [ -e "$R/ready" ]; do sleep 0.2; done
sleep 2
run() {  # LABEL PATTERN COMMAND...
  local label=$1 pat=$2; shift 2
  smaps "$label" "$pat"
  echo "{\"run\": \"$label\"}" >> "$R/tui.jsonl"
  $B -- "$@" >> "$R/tui.jsonl"
}
for k in $(seq "$N"); do
  run nvitop "nvitop -m full --interval 1" nvitop -m full --interval 1
  run "floor still" "textual_floor.py still$" python3 "$HERE/textual_floor.py" still
  run "floor tick" "textual_floor.py tick 1$" python3 "$HERE/textual_floor.py" tick 1
  run "floor lean" "textual_floor.py still --lean" python3 "$HERE/textual_floor.py" still --lean
  run "floor tick lean" "textual_floor.py tick 1 --lean" python3 "$HERE/textual_floor.py" tick 1 --lean
  run "memtop 1 Hz" "bin/memtop --no-mouse --no-stacks" memtop --no-mouse --no-stacks --interval 1
  run "memtop defaults" "bin/memtop --no-mouse$" memtop --no-mouse
done
kill $LOAD; wait $LOAD 2>/dev/null
wait
