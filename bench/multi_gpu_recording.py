"""Write an N-GPU recording made from the real 1-GPU H100 recording (see tests/multigpu.py).

usage: python bench/multi_gpu_recording.py OUT.memtop [N]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from multigpu import multi_gpu  # noqa: E402

from memtop.storage.store import Recording, Writer  # noqa: E402

if __name__ == "__main__":
    out, n = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8
    src = Recording(ROOT / "tests/data/labelled_s0.memtop")
    g0 = (src.meta.get("gpus") or [{}])[0]
    meta = {
        **src.meta,
        "gpus": [{**g0, "index": i, "uuid": f"{g0.get('uuid', 'GPU')}-{i}"} for i in range(n)],
    }
    for k in ("magic", "schema", "memtop_version"):
        meta.pop(k, None)
    w = Writer(out, meta, force=True)
    for f in multi_gpu(list(src.frames()), n):
        w.add(f)
    w.close()
    print(out)
