"""PyTorch-ecosystem workload written the way users write it: a Hugging Face Trainer, a Lightning
run, a torchvision DataLoader with PIL transforms, a torch.compile'd model, implicit synchronisations,
bidirectional copies, a bandwidth-bound elementwise loop, and a negative control for each rule.
Writes ground-truth markers (see wl.py).

usage: python bench/workloads/torch_fw.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from wl import Waits, args, run, spin

dev = torch.device("cuda")
A = args(__doc__)
S = A.scale
torch.manual_seed(A.seed)
WARM_STEPS = 3  # a framework's first steps allocate and tune: the phase starts after them


def mm_chain(n: int, k: int) -> tuple[torch.Tensor, int]:
    """A square bf16 matrix and how many products of it take about 1 ms."""
    m = torch.randn(n, n, device=dev, dtype=torch.bfloat16) / n**0.5  # products keep their scale
    m @ m
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        m @ m
    torch.cuda.synchronize()
    per_ms = (time.perf_counter() - t) * 1e3 / 20
    return m, max(1, round(k / per_ms))


BIG = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
MID, K1 = mm_chain(2048, 1)  # K1 products of MID ~ 1 ms of GPU


def gpu_ms(ms: float) -> torch.Tensor:
    x = MID
    for _ in range(max(1, round(ms * K1))):
        x = MID @ x
    return x


# -- Hugging Face Trainer --------------------------------------------------------------------
class Tokens(Dataset):
    def __init__(self, seq: int, vocab: int):
        self.seq, self.vocab = seq, vocab

    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, self.vocab, (self.seq,))
        return {"input_ids": ids, "labels": ids}


def hf_trainer(end: float, layers: int, width: int, seq: int, bs: int) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    cfg = GPT2Config(
        n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_positions=seq, vocab_size=8192
    )
    with torch.device("cuda"):
        model = GPT2LMHeadModel(cfg)
    seen: dict = {}
    dur = A.phase_s  # counted from the first warm step (the import above can take seconds)

    class StopAt(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step >= WARM_STEPS:
                seen.setdefault("t0", time.monotonic())

        def on_step_end(self, args, state, control, **kw):
            seen["t1"] = time.monotonic()
            if "t0" in seen and seen["t1"] >= seen["t0"] + dur:
                torch.cuda.synchronize()
                seen["t1"] = time.monotonic()
                control.should_training_stop = True

    targs = TrainingArguments(
        output_dir="/tmp/hf_out",
        per_device_train_batch_size=bs,
        max_steps=10**6,
        bf16=True,
        logging_steps=50,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    tr = Trainer(model=model, args=targs, train_dataset=Tokens(seq, 8192), callbacks=[StopAt()])
    out = tr.train()
    n = out.global_step - WARM_STEPS
    return {
        "steps": n,
        "step_ms": round(1e3 * (seen["t1"] - seen["t0"]) / max(n, 1), 1),
        "params_m": round(model.num_parameters() / 1e6, 1),
        "_t0": seen["t0"],
        "_t1": seen["t1"],
    }


# -- Lightning -------------------------------------------------------------------------------
class Augmented(Dataset):
    """Items built on the CPU (numpy work per item), as a user's augmentations are."""

    def __init__(self, item_ms: float, dim: int):
        self.item_ms, self.dim = item_ms, dim

    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int):
        spin(self.item_ms)
        x = np.random.default_rng(i).standard_normal(self.dim).astype(np.float32)
        return torch.from_numpy(x), i % 10


class Indices(Dataset):
    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int):
        return torch.zeros(1), -1  # a placeholder: the batch is made on the GPU


