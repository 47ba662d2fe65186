#!/usr/bin/env bash
# On the GPU machine (issue #39, RSS): what Textual costs for memtop's live screen, measured beside nvitop
# and memtop in one call (bench/floor_side.sh's method: footprint_load.py saturated, 200x50 ptys, one
# interpreter): ROUNDS rounds alternated of nvitop at 1 s, the lean bare floor (bench/textual_floor.py
# still --lean), the widget floor (bench/widget_floor.py tick 1 --lean: memtop's widget tree and stylesheet,
# static text, no memtop logic), the same with each panel one tile, and memtop --no-stacks --interval 1.
# usage (from this tree's root on the device): bash bench/widget_floor_side.sh OUTDIR [S] [WARM] [ROUNDS]
set -u
R=$1; S=${2:-12}; W=${3:-5}; N=${4:-2}; OLD=.
HERE=$(cd "$(dirname "$0")" && pwd)
. bench/device_setup.sh
B="python3 bench/pty_bench.py $S 200x50 $W"
python3 "$HERE/footprint_load.py" saturated "$R/ready" &
LOAD=$!
until [ -e "$R/ready" ]; do sleep 0.2; done
sleep 2
run() {  # LABEL COMMAND...
  local label=$1; shift
  echo "{\"run\": \"$label\"}" >> "$R/tui.jsonl"
  $B -- "$@" >> "$R/tui.jsonl"
}
for k in $(seq "$N"); do
  run nvitop nvitop -m full --interval 1
  run "floor lean" python3 "$HERE/textual_floor.py" still --lean
  run "widgets lean" python3 "$HERE/widget_floor.py" tick 1 --lean
  run "widgets one tile lean" python3 "$HERE/widget_floor.py" tick 1 --one-tile --lean
  run "memtop 1 Hz" memtop --no-mouse --no-stacks --interval 1
done
kill $LOAD; wait $LOAD 2>/dev/null
wait
