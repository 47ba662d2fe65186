"""A 2-rank DDP loop for `memtop run -- torchrun ...` + `memtop trace --job` (bench/trace_fast.sh, DDP=1):
the MLP of bench/trace_job.py under DistributedDataParallel (an NCCL all-reduce of its gradients every
step), rank 0's step rate per second as JSON lines. The ranks stop together (rank 0's clock, broadcast).
usage: python3 -m torch.distributed.run --standalone --nproc_per_node 2 trace_ddp_job.py SECONDS
"""

import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # (NVLink multicast off, as the device docs require)
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def main() -> None:
    seconds = float(sys.argv[1])
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    mlp = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048))
    model = DistributedDataParallel(mlp.to(dev), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 2048, device=dev)
    stop = torch.zeros(1, dtype=torch.int32, device=dev)
    end, steps, t_last, n_last = time.monotonic() + seconds, 0, time.monotonic(), 0
    if rank == 0:
        print(json.dumps({"ready": time.monotonic()}), flush=True)
    while True:
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        if steps % 50 == 0:
            stop.fill_(int(time.monotonic() > end))
            dist.broadcast(stop, 0)
            if stop.item():
                break
        now = time.monotonic()
        if rank == 0 and now - t_last >= 1.0:
            print(
                json.dumps({"t": round(now, 3), "steps_per_s": round((steps - n_last) / (now - t_last), 2)}),
                flush=True,
            )
            t_last, n_last = now, steps
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