def lightning_fit(end: float, loader: DataLoader, width: int, depth: int, batch: int, dim: int) -> dict:
    import lightning as L

    seen: dict = {}
    dur = A.phase_s

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            layers: list[nn.Module] = [nn.Linear(dim, width)]
            for _ in range(depth):
                layers += [nn.GELU(), nn.Linear(width, width)]
            self.net = nn.Sequential(*layers, nn.Linear(width, 10))

        def training_step(self, b, i):
            x, y = b
            if y[0] < 0:  # placeholder: the data is made on the GPU
                x = torch.randn(batch, dim, device=self.device)
                y = torch.randint(0, 10, (batch,), device=self.device)
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class StopAt(L.Callback):
        def on_train_batch_start(self, trainer, *a):
            if trainer.global_step >= WARM_STEPS:
                seen.setdefault("t0", time.monotonic())

        def on_train_batch_end(self, trainer, *a):
            seen["t1"] = time.monotonic()
            if "t0" in seen and seen["t1"] >= seen["t0"] + dur:
                torch.cuda.synchronize()
                seen["t1"] = time.monotonic()
                trainer.should_stop = True

    tr = L.Trainer(
        accelerator="gpu",
        devices=1,
        max_epochs=1,
        precision="bf16-mixed",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[StopAt()],
    )
    tr.fit(Net(), loader)
    n = tr.global_step - WARM_STEPS
    return {
        "steps": n,
        "step_ms": round(1e3 * (seen["t1"] - seen["t0"]) / max(n, 1), 1),
        "_t0": seen["t0"],
        "_t1": seen["t1"],
    }


def light_input(end: float) -> dict:
    dim = 256
    dl = DataLoader(Augmented(item_ms=2.0 * S, dim=dim), batch_size=32, num_workers=2, pin_memory=True)
    return lightning_fit(end, dl, width=512, depth=2, batch=32, dim=dim)


