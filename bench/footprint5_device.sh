#!/usr/bin/env bash
# On the GPU machine (issue #39, branch foot5): where the live view's CPU goes at its defaults, with this
# tree (installed) beside main (the device copy's root, installed apart in /tmp/oldsite), one interpreter,
# 200x50 ptys (footprint4_device.sh's install and pty_bench method):
# 1. the cost of each NVML call (bench/nvml_cost.py) and of one `py-spy dump --nonblocking --json` of a
#    torch process (CPU of the child, N dumps);
# 2. under a saturated bf16 matmul load: this tree's defaults and --no-stacks --interval 1 (per thread,
#    a py-spy profile of each taken during its window, smaps 2 s before its end), main's defaults;
# 3. under a "half-busy" load (a loop of matmuls, a Python spin, then .item()): this tree's and main's
#    defaults. As run (5d9f820) the spin overlapped the queued matmuls and the GPU stayed saturated: use
#    footprint5_side.sh's part-busy loads instead.
# usage (from this tree's root on the device): bash bench/footprint5_device.sh OUTDIR [S] [WARM] [OLDTREE]
set -u
R=$1; S=${2:-16}; W=${3:-6}; OLD=${4:-../..}
. bench/device_setup.sh  # installs, machine.txt, $OLDM
B="python3 bench/pty_bench.py $S 200x50 $W"
busy() {  # the load's GPU busy % as nvidia-smi reads it
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits
}
load() {  # KIND: saturated (matmuls back to back) or half (matmuls, a Python spin, a sync)
  python3 -c "
import torch,time,sys
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+600
while time.time()<end:
    if sys.argv[1]=='saturated':
        [a@a for _ in range(10)]; torch.cuda.synchronize()
    else:
        [a@a for _ in range(4)]
        t=time.perf_counter()
        while time.perf_counter()-t<0.005: pass
        (a[0,0]+1).item()" "$1" &
  LOAD=$!
  until [ "$(busy)" -gt 30 ] 2>/dev/null; do sleep 0.5; done
  sleep 2
}
profile() {  # NAME PATTERN: a py-spy profile of the newest matching process during its window
  (sleep $((W + 1)); P=$(pgrep -n -f "$2")
   py-spy record -p "$P" -d $((S - 3)) -r 500 -f raw -o "$R/prof_$1.txt" --threads --nonblocking >/dev/null 2>&1
   python3 bench/profile_sum.py "$R/prof_$1.txt" > "$R/prof_$1.md" 2>&1) &
}
smaps() {  # LABEL PATTERN
  (sleep $((S + W - 2)); python3 bench/smaps_top.py "$(pgrep -n -f "$2")" "$1" >> "$R/smaps.jsonl") &
}
load saturated
echo "saturated load: $(busy) %" >> "$R/machine.txt"
python3 bench/nvml_cost.py 200 > "$R/nvml_cost.jsonl" 2>&1
python3 - "$LOAD" > "$R/pyspy_dump_cost.json" <<'EOF'
import json, resource, subprocess, sys, time
pid, n = sys.argv[1], 20
r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
sizes = [len(subprocess.run(["py-spy", "dump", "--json", "--nonblocking", "--pid", pid], capture_output=True).stdout) for _ in range(n)]
r1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n
print(json.dumps({"dumps": n, "cpu_ms_each": round(1e3 * cpu, 2), "wall_ms_each": round(1e3 * (t1 - t0) / n, 2),
                  "user_ms": round(1e3 * (r1.ru_utime - r0.ru_utime) / n, 2), "json_bytes": sizes[-1]}))
EOF
profile defaults "bin/memtop --no-mouse$"
$B --threads -- memtop --no-mouse >> "$R/tui.jsonl"
$B -- $OLDM --no-mouse >> "$R/tui.jsonl"
profile 1hz "bin/memtop --no-mouse --no-stacks"
smaps "this tree 1 Hz" "bin/memtop --no-mouse --no-stacks"
$B --threads -- memtop --no-mouse --no-stacks --interval 1 >> "$R/tui.jsonl"
kill $LOAD; wait $LOAD 2>/dev/null
load half
echo "half load: $(busy) %" >> "$R/machine.txt"
echo '{"load": "half"}' >> "$R/tui.jsonl"
profile half "bin/memtop --no-mouse$"
$B --threads -- memtop --no-mouse >> "$R/tui.jsonl"
$B -- $OLDM --no-mouse >> "$R/tui.jsonl"
kill $LOAD
wait
