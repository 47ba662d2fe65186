"""A small CUDA training loop for `memtop run` + `memtop trace` on the device (bench/trace_device.sh).

Each step copies a pinned batch to the GPU (memcpy HtoD), runs an MLP forward/backward and an
optimizer step; every SYNC_EVERY steps it synchronises and notes CLOCK_MONOTONIC right after the
sync returns: the merged trace's cudaDeviceSynchronize must end just before each note (the
GPU-to-host clock check of bench/trace_summary.py). It prints its step rate per second as JSON lines.
usage: trace_job.py SECONDS MARKS.json
"""

import json
import sys
import time

import torch
from steprate import StepRate

SYNC_EVERY = 50


def main() -> None:
    seconds, marks_path = float(sys.argv[1]), sys.argv[2]
    cuda = torch.cuda.is_available()  # (a CPU machine: a dry run of bench/trace_device.sh)
    dev = torch.device("cuda" if cuda else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).to(
        dev
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(512, 2048)
    batch = batch.pin_memory() if cuda else batch
    marks, steps = [], 0
    rate = StepRate()
    end = time.monotonic() + seconds
    print(json.dumps({"ready": time.monotonic()}), flush=True)
    while time.monotonic() < end:
        x = batch.to(dev, non_blocking=True)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        if steps % SYNC_EVERY == 0:
            if cuda:
                torch.cuda.synchronize()
            marks.append(time.monotonic())
        rate.tick(steps)
    with open(marks_path, "w") as fh:
        json.dump({"sync_marks": marks, "steps": steps}, fh)


if __name__ == "__main__":
    main()
