#!/usr/bin/env bash
# Per-process GPU utilisation on the GPU machine (#37): two processes on GPU 0, one compute-heavy and
# one light (input-bound: it sleeps on the CPU between short bursts), memtop's recording against
# `nvidia-smi pmon -s u` over the same 30 s, the NVML fixture of the per-process replies, and what
# this machine's cgroups and PID namespaces look like. Results under $OUT/r, packed into $OUT/procs.tgz.
set -u
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"; LOG=$R/log.txt
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
HEAVY='
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
'
LIGHT='
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    time.sleep(0.05)  # the "input pipeline": the GPU waits for the host
    for _ in range(6):
        a @ a
    torch.cuda.synchronize()
'
python3 -c "$HEAVY" 80 & HP=$!
python3 -c "$LIGHT" 80 & LP=$!
say "heavy $HP light $LP"
sleep 10
say fixture
python3 bench/procs_fixture.py "$R/nvml_procs_h100.json" 10 >>"$LOG" 2>&1
say "pmon and record, 30 s"
nvidia-smi pmon -s u -o T -d 1 -c 30 > "$R/pmon.txt" 2>>"$LOG" &
PM=$!
memtop record -o "$R/procs_h100.memtop" --duration 31 --force >>"$LOG" 2>&1
wait $PM
say compare
python3 bench/procs_pmon.py "$R/pmon.txt" "$R/procs_h100.memtop" | tee "$R/compare.txt" >>"$LOG" 2>&1
memtop report "$R/procs_h100.memtop" >"$R/report.txt" 2>>"$LOG"
say "cgroups and namespaces"
{ echo "# /proc/self/cgroup"; cat /proc/self/cgroup; echo "# /proc/$HP/cgroup"; cat /proc/$HP/cgroup;
  echo "# mountinfo cgroup"; grep cgroup /proc/self/mountinfo; echo "# ns"; ls -l /proc/self/ns/pid;
  echo "# NSpid"; grep NSpid /proc/self/status; id; } > "$R/cgroup_device.txt" 2>&1
# memtop and a GPU process in their own PID namespace, the host's /proc handed in as a descriptor
# (as `-v /proc:/host/proc:ro` would mount it): NVML names the process by its host PID
if unshare --pid --fork --mount-proc true 2>>"$LOG"; then
  say "PID namespace"
  exec 9</proc
  export R LIGHT
  unshare --pid --fork --mount-proc env MEMTOP_HOST_PROC=/proc/self/fd/9 bash -c '
    python3 -c "$LIGHT" 25 & sleep 10
    grep NSpid /proc/$!/status > "$R/ns_inside.txt"
    memtop snapshot --json --interval 3 --count 1 > "$R/snapshot_ns.json"
    memtop doctor >> "$R/ns_inside.txt" 2>&1; wait' >>"$LOG" 2>&1
  exec 9<&-
else
  say "unshare not permitted"
fi
wait $HP $LP
tar czf "$OUT/procs.tgz" -C "$R" .
say done
