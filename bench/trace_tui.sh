#!/usr/bin/env bash
# The live view's captures on the lent GPU (docs/TRACE.md, bench/RESULTS.md), from the checkout:
#   bash bench/trace_tui.sh        ($OUT set by the device runner; memtop's wheel installed on PYTHONPATH)
# 1) `memtop run` with the TUI in a pseudo-terminal (bench/pty_keys.py) on a CUDA training loop
#    (bench/trace_job.py), recording the run: --trace-on captures when the verdict first forms, then
#    the `x` key 55 s in (after the agent's 30 s between captures); `memtop report` of the recording;
# 2) a 5 s `memtop trace` of a second job, for the time from the request to the file;
# 3) whether this machine has JAX (said in the log; JAX is not captured yet, docs/TRACE.md).
# Results: $OUT/log.txt, $OUT/results.tgz (the 3 s traces, the recording, report, step rates, marks).
set -u
export PYTHONUNBUFFERED=1
B=$(cd "$(dirname "$0")" && pwd)
R=/tmp/trace-tui
rm -rf "$R" && mkdir -p "$R/pty"
cd "$R"  # not the checkout: its memtop/ would shadow the installed one for `python3 -m memtop`
LOG=$OUT/log.txt
say() { echo "== $(date +%T.%N) $*" | tee -a "$LOG"; }
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())" >>"$LOG" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" >>"$LOG" 2>&1 || echo "jax: not importable" >>"$LOG"

say "tui start"
python3 "$B/pty_keys.py" 160x45 "$R/pty" "55:x 12:q" -- python3 -m memtop run \
  --trace-on compute,memory,sync,cpu,input,transfer,comm,other --trace-seconds 3 --trace-dir "$R" \
  --record "$R/run.memtop" --log "$R/job.log" -- python3 "$B/trace_job.py" 62 "$R/marks.json" >>"$LOG" 2>&1
say "tui end"
python3 -m memtop report "$R/run.memtop" >"$R/report.txt" 2>>"$LOG"
python3 -m memtop report --format json "$R/run.memtop" >"$R/report.json" 2>>"$LOG"
tail -n 12 "$R/report.txt" >>"$LOG"
for t in "$R"/memtop-trace-*.json.gz; do
  python3 "$B/trace_summary.py" "$t" "$R/marks.json" >"$t.summary.json" 2>>"$LOG"
done

say "headless 5 s capture"
python3 -m memtop run --no-tui -- python3 "$B/trace_job.py" 20 "$R/marks5.json" >"$R/job5.jsonl" 2>"$R/job5.err" &
RUN=$!
for _ in $(seq 300); do grep -q ready "$R/job5.jsonl" 2>/dev/null && break; sleep 0.1; done
sleep 4
say "trace 5 s asked"
python3 -m memtop trace --job "$RUN" --seconds 5 -o "$R/t5.json.gz" >>"$LOG" 2>&1
say "trace 5 s written rc=$?"
wait "$RUN"
python3 "$B/trace_summary.py" "$R/t5.json.gz" "$R/marks5.json" >"$R/t5.summary.json" 2>>"$LOG"
rm -f "$R/t5.json.gz"  # (large: its summary comes back)
ls -la "$R" >>"$LOG"
tar czf "$OUT/results.tgz" -C "$R" --exclude pty .
