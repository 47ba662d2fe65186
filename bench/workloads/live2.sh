#!/usr/bin/env bash
# Live mode on every GPU of the machine, beside a 2-rank DDP run (ddp_straggler.py): the TUI in a
# pseudo-terminal at 200x50 with every live key and two resizes, NO_COLOR --ascii at 80x24, `serve`
# scraped every 10 s beside nvidia-smi, a recording of the same minutes and its report.
# usage: bash bench/workloads/live2.sh OUTDIR   (screens: python bench/pty_screens.py OUTDIR/live200)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=$1; mkdir -p "$R"; LOG=$R/live2_log.txt
M=$R/live2.jsonl; rm -f "$M" "$R"/live2.rank*.jsonl
timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node "$(nvidia-smi -L | wc -l)" \
  bench/workloads/ddp_straggler.py --markers "$M" --seed 21 --phase-s 15 >>"$LOG" 2>&1 & wl=$!
for _ in $(seq 90); do  # until every GPU has a process
  [ "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)" -ge "$(nvidia-smi -L | wc -l)" ] && break
  sleep 1
done
echo "== $(date +%T) workload up" >>"$LOG"
memtop record -o "$R/live2.memtop" --force >>"$LOG" 2>&1 & rec=$!
memtop serve --port 9866 >>"$LOG" 2>&1 & srv=$!
python3 - "$R" >>"$LOG" 2>&1 <<'PY' & scr=$!
import subprocess, sys, time, urllib.request
r = sys.argv[1]
for i in range(1, 7):
    time.sleep(10)
    for path, name in (("/metrics", f"serve_{i}.prom"), ("/snapshot.json", f"serve_{i}.json")):
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:9866{path}", timeout=5).read()
        except OSError as e:
            body = f"error: {e}".encode()
        open(f"{r}/{name}", "wb").write(body)
    q = "index,memory.used,power.draw,utilization.gpu,clocks.sm"
    smi = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"], capture_output=True)
    open(f"{r}/smi_{i}.csv", "wb").write(smi.stdout)
PY
python3 bench/pty_keys.py 200x50 "$R/live200" \
  "12:g 4:g 3:G 3:? 3:esc 2:z 3:Z 2:space 2:left 2:left 2:right 2:space 2:c 3:esc 2:l 3:l 2:s 4:esc 2:120x40 4:80x24 4:q" \
  -- memtop >>"$LOG" 2>&1
NO_COLOR=1 python3 bench/pty_keys.py 80x24 "$R/ascii80" "8:g 3:? 3:esc 2:space 2:left 2:space 2:120x40 3:q" \
  -- memtop --ascii >>"$LOG" 2>&1
wait $scr
kill -INT $rec $srv; wait $rec $srv
echo "record/serve exit $?" >>"$LOG"
memtop report "$R/live2.memtop" >"$R/live2_report.txt" 2>&1
memtop report --format json "$R/live2.memtop" >"$R/live2_report.json" 2>>"$LOG"
wait $wl; echo "workload rc $?" >>"$LOG"
cat "$R"/live2.rank*.jsonl >"$M" 2>/dev/null
