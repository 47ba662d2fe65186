#!/usr/bin/env bash
# `memtop export --perfetto` of the same files by two trees, alternated in fresh processes (issue #39).
# usage: bash bench/export_ab.sh VIEW_A VIEW_B ROUNDS OUTDIR FILE...
#   VIEW_*: a directory whose memtop/ is the tree to run (a git archive through a view of symlinks,
#   as docs/ARCHITECTURE says for the device), put first on PYTHONPATH; run from OUTDIR (not a checkout).
# One line per run: tree, file, round, wall s, user s, sys s (children included: the phase worker),
# peak RSS KiB (the largest process's, /usr/bin/time -v), output bytes, 1-minute load average before.
set -euo pipefail
a=$1 b=$2 rounds=$3 out=$4
shift 4
py=${PYTHON:-python3}
cd "$out"
for r in $(seq 1 "$rounds"); do
  for f in "$@"; do
    order="A B"
    if [ $((r % 2)) -eq 0 ]; then order="B A"; fi  # every other round the second tree first
    for which in $order; do
      view=$a; [ "$which" = B ] && view=$b
      load=$(cut -d' ' -f1 /proc/loadavg)
      trace="$out/$which.$(basename "$f" .memtop).pftrace"
      PYTHONPATH=$view /usr/bin/time -v -o "$out/time.txt" "$py" -m memtop export "$f" --perfetto "$trace" --force \
        >/dev/null 2>"$out/err.txt"
      wall=$(awk -F': ' '/Elapsed/ {n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}' "$out/time.txt")
      user=$(awk -F': ' '/User time/ {print $2}' "$out/time.txt")
      sys=$(awk -F': ' '/System time/ {print $2}' "$out/time.txt")
      rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$out/time.txt")
      echo "$which $(basename "$f") round=$r wall=$wall user=$user sys=$sys rss_kib=$rss bytes=$(stat -c %s "$trace") load=$load"
    done
  done
done
