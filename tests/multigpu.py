"""8- and 16-GPU Frames made from a real 1-GPU H100 recording (for UI snapshots and scale benches).

GPU i shows the recorded GPU's signals shifted by i x 11 s, so rows differ. The signals are
real; the multi-GPU machine is not — never use this as evidence that a collector works.
"""

from __future__ import annotations

from dataclasses import replace

from memtop.core.model import Frame

# multi_gpu's answers for a module's own frames list, made once (a Pilot test's 8-GPU pipeline spent
# half its set-up here): keyed by the list's identity, the list kept alive so that the key stays its
_MADE: dict[tuple[int, int], tuple[list[Frame], list[Frame]]] = {}


def multi_gpu_of(frames: list[Frame], n: int) -> list[Frame]:
    """``multi_gpu(frames, n)``, made once per list and ``n``; the caller must not change either list
    (Frames are frozen: slices and reads only)."""
    key = (id(frames), n)
    if key not in _MADE:
        _MADE[key] = (frames, multi_gpu(frames, n))
    return _MADE[key][1]


def multi_gpu(frames: list[Frame], n: int, shift_s: float = 11.0) -> list[Frame]:
    with_gpu = [f for f in frames if f.gpus]
    step = max(1, round(shift_s / 0.1))
    out = []
    for k, f in enumerate(frames):
        if not f.gpus:
            out.append(f)
            continue
        gpus = []
        for i in range(n):
            src = with_gpu[(k + i * step) % len(with_gpu)].gpus[0]
            gpus.append(replace(src, t=f.gpus[0].t, index=i, uuid=f"{src.uuid[:-2]}{i:02d}"))
        out.append(replace(f, gpus=tuple(gpus), series=()))
    return out
