#!/usr/bin/env bash
# Issue #37 on the GPU machine: two training jobs on ONE GPU at once (bench/workloads/shared_job.py,
# job A and job B, each its own process tree and seed), recorded by `memtop record` (GPM + stacks, the
# defaults) with both jobs' markers attached; each recording trimmed for tests/data. The first run of
# a call is also watched by `nvidia-smi pmon -s u` over 30 s (bench/procs_pmon.py compares).
# usage (tree root, .whl carried): bash bench/workloads/shared_jobs.sh "NAME:SEED:PHASES ..."
#   PHASES: shared_job.py's phase names joined by "+", the same for both jobs (their orders differ)
set -u
export PYTHONUNBUFFERED=1
whl=../../.whl; [ -d "$whl" ] || whl=.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl"/*.whl &&
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/mt . || exit 2
export PYTHONPATH=/tmp/mt:/tmp/site PATH=/tmp/mt/bin:/tmp/site/bin:$PATH
command -v py-spy >/dev/null || { echo "py-spy is not on PATH" >&2; exit 2; }
W=/tmp/shared; mkdir -p "$W/trim"; LOG=$W/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
first=1
for r in $1; do
  IFS=: read -r name seed phases <<<"$r"
  M=$W/$name.jsonl; rm -f "$M" "$W/$name.A.jsonl" "$W/$name.B.jsonl"
  echo "== $(date +%T) $name seed $seed phases $phases" | tee -a "$LOG"
  memtop record -o "$W/$name.memtop" --force --markers "$M" >>"$LOG" 2>&1 & rec=$!
  sleep 2
  pm=""
  if [ $first = 1 ]; then nvidia-smi pmon -s u -o T -d 1 -c 30 > "$W/$name.pmon.txt" 2>>"$LOG" & pm=$!; fi
  js=""
  for j in A B; do
    s=$seed; [ $j = B ] && s=$((seed + 1000))
    (cd bench/workloads && JOB=$j PHASES=${phases//+/,} timeout 200 python3 shared_job.py \
      --markers "$W/$name.$j.jsonl" --seed $s --phase-s "${PHASE_S:-6}" >>"$LOG" 2>&1) & js="$js $!"
  done
  wait $js $pm
  # one markers file, every marker naming its job (wl.py's idle phases do not) and the job's pid
  python3 - "$W/$name" <<'PY'
import json, sys
base = sys.argv[1]
with open(base + ".jsonl", "w") as out:
    for j in "AB":
        ms = [json.loads(x) for x in open(f"{base}.{j}.jsonl")]
        pid = next((m["facts"]["pid"] for m in ms if "pid" in m["facts"]), None)
        for m in ms:
            m["name"] = m["name"] if "/" in m["name"] else f"{j}/{m['name']}"
            m["facts"] = {**m["facts"], "job": j, "pid": pid}
            out.write(json.dumps(m) + "\n")
PY
  sleep 1; kill -INT $rec; wait $rec
  ls -la "$W/$name.memtop" | tee -a "$LOG"
  python3 bench/workloads/trim.py "$W/$name.memtop" "$W/trim/$name.memtop" >>"$LOG" 2>&1
  if [ $first = 1 ]; then
    python3 bench/procs_pmon.py "$W/$name.pmon.txt" "$W/$name.memtop" | tee "$W/$name.pmon_compare.txt" | tee -a "$LOG"
    first=0
  fi
  memtop report "$W/trim/$name.memtop" > "$W/$name.report.txt" 2>>"$LOG"
done
tail -n 60 "$LOG"
tar czf "$OUT/shared.tgz" -C "$W" trim log.txt $(cd "$W" && ls *.jsonl *.txt)
ls -la "$W/trim" "$OUT"
