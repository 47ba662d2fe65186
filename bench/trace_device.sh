#!/usr/bin/env bash
# memtop run + memtop trace on the lent GPU machine (docs/TRACE.md, bench/RESULTS.md).
# usage: bash trace_device.sh DIR   (DIR: memtop's wheel, py-spy's, trace_job.py, steprate.py, trace_summary.py)
# 1) the agent idle: the job alone and under `memtop run --no-tui`, interleaved, 3 rounds;
# 2) a 5 s capture (`--job`) and a 100-step capture with Python frames of a CUDA training loop.
# Small results come back under $OUT (at most 8 files); the rest is packed in $OUT/results.tgz.
set -u
export PYTHONUNBUFFERED=1
D=$(cd "$1" && pwd); R=/tmp/trace-r; mkdir -p "$R"; LOG=$OUT/log.txt
cd /tmp  # not the checkout: its memtop/ would shadow the wheel's for `python3 -m memtop`
say() { echo "== $(date +%T.%N) $*" | tee -a "$LOG"; }
python3 -m pip install -q --no-index --no-deps --no-compile --target "${SITE:=/tmp/site}" "$D"/*.whl >>"$LOG" 2>&1 || exit 1
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())" >>"$LOG" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
AB=${AB_ROUNDS:-3}; JOB_S=${JOB_S:-15}
for r in $(seq "$AB"); do
  say "ab round $r"
  python3 "$D/trace_job.py" "$JOB_S" /tmp/m.json >"$R/ab_plain_$r.jsonl" 2>>"$LOG"
  python3 -m memtop run --no-tui -- python3 "$D/trace_job.py" "$JOB_S" /tmp/m.json >"$R/ab_agent_$r.jsonl" 2>>"$LOG"
done
say "capture job"
python3 -m memtop run --no-tui -- python3 "$D/trace_job.py" 90 "$R/marks.json" >"$R/cap_job.jsonl" 2>"$R/cap_job.err" &
RUN=$!
for _ in $(seq 600); do grep -q ready "$R/cap_job.jsonl" 2>/dev/null && break; kill -0 $RUN || break; sleep 0.2; done
sleep 3
say "trace 5 s start"
python3 -m memtop trace --job "$RUN" --seconds 5 -o "$OUT/trace_5s.json.gz" >>"$LOG" 2>&1; echo "rc=$?" >>"$LOG"
say "trace 5 s end"
sleep 31
say "trace steps start"
python3 -m memtop trace --job "$RUN" --seconds 10 --steps 100 --python -o "$R/trace_steps.json.gz" >>"$LOG" 2>&1; echo "rc=$?" >>"$LOG"
say "trace steps end"
wait "$RUN"; echo "job rc=$?" >>"$LOG"
for t in "$OUT/trace_5s.json.gz" "$R/trace_steps.json.gz"; do
  python3 "$D/trace_summary.py" "$t" "$R/marks.json" >"$R/$(basename "$t" .json.gz).summary.json" 2>>"$LOG"
done
python3 - "$R" "$AB" >"$OUT/summary.json" 2>>"$LOG" <<'PY'
import json, statistics, sys, glob, os
r, ab = sys.argv[1], int(sys.argv[2])
def rate(path, skip=4):
    rows = [json.loads(l) for l in open(path) if l.startswith('{"t"')]
    return statistics.mean(x["steps_per_s"] for x in rows[skip:]) if rows[skip:] else None
out = {"ab": [{"round": k, "plain": rate(f"{r}/ab_plain_{k}.jsonl"), "agent": rate(f"{r}/ab_agent_{k}.jsonl")} for k in range(1, ab + 1)]}
rows = [json.loads(l) for l in open(f"{r}/cap_job.jsonl") if l.startswith('{"t"')]
for name in ("trace_5s", "trace_steps"):
    p = f"{r}/{name}.summary.json"
    if os.path.exists(p):
        s = json.load(open(p)); out[name] = s
        for cap in s.get("captures") or []:
            lo, hi = cap["window_s"]
            inside = [x["steps_per_s"] for x in rows if lo + 1 <= x["t"] <= hi]
            before = [x["steps_per_s"] for x in rows if lo - 10 <= x["t"] < lo - 2]
            cap["steps_per_s_inside"] = inside; cap["steps_per_s_before"] = before
print(json.dumps(out, indent=1))
PY
cp "$R/cap_job.err" "$OUT/cap_job.err"
cp "$R/trace_5s.summary.json" "$OUT/" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$R" .
