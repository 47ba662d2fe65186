#!/usr/bin/env bash
# Steps run on the lent GPU machine (see bench/README.md). usage: bash bench/device_run.sh "STEP ..."
# Steps: install doctor fixture gputests seed0..seed9 long live2 overhead stacks storebench reportab scale replay8 tui profile nvmlcost ab
# Results go to $OUT/r and are packed into $OUT/results.tgz after every step.
set -u
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p "$R"; LOG=$R/log.txt
PH=${PHASE_S:-5}
pack() { tar czf "$OUT/results.tgz" -C "$R" . ; }
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }

for step in $1; do
  say "step $step"
  case $step in
  install)
    python3 -c "import textual, memtop" 2>/dev/null || {
      python3 -m pip install -q --no-index --find-links .whl textual py-spy prometheus_client nvidia-ml-py >>"$LOG" 2>&1
      python3 -m pip install -q --no-index --find-links .whl nvitop >>"$LOG" 2>&1  # (only for ab, tui)
      python3 -m pip install -q --no-index --no-deps --no-build-isolation . >>"$LOG" 2>&1
    }
    python3 -c "import textual, memtop; print('textual', textual.__version__)" >>"$LOG" 2>&1
    command -v py-spy >>"$LOG" 2>&1 || echo "py-spy not on PATH: recordings will have no stacks" >>"$LOG"
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv >>"$LOG" 2>&1
    ;;
  doctor)
    memtop doctor >>"$LOG" 2>&1; memtop doctor --json > "$R/doctor.json" 2>&1 ;;
  fixture)
    python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+25
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
    until [ "$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] 2>/dev/null; do sleep 0.5; done
    python3 bench/nvml_fixture.py "$R/nvml_h100.json" >>"$LOG" 2>&1; wait ;;
  gputests)
    python3 -P -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py >>"$LOG" 2>&1 ;;
  seed*)
    s=${step#seed}; M=$R/markers_s$s.jsonl; rm -f "$M"
    memtop record -o "$R/labelled_s$s.memtop" --force --markers "$M" >>"$LOG" 2>&1 &
    rec=$!; rec2=
    if [ "$s" = 2 ]; then  # the same run seen in NVML-only mode, for the no-GPM accuracy figure
      memtop record -o "$R/labelled_s2_nogpm.memtop" --no-gpm --force --markers "$M" >>"$LOG" 2>&1 & rec2=$!
    fi
    if [ "$s" = 0 ]; then
      nvidia-smi dmon --gpm-metrics 1,2,3,5,10,20,21 -d 1 -o DT > "$R/dmon_s0.txt" 2>&1 & dm=$!
      nvidia-smi --query-gpu=timestamp,memory.used,power.draw --format=csv,noheader -lms 1000 > "$R/smi_s0.csv" 2>&1 & sm=$!
    fi
    sleep 3
    python3 bench/workload.py --markers "$M" --seed "$s" --phase-s "$PH" >>"$LOG" 2>&1
    sleep 1; kill -INT $rec $rec2; wait $rec $rec2
    [ "$s" = 0 ] && kill $dm $sm
    python3 -c "import time; print('wall-monotonic', time.time()-time.monotonic())" >>"$LOG"
    ;;
  long)  # #21: a real recording at defaults beside a torch run with DataLoader workers (LONG_PHASE_S 12:
    # ~6 min, longer than a column block; 5: ~2.5 min, a short run's fixed cost); session 12 called it long3
    S=${LONG_SEED:-13}; P=${LONG_PHASE_S:-12}; F=$R/long_torch_s${S}_p${P}.memtop; M=$R/markers_long_s$S.jsonl; rm -f "$M"
    memtop record -o "$F" --force --markers "$M" >>"$LOG" 2>&1 & rec=$!
    sleep 2
    timeout 420 python3 bench/workloads/torch_fw.py --markers "$M" --seed "$S" --phase-s "$P" >>"$LOG" 2>&1
    sleep 1; kill -INT $rec; wait $rec
    ls -la "$F" >>"$LOG"
    { time memtop report "$F"; } >>"$LOG" 2>&1 ;;
  live2)  # live mode on every GPU beside a DDP run: TUI keys and resizes, --ascii NO_COLOR, serve, record
    bash bench/workloads/live2.sh "$R" ;;
  overhead)
    python3 bench/collector_overhead.py 10 > "$R/collector_overhead.json" 2>>"$LOG" ;;
  stacks)
    python3 bench/stack_overhead.py ${STACK_WINDOW:-5} ${STACK_ROUNDS:-2} ${STACK_MATMULS:-6} > "$R/stack_overhead.json" 2>>"$LOG" ;;
  storebench)
    python3 bench/store_bench.py 3600 /tmp/hour.memtop > "$R/store_bench.json" 2>>"$LOG" ;;
  scale)
    python3 bench/scale_bench.py 10 > "$R/scale_bench.jsonl" 2>>"$LOG" ;;
  reportab)  # report time on the hour from storebench: the tree in .old (git archive) vs this one, serial and parallel
    for k in 1 2 3; do for tree in old serial parallel; do
      dir=.; [ $tree = old ] && dir=.old  # run from the tree's own directory: sys.path[0] is the cwd
      (cd $dir && python3 -c "
import time, os; from memtop.storage.store import Recording; from memtop.outputs.report import build_report
if '$tree' == 'serial':
    import memtop.analysis.scan; memtop.analysis.scan.CHUNK_MIN_S = 1e9
import memtop; assert os.path.dirname(memtop.__file__).startswith(os.getcwd()), memtop.__file__
r = Recording('/tmp/hour.memtop'); a = time.perf_counter(); build_report(r)
print('{\"tree\": \"$tree\", \"report_s\": %.3f}' % (time.perf_counter() - a))") >> "$R/report_ab.jsonl" 2>>"$LOG"
    done; done ;;
  replay8)  # the figure: an 8-GPU recording replayed at defaults, 200x50
    python3 bench/multi_gpu_recording.py /tmp/g8.memtop 8 >>"$LOG" 2>&1
    for k in 1 2; do python3 bench/pty_bench.py ${TUI_S:-20} 200x50 -- memtop --no-mouse replay /tmp/g8.memtop >> "$R/replay8.jsonl"; done ;;
  ab)  # this build vs the tree in .old vs nvitop, 1 s refresh, interleaved
    bash bench/tui_ab.sh "$R" ${TUI_S:-20} ${TUI_WARM:-8} ${AB_ROUNDS:-3} >>"$LOG" 2>&1 ;;
  tui)
    bash bench/tui_vs_nvitop.sh "$R" ${TUI_S:-20} ${TUI_WARM:-8} >>"$LOG" 2>&1 ;;
  nvmlcost)  # CPU time per NVML call, and of nvmlGpmMetricsGet by metric count, under a compute load
    python3 -c "
import torch,time
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
end=time.time()+40
while time.time()<end:
    [a@a for _ in range(10)]; torch.cuda.synchronize()" &
    sleep 8; python3 bench/nvml_cost.py 200 > "$R/nvml_cost.jsonl" 2>>"$LOG"; wait ;;
  profile)  # where memtop's CPU goes, live at 1 Hz under a compute load, in steady state (py-spy, per thread)
    bash bench/profile_live.sh "$R" >>"$LOG" 2>&1 ;;
  esac
  pack
done
say done; pack
