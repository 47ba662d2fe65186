#!/usr/bin/env bash
# From the request to a written merged trace, main against this branch, in one device call
# (docs/TRACE.md, bench/RESULTS.md). Run from the device tree's root (main's checkout, this branch
# rsynced to devq/trace2), the wheels installed into /tmp/site:
#   bash devq/trace2/bench/trace_fast.sh
# Each capture: a fresh `memtop run --no-tui` of bench/trace_job.py (the MLP, ~800 steps/s), 3 s of
# warm-up, then `memtop trace --job` (the code the live view's `x` runs: capture_trace), the job's
# step rate per second around it, and bench/trace_summary.py of the file (kernels, counters, phases,
# stacks, the clock checks). Then, where jax imports, a JAX loop captured with the branch.
# Results: $OUT/log.txt and $OUT/results.tgz (summaries, step rates, memtop trace's lines).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
BR=$ROOT/devq/trace2
B=$BR/bench
R=/tmp/trace-fast
rm -rf "$R" /tmp/vmain /tmp/vbranch && mkdir -p "$R"
LOG=$OUT/log.txt
say() { echo "== $(date +%T.%N) $*" | tee -a "$LOG"; }
mkview() {  # SRC DEST: memtop's package as pyproject maps it, through symlinks
  mkdir -p "$2/memtop"
  for f in "$1"/memtop/*; do ln -s "$f" "$2/memtop/"; done
  ln -s "$1/collectors" "$2/memtop/collectors" && ln -s "$1/tui" "$2/memtop/tui"
}
mkview "$ROOT" /tmp/vmain
mkview "$BR" /tmp/vbranch
export PATH=/tmp/site/bin:$PATH
cd "$R"  # not a checkout: its memtop/ would shadow the view
mono() { python3 -c 'import time; print(round(time.monotonic(), 3))'; }
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())" >>"$LOG" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
nproc >>"$LOG"

capture() {  # NAME VIEW JOB_SECONDS WINDOW [memtop trace options...]
  local name=$1 view=$2 js=$3 win=$4
  shift 4
  export PYTHONPATH=$view:/tmp/site
  python3 -m memtop run --no-tui -- python3 "$B/trace_job.py" "$js" "$R/$name.marks.json" \
    >"$R/$name.job.jsonl" 2>"$R/$name.job.err" &
  local run=$!
  for _ in $(seq 300); do grep -q ready "$R/$name.job.jsonl" 2>/dev/null && break; sleep 0.1; done
  sleep 3
  local a b
  a=$(mono)
  timeout 60 python3 -m memtop trace --job "$run" --seconds "$win" -o "$R/$name.json.gz" "$@" >"$R/$name.trace.txt" 2>&1
  local rc=$?
  b=$(mono)
  echo "{\"asked\": $a, \"written\": $b, \"rc\": $rc}" >"$R/$name.when.json"
  say "$name: rc=$rc, $(python3 -c "print(round($b - $a, 2))") s from the command to the file"
  grep -E "s in all|warning" "$R/$name.trace.txt" | tee -a "$LOG"
  wait "$run"
  python3 "$B/trace_summary.py" "$R/$name.json.gz" "$R/$name.marks.json" >"$R/$name.summary.json" 2>>"$LOG"
  python3 - "$R/$name" >>"$LOG" 2>&1 <<'PY'
import json, sys
p = sys.argv[1]
w = json.load(open(p + ".when.json"))
s = json.load(open(p + ".summary.json"))
rates = [json.loads(l) for l in open(p + ".job.jsonl") if '"t"' in l]
around = [(round(r["t"] - w["asked"], 1), r["steps_per_s"]) for r in rates if -4 <= r["t"] - w["asked"] <= 24]
cats = s["categories"]
print(json.dumps({"file": p, "rates_from_ask": around, "kernel": cats.get("kernel"),
                  "cuda_runtime": cats.get("cuda_runtime"), "cpu_op": cats.get("cpu_op"),
                  "gpu_memcpy": cats.get("gpu_memcpy"), "counters": len(s["memtop_counters"]),
                  "phases": s["phase_slices"], "stacks": s["stack_slices"],
                  "residual_us": [c["clock_residual_us"] for c in s["captures"]],
                  "inside": s["kernels_inside_window"], "after_sync_end_us": s.get("after_sync_end_us")}))
PY
  rm -f "$R/$name.json.gz"
}

say "start"
# RUNS: which captures (default all five); JAX=0 leaves the JAX loop out; DDP=1 adds a 2-rank
# torchrun job captured over one window (bench/trace_ddp_job.py, two GPUs)
for run in ${RUNS:-main3 branch3 main5 branch5 branch5cpu}; do
  case $run in
    main3) capture main3 /tmp/vmain 17 3 ;;
    branch3) capture branch3 /tmp/vbranch 15 3 ;;
    main5) capture main5 /tmp/vmain 25 5 ;;
    branch5) capture branch5 /tmp/vbranch 18 5 ;;
    branch5cpu) capture branch5cpu /tmp/vbranch 22 5 --cpu-ops ;;
  esac
done

if [ "${DDP:-0}" = 1 ]; then
  say "2-rank torchrun (branch)"
  export PYTHONPATH=/tmp/vbranch:/tmp/site
  nvidia-smi --query-gpu=index,name --format=csv,noheader >>"$LOG"
  python3 -m memtop run --no-tui -- python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$B/trace_ddp_job.py" 22 \
    >"$R/ddp.jsonl" 2>"$R/ddp.err" &
  RUN=$!
  for _ in $(seq 600); do grep -q ready "$R/ddp.jsonl" 2>/dev/null && break; sleep 0.1; done
  sleep 3
  a=$(mono)
  timeout 60 python3 -m memtop trace --job "$RUN" --seconds 3 -o "$R/ddp.json.gz" >"$R/ddp.trace.txt" 2>&1
  say "ddp trace rc=$?, $(python3 -c "print(round($(mono) - $a, 2))") s"
  cat "$R/ddp.trace.txt" >>"$LOG"
  wait "$RUN"
  tail -n 3 "$R/ddp.err" >>"$LOG"
  python3 "$B/trace_ddp_check.py" "$R/ddp.json.gz" >"$R/ddp.check.json" 2>>"$LOG"
  cat "$R/ddp.check.json" >>"$LOG"
  rm -f "$R/ddp.json.gz"
fi

if [ "${JAX:-1}" = 1 ] && python3 -c "import jax; print('jax', jax.__version__, jax.devices())" >>"$LOG" 2>&1; then
  say "jax capture (branch)"
  export PYTHONPATH=/tmp/vbranch:/tmp/site
  XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m memtop run --no-tui -- python3 "$B/trace_jax_job.py" 18 \
    >"$R/jax.jsonl" 2>"$R/jax.err" &
  RUN=$!
  for _ in $(seq 600); do grep -q ready "$R/jax.jsonl" 2>/dev/null && break; sleep 0.1; done
  sleep 3
  timeout 60 python3 -m memtop trace --job "$RUN" --seconds 2 -o "$R/jax.json.gz" >"$R/jax.trace.txt" 2>&1
  say "jax trace rc=$?"
  cat "$R/jax.trace.txt" >>"$LOG"
  wait "$RUN"
  tail -n 5 "$R/jax.err" >>"$LOG"
  python3 - "$R/jax.json.gz" >"$R/jax.summary.json" 2>>"$LOG" <<'PY'
import collections, gzip, json, sys
doc = json.loads(gzip.decompress(open(sys.argv[1], "rb").read()))
ev = [e for e in doc["traceEvents"] if e.get("pid", 0) >= 2_000_000]
procs = {e["pid"]: e["args"].get("name") for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
cap = doc["metadata"]["captures"][0]
lo, hi = (t * 1e6 for t in cap["window_s"])
xs = [e for e in ev if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
gpu = [e for e in xs if "/device:GPU" in str(procs.get(e["pid"], ""))]
print(json.dumps({"events": len(ev), "by_process": collections.Counter(procs.get(e["pid"], "?") for e in ev).most_common(12),
                  "names": collections.Counter(e.get("name") for e in ev).most_common(20),
                  "gpu_events": len(gpu), "gpu_inside_window": sum(lo - 1e3 <= e["ts"] <= hi + 1e3 for e in gpu),
                  "counters": sorted({e["name"] for e in doc["traceEvents"] if e.get("ph") == "C"}),
                  "captures": doc["metadata"]["captures"]}, indent=1))
PY
  head -c 4000 "$R/jax.summary.json" >>"$LOG"
  rm -f "$R/jax.json.gz"
else
  say "jax: not importable here"
fi
say "end"
tar czf "$OUT/results.tgz" -C "$R" .
