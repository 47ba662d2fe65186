"""The GPU loads of bench/footprint5_side.sh, from a file so that py-spy's stacks read its lines as a
real job's (from a `python -c` string no line is readable, so no stack reads as a sync wait).

usage: python bench/footprint_load.py saturated|sleep|spin READY_FILE
saturated: ten bf16 matmuls and a synchronize, over and over (nvidia-smi 100 %);
sleep: two matmuls, .item(), 5 ms asleep (GPU and process each ~40 % busy);
spin: four matmuls, .item(), 5 ms spinning (GPU ~55 % busy, the process on a core).
"""

import sys
import time

import torch


def main() -> None:
    kind, ready = sys.argv[1], sys.argv[2]
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    open(ready, "w").close()
    end = time.time() + 900
    while time.time() < end:
        if kind == "saturated":
            [a @ a for _ in range(10)]
            torch.cuda.synchronize()
            continue
        [a @ a for _ in range(2 if kind == "sleep" else 4)]
        (a[0, 0] + 1).item()
        if kind == "sleep":
            time.sleep(0.005)
        else:
            t = time.perf_counter()
            while time.perf_counter() - t < 0.005:
                pass


if __name__ == "__main__":
    main()
