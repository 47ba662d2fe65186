#!/usr/bin/env bash
# Issue #38's idle targets on the lent GPU: the same CUDA training loop (bench/trace_job.py) alone and with
# `memtop run`'s agent loaded and idle (its site folder on PYTHONPATH and a private agent directory, as
# `memtop run` sets them, without memtop's monitor beside it, so only the agent differs), in ABBA order,
# ROUNDS rounds of JOB_S seconds; and the agent thread's own CPU time in each agent run.
# usage (memtop importable, from a directory other than the checkout): bash agent_idle.sh BENCH_DIR
set -u
B=$(cd "$1" && pwd); R=${OUT:-/tmp}/agent_idle; mkdir -p "$R"
ROUNDS=${ROUNDS:-6}; JOB_S=${JOB_S:-12}
SITE=$(python3 -c "import memtop.commands.run as r; print(r.SITE)") || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$R/gpu.txt" 2>&1
plain() { python3 "$B/agent_idle_job.py" "$JOB_S" >"$R/plain_$1.jsonl" 2>>"$R/err.txt"; }
agent() {
  local d; d=$(mktemp -d); chmod 700 "$d"
  PYTHONPATH="$SITE:${PYTHONPATH:-}" MEMTOP_AGENT_DIR="$d" python3 "$B/agent_idle_job.py" "$JOB_S" \
    >"$R/agent_$1.jsonl" 2>>"$R/err.txt"
  ls -la "$d" >>"$R/agent_dirs.txt"; rm -rf "$d"
}
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then plain "$r"; agent "$r"; else agent "$r"; plain "$r"; fi
done
python3 - "$R" "$ROUNDS" >"$R/summary.json" <<'PY'
import json, statistics, sys
r, n = sys.argv[1], int(sys.argv[2])
def load(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    rates = [x["steps_per_s"] for x in rows if "steps_per_s" in x][3:]  # past the warm-up
    tail = next((x for x in rows if "agent_cpu_s" in x), {})
    return statistics.mean(rates) if rates else None, tail
out = {"rounds": []}
for k in range(1, n + 1):
    (p, _), (a, tail) = load(f"{r}/plain_{k}.jsonl"), load(f"{r}/agent_{k}.jsonl")
    out["rounds"].append({"round": k, "plain": p, "agent": a, "ratio": a / p if p and a else None, **tail})
ratios = [x["ratio"] for x in out["rounds"] if x["ratio"]]
out["ratio_mean"] = statistics.mean(ratios)
out["ratio_sd"] = statistics.stdev(ratios) if len(ratios) > 1 else None
out["ratio_ci95_halfwidth"] = 1.96 * out["ratio_sd"] / len(ratios) ** 0.5 if out["ratio_sd"] else None
cpu = [x["agent_cpu_s"] / x["wall_s"] for x in out["rounds"] if x.get("wall_s")]
out["agent_cpu_share_of_core_max"] = max(cpu) if cpu else None
print(json.dumps(out, indent=1))
PY
cat "$R/summary.json"
