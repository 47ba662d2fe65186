#!/usr/bin/env bash
# Issue #35 on the GPU machine: record pipe_fw.py runs (memtop record with GPM and stacks, markers
# attached), each trimmed for tests/data, packed into $OUT/pipe.tgz.
# usage (from the tree's root, .whl carried): bash bench/workloads/pipe_device.sh "NAME:SEED:SCALE ..." BUDGET_S
set -u
runs=$1 budget=${2:-400}
whl=../../.whl; [ -d "$whl" ] || whl=.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl"/*.whl &&
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/mt . || exit 2
export PYTHONPATH=/tmp/mt:/tmp/site PATH=/tmp/mt/bin:/tmp/site/bin:$PATH
(cd /tmp && python3 -c "import memtop.collectors.host, memtop.core.model as m; assert 'wait' in m.ProcSample.__dataclass_fields__") || exit 2
nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null
spec=""
for r in $runs; do IFS=: read -r n s x <<<"$r"; spec="$spec $n:pipe_fw:$s:$x"; done
mkdir -p /tmp/pipe/trim
PHASE_S=${PHASE_S:-4} TRIM=/tmp/pipe/trim bash bench/workloads/corpus.sh /tmp/pipe/raw "$budget" "$spec"
tail -n 80 /tmp/pipe/raw/log.txt
tar czf "$OUT/pipe.tgz" -C /tmp/pipe trim raw/log.txt $(cd /tmp/pipe && ls raw/*.jsonl)
ls -la /tmp/pipe/trim "$OUT"
