#!/usr/bin/env bash
# Record labelled 2-GPU runs on the device: one `memtop record` watching both GPUs beside a torchrun
# of ddp_straggler.py; the ranks' marker files are joined and attached to the recording at its end.
# usage: bash bench/workloads/ddp_corpus.sh OUTDIR BUDGET_S "NAME:SEED:SCALE ..."
# PACK=FILE.tgz: pack OUTDIR there after each run. A run starts only while BUDGET_S seconds have not
# passed (each takes ~1.5 min at PHASE_S=8).
set -u
# NVLink multicast stays off in every process started here (the device docs require it)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=$1 budget=$2 runs=$3
mkdir -p "$out"; log=$out/log.txt
start=$(date +%s)
for r in $runs; do
  IFS=: read -r name seed scale <<<"$r"
  if (( $(date +%s) - start > budget )); then echo "skip $name (budget)" | tee -a "$log"; continue; fi
  m=$out/$name.jsonl; rm -f "$m" "$out/$name".rank*.jsonl
  echo "== $(date +%T) $name seed $seed scale $scale" | tee -a "$log"
  memtop record -o "$out/$name.memtop" --force --markers "$m" >>"$log" 2>&1 &
  rec=$!
  sleep 2
  timeout "${RUN_S:-150}" python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/workloads/ddp_straggler.py \
    --markers "$m" --seed "$seed" --scale "$scale" --phase-s "${PHASE_S:-8}" >>"$log" 2>&1
  echo "torchrun rc $?" | tee -a "$log"
  cat "$out/$name".rank*.jsonl > "$m"
  sleep 1; kill -INT $rec; wait $rec
  ls -la "$out/$name.memtop" | tee -a "$log"
  [ -n "${PACK:-}" ] && tar czf "$PACK" -C "$out" .
done
