#!/usr/bin/env bash
# On the GPU machine (issue #39, branch foot3): the live view's memory while its stacks panel follows a
# torch job (bench/workload.py: 19 phases, DataLoader workers among them). This tree (installed), main
# (the device copy's root, in /tmp/oldsite) and nvitop -m full run AT ONCE on the same job in 200x50
# ptys, so the figures are RSS only (three TUIs share the CPU): each one's RSS every 10 s (rss.tsv) and
# pty_bench's line at the end (end.jsonl).
# usage (from this tree's root on the device): bash bench/footprint3_stacks.sh OUTDIR [S] [PHASE_S] [OLDTREE]
set -u
R=$1; S=${2:-150}; P=${3:-8}; OLD=${4:-../..}
. bench/device_setup.sh  # installs, machine.txt, $OLDM
(cd bench && python3 workload.py --markers /tmp/markers.jsonl --phase-s "$P" > "$R/workload.log" 2>&1) &
job=$!
until nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q .; do sleep 0.5; done
B="python3 bench/pty_bench.py $S 200x50 5"
$B -- memtop --no-mouse >> "$R/end.jsonl" &
p1=$!
$B -- env PYTHONPATH=/tmp/oldsite python3 -P -m memtop --no-mouse >> "$R/end.jsonl" &
p2=$!
$B -- nvitop -m full --interval 1 >> "$R/end.jsonl" &
p3=$!
sleep 2
printf 't\tbranch\tmain\tnvitop\n' > "$R/rss.tsv"
rss() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null; }
for t in $(seq 10 10 "$S"); do
  sleep 10
  a=$(pgrep -n -f "bin/memtop --no-mouse"); b=$(pgrep -n -f "python3 -P -m memtop --no-mouse"); c=$(pgrep -n -f "bin/nvitop -m full")
  printf '%s\t%s\t%s\t%s\n' "$t" "$(rss "$a")" "$(rss "$b")" "$(rss "$c")" >> "$R/rss.tsv"
done
wait $p1 $p2 $p3
kill $job 2>/dev/null
