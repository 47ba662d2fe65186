#!/usr/bin/env bash
# On the VM (issue #39, RSS; Python 3.11, NVML faked): what memtop's live view costs beside what
# Textual costs for the same screen. ROUNDS rounds alternated, 200x50 ptys, one JSON line per run
# (bench/pty_bench.py) prefixed by its label: bench/textual_floor.py still and tick (1 s) --lean, the
# widget floor (bench/widget_floor.py tick, memtop's widget tree, tiled, --one-tile and the tables only one tile) --lean, memtop
# --no-stacks --interval 1 on the recorded H100 replies (bench/fake_nvml.py) from this tree and, with
# OLDTREE (an unpacked tree, e.g. `git archive main | tar -x -C DIR`), from that tree too.
# usage: bash bench/widget_floor_vm.sh [S] [WARM] [ROUNDS] [OLDTREE]
set -u
S=${1:-8}; W=${2:-4}; N=${3:-3}; OLD=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
B="python3 $HERE/pty_bench.py $S 200x50 $W"
F=(--lean --fake-nvml)
if [ -n "$OLD" ]; then  # a view of OLDTREE's package, as pyproject maps it
  V=$(mktemp -d); mkdir -p "$V/memtop"
  ln -s "$OLD"/memtop/* "$V/memtop/"; ln -s "$OLD/collectors" "$V/memtop/collectors"; ln -s "$OLD/tui" "$V/memtop/tui"
fi
run() { local label=$1; shift; echo "$label $($B -- "$@")"; }
for _ in $(seq "$N"); do
  run "floor-still" python3 "$HERE/textual_floor.py" still "${F[@]}"
  run "floor-tick" python3 "$HERE/textual_floor.py" tick 1 "${F[@]}"
  run "widgets" python3 "$HERE/widget_floor.py" tick 1 "${F[@]}"
  run "widgets-1tile" python3 "$HERE/widget_floor.py" tick 1 --one-tile "${F[@]}"
  run "widgets-1tile-tables" python3 "$HERE/widget_floor.py" tick 1 --one-tile=gpus,procs "${F[@]}"
  [ -n "$OLD" ] && run "memtop-old" python3 "$HERE/view_run.py" "$V" "$OLD/bench/fake_nvml.py" -- --no-mouse --no-stacks --interval 1
  run "memtop" python3 "$HERE/fake_nvml.py" -- --no-mouse --no-stacks --interval 1
done
