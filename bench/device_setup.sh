# Sourced by the device scripts (footprint*); defines smaps and side_round for them. With R (the output folder) and OLD (the tree compared
# with, default the device copy's root) set, installs this tree, the old tree apart in /tmp/oldsite
# (run it as $OLDM) and textual, py-spy, nvidia-ml-py and nvitop from the carried wheels; writes
# the card, driver and Python to $R/machine.txt.
mkdir -p "$R"  # (a folder that is not there: the load generator would wait on its ready file until the call ends)
python3 -m pip install -q --no-index --find-links "$OLD/.whl" textual py-spy nvidia-ml-py nvitop >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation . >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/oldsite "$OLD" >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/machine.txt"
python3 --version >> "$R/machine.txt"
OLDM="env PYTHONPATH=/tmp/oldsite python3 -P -m memtop"

smaps() {  # LABEL PATTERN: in round 1 ($k), where the newest matching process's memory is, 2 s before its window ends
  if [ "$k" = 1 ]; then
    (sleep $((S + W - 2)); python3 bench/smaps_top.py "$(pgrep -n -f "$2")" "$1" >> "$R/smaps.jsonl") &
  fi
}
side_round() {  # one round side by side ($B: pty_bench.py with the run's S and W): this tree, the old tree,
  # nvitop and this tree at 1 Hz without stacks, each into $R/tui.jsonl
  $B --threads -- memtop --no-mouse >> "$R/tui.jsonl"
  $B -- $OLDM --no-mouse >> "$R/tui.jsonl"
  smaps nvitop "nvitop -m full --interval 1"
  $B -- nvitop -m full --interval 1 >> "$R/tui.jsonl"
  smaps "this tree 1 Hz" "bin/memtop --no-mouse --no-stacks"
  $B --threads -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
}
