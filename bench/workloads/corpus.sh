#!/usr/bin/env bash
# Record labelled runs on the GPU machine: memtop record --markers beside each workload.
# usage: bash bench/workloads/corpus.sh OUTDIR BUDGET_S "NAME:SCRIPT:SEED:SCALE ..."
# PACK=FILE.tgz: pack OUTDIR there after each run. TRIM=DIR: a trimmed copy of each recording there
# (bench/workloads/trim.py; what tests/data keeps). A run is started only while BUDGET_S seconds have
# not passed (each takes ~1-3 min).
set -u
out=$1 budget=$2 runs=$3
# without py-spy memtop records no stacks, silently (heldout3 was recorded so)
command -v py-spy >/dev/null || { echo "py-spy is not on PATH: the runs would hold no stacks" >&2; exit 2; }
mkdir -p "$out"; log=$out/log.txt
start=$(date +%s)
for r in $runs; do
  IFS=: read -r name script seed scale <<<"$r"
  if (( $(date +%s) - start > budget )); then echo "skip $name (budget)" | tee -a "$log"; continue; fi
  m=$out/$name.jsonl; rm -f "$m"
  echo "== $(date +%T) $name $script seed $seed scale $scale" | tee -a "$log"
  memtop record -o "$out/$name.memtop" --force --markers "$m" >>"$log" 2>&1 &
  rec=$!
  sleep 2
  timeout 300 python3 "bench/workloads/$script.py" --markers "$m" --seed "$seed" --scale "$scale" \
    --phase-s "${PHASE_S:-5}" >>"$log" 2>&1
  sleep 1; kill -INT $rec; wait $rec
  ls -la "$out/$name.memtop" | tee -a "$log"
  [ -n "${TRIM:-}" ] && python3 bench/workloads/trim.py "$out/$name.memtop" "$TRIM/$name.memtop" >>"$log" 2>&1
  [ -n "${PACK:-}" ] && tar czf "$PACK" -C "$out" .
done