def light_compute(end: float) -> dict:
    dl = DataLoader(Indices(), batch_size=1)
    return lightning_fit(end, dl, width=int(4096 * S) // 64 * 64, depth=6, batch=8192, dim=1024)


# -- torchvision with PIL transforms ---------------------------------------------------------
class Pictures(Dataset):
    def __init__(self, side: int, tf):
        from PIL import Image

        rng = np.random.default_rng(0)
        self.imgs = [
            Image.fromarray(rng.integers(0, 255, (side, side * 4 // 3, 3), dtype=np.uint8)) for _ in range(8)
        ]
        self.tf = tf

    def __len__(self) -> int:
        return 10**7

    def __getitem__(self, i: int):
        return self.tf(self.imgs[i % 8]), i % 1000


def tv_train(end: float, workers: int, side: int, arch: str, bs: int, reps: int) -> dict:
    import torchvision
    from torchvision import transforms as T

    tf = T.Compose(
        [
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.4, 0.4, 0.4),
            T.ToTensor(),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    model = getattr(torchvision.models, arch)(num_classes=1000).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dl = DataLoader(Pictures(side, tf), batch_size=bs, num_workers=workers, pin_memory=True, shuffle=True)
    n, dur, t0 = 0, A.phase_s, None
    for x, y in dl:
        if t0 is None:  # workers start and fill their first batches: the phase starts at the first step
            t0 = time.monotonic()
            end = t0 + dur
        x = x.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        for _ in range(reps):  # repeated augmentation: several steps per loaded batch
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            n += 1
        if time.monotonic() >= end:
            break
    torch.cuda.synchronize()
    t1 = time.monotonic()
    return {
        "steps": n,
        "step_ms": round(1e3 * (t1 - t0) / max(n, 1), 1),
        "workers": workers,
        "arch": arch,
        "bs": bs,
        "_t0": t0,
        "_t1": t1,
    }


def tv_input(end: float) -> dict:
    return tv_train(end, workers=3, side=int(480 * S), arch="resnet18", bs=64, reps=1)


def neg_tv_busy_workers(end: float) -> dict:
    """resnet50, 8 steps per loaded batch (~0.7 s of GPU at batch 256) while 3 workers each take ~1 s
    per batch: the GPU is the bottleneck and the workers stay busy. (At batch 384-499 with one step's
    worth of warm-up the GPU sat idle for the phase's first 2 s waiting for the first batches.)"""
    return tv_train(end, workers=3, side=256, arch="resnet50", bs=int(256 * S), reps=8)


# -- torch.compile ---------------------------------------------------------------------------
def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers).to(dev, torch.bfloat16)


W = int(4096 * S) // 64 * 64
BIGNET = torch.compile(mlp(W, 4))
XB = torch.randn(8192, W, device=dev, dtype=torch.bfloat16)
SMALLNET = torch.compile(mlp(2048, 3))
XS = torch.randn(int(8192 * S), 2048, device=dev, dtype=torch.bfloat16)
BIGNET(XB).sum().backward()
SMALLNET(XS).sum().item()


def compile_compute(end: float) -> dict:
    opt = torch.optim.SGD(BIGNET.parameters(), lr=1e-4)
    n = 0
    while time.monotonic() < end:
        loss = BIGNET(XB).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        n += 1
    torch.cuda.synchronize()
    return {"steps": n}


def compile_sync(end: float) -> dict:
    n, tot, w = 0, 0.0, Waits()
    while time.monotonic() < end:
        spin(3 * S)
        for _ in range(12):  # ~as much GPU time as the Python above: the two take turns
            y = SMALLNET(XS)
        tot += w.timed(lambda v: v.float().mean().item(), y)
        n += 1
    return {"steps": n, "wait_frac": w.frac()}


# -- implicit synchronisations: CPU and GPU take turns ---------------------------------------
CPU_MS, GPU_MS = 4 * S, 4 / S


def stall(end: float, sync) -> dict:
    n, w = 0, Waits()
    while time.monotonic() < end:
        spin(CPU_MS)
        y = gpu_ms(GPU_MS)
        w.timed(sync, y)
        n += 1
    return {"steps": n, "cpu_ms": round(CPU_MS, 2), "gpu_ms": round(GPU_MS, 2), "wait_frac": w.frac()}


def _isnan(y):
    if torch.isnan(y).any():
        print("nan")


def _masked(y):
    return y[y > 3.0].sum()


def _tolist(y):
    return y[:4, 0].tolist()


def _equal(y):
    return torch.equal(y[:2], y[2:4])


def _float(y):
    return float(y[0, 0])


def _nonzero(y):
    return torch.nonzero(y[:64] > 0)


# -- negative controls for attribution: the sync/copy is on the line, the work is deeper --------
TINY = nn.Sequential(*[nn.Linear(64, 64) for _ in range(40)]).to(dev)


def neg_acc_item(end: float) -> dict:
    x = torch.randn(32, 64, device=dev)
    y = torch.zeros(32, dtype=torch.long, device=dev)
    acc, n = 0, 0
    while time.monotonic() < end:
        acc += TINY(x).argmax(1).eq(y).sum().item()
        n += 1
    return {"steps": n}


def neg_model_to_dev(end: float) -> dict:
    xb = torch.randn(32, 64)
    n = 0
    while time.monotonic() < end:
        out = TINY(xb.to(dev, non_blocking=True))
        n += 1
    del out
    return {"steps": n}


def neg_bf16_cast(end: float) -> dict:
    ts = [torch.randn(64, 64, device=dev) for _ in range(64)]
    n = 0
    while time.monotonic() < end:
        casts = [t.to(torch.bfloat16) for t in ts]
        n += len(casts)
    return {"casts": n}


def neg_event_wait(end: float) -> dict:
    """The main thread waits on a threading.Event while a Python thread prepares the next batch."""
    ready, n = threading.Event(), 0

    def produce():
        while time.monotonic() < end:
            spin(6 * S)
            ready.set()

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    while time.monotonic() < end:
        ready.wait(0.1)
        ready.clear()
        gpu_ms(1)
        n += 1
    th.join()
    return {"steps": n}


def _busy_child(end: float) -> None:
    while time.monotonic() < end:
        spin(50)


def neg_child_busy(end: float) -> dict:
    """Python-bound loop while an unrelated child process (a logger, say) burns CPU: not input-bound."""
    ch = mp.get_context("fork").Process(target=_busy_child, args=(end,), daemon=True)
    ch.start()
    n = 0
    while time.monotonic() < end:
        spin(10)
        gpu_ms(0.5)
        n += 1
    ch.join()
    return {"steps": n}


def neg_nan_check(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        x = BIG @ BIG
        for _ in range(3):
            x = BIG @ BIG
        if torch.isnan(x).any():
            raise FloatingPointError
        n += 1
    return {"steps": n}


# -- copies both ways at once -----------------------------------------------------------------
NB = int(32 * S) << 20  # floats per buffer
H_PAGE = torch.ones(NB)
H_PAGE2 = torch.empty(NB)
H_PIN = torch.ones(NB).pin_memory()
H_PIN2 = torch.empty(NB).pin_memory()
D1 = torch.empty(NB, device=dev)
D2 = torch.ones(NB, device=dev)


def _bidir(end: float, up: torch.Tensor, down: torch.Tensor, nb: bool) -> dict:
    counts = [0, 0]

    def d2h():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while time.monotonic() < end:
                down.copy_(D2, non_blocking=nb)
                s.synchronize()
                counts[1] += 1

    th = threading.Thread(target=d2h)
    th.start()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        while time.monotonic() < end:
            D1.copy_(up, non_blocking=nb)
            s.synchronize()
            counts[0] += 1
    th.join()
    return {"h2d_bytes": counts[0] * NB * 4, "d2h_bytes": counts[1] * NB * 4}


def bidir_pageable(end: float) -> dict:
    return _bidir(end, H_PAGE, H_PAGE2, False)


def bidir_pinned(end: float) -> dict:
    return _bidir(end, H_PIN, H_PIN2, True)


def neg_overlap_bidir(end: float) -> dict:
    up, down, n = torch.cuda.Stream(), torch.cuda.Stream(), 0
    while time.monotonic() < end:
        with torch.cuda.stream(up):
            D1.copy_(H_PIN, non_blocking=True)
        with torch.cuda.stream(down):
            H_PIN2.copy_(D2, non_blocking=True)
        for _ in range(12):
            BIG @ BIG
        torch.cuda.synchronize()
        n += 1
    return {"steps": n}


# -- bandwidth-bound: an elementwise kernel over tensors far larger than L2 ----------------------
MEM_A = torch.ones(int(256 * S) << 20, device=dev)  # 1 GiB of float32 at scale 1
MEM_B = torch.empty_like(MEM_A)


def mem_stream(end: float) -> dict:
    """Each kernel reads and writes 2 GiB (~0.7 ms on an H100): DRAM bandwidth, not the SMs, limits it."""
    n = 0
    while time.monotonic() < end:
        for _ in range(10):
            torch.add(MEM_A, 1.0, out=MEM_B)
        torch.cuda.synchronize()
        n += 10
    return {"kernels": n, "bytes_moved": n * 2 * MEM_A.numel() * 4}


PHASES = {
    "mem_stream": ("memory", mem_stream),
    "hf_compute": ("compute", lambda e: hf_trainer(e, int(6 * S), 1536, 1024, 8)),
    "hf_tiny": ("cpu", lambda e: hf_trainer(e, 2, 64, 64, 4)),
    "light_input": ("input", light_input),
    "light_compute": ("compute", light_compute),
    "tv_input": ("input", tv_input),
    "neg_tv_busy_workers": ("compute", neg_tv_busy_workers),
    "compile_compute": ("compute", compile_compute),
    "compile_sync": ("sync", compile_sync),
    "sync_isnan": ("sync", lambda e: stall(e, _isnan)),
    "sync_masked": ("sync", lambda e: stall(e, _masked)),
    "sync_tolist": ("sync", lambda e: stall(e, _tolist)),
    "sync_equal": ("sync", lambda e: stall(e, _equal)),
    "sync_float": ("sync", lambda e: stall(e, _float)),
    "sync_nonzero": ("sync", lambda e: stall(e, _nonzero)),
    "neg_acc_item": ("cpu", neg_acc_item),
    "neg_model_to_dev": ("cpu", neg_model_to_dev),
    "neg_bf16_cast": ("cpu", neg_bf16_cast),
    "neg_event_wait": ("cpu", neg_event_wait),
    "neg_child_busy": ("cpu", neg_child_busy),
    "neg_nan_check": ("compute", neg_nan_check),
    "bidir_pageable": ("transfer", bidir_pageable),
    "bidir_pinned": ("transfer", bidir_pinned),
    "neg_overlap_bidir": ("compute", neg_overlap_bidir),
}

if __name__ == "__main__":
    run(A, PHASES)
