"""Each GPU's point on the roofline, estimated from GPM pipe activity and DRAM bandwidth utilisation.

An estimate, not a measurement: a pipe's activity is the share of cycles it was busy, so achieved
FLOP/s = activity x the pipe's peak at the clock it ran at (peak x SM clock / boost clock), summed over
the pipes; bandwidth = DRAM activity x the peak bandwidth. The tensor pipe is taken at its 16-bit
(BF16/FP16) dense rate, which is what training runs on: FP8 work reads as half its FLOP/s, TF32 as twice.
Its error against measured kernels is in bench/RESULTS.md ("Roofline estimate"). Peaks are NVIDIA's
datasheet figures, keyed by the name NVML gives; a GPU not in the table has no point (never a guess).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from memtop.analysis.phases import bin_start
from memtop.core.model import GpuSample


@dataclass(frozen=True, slots=True)
class Peak:
    boost_mhz: float  # the clock the datasheet's FLOP/s are quoted at
    tensor: float  # dense BF16/FP16 tensor FLOP/s
    fp16: float  # non-tensor pipes, FLOP/s
    fp32: float
    fp64: float
    dram: float  # bytes/s


_H100_SXM = Peak(1980, 989.4e12, 133.8e12, 66.9e12, 33.5e12, 3.35e12)
# NVIDIA H100 and H200 datasheets (dense figures: the sparse ones are twice these)
PEAKS: dict[str, Peak] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": Peak(1755, 756.5e12, 102.4e12, 51.2e12, 25.6e12, 2.0e12),
    "NVIDIA H200": Peak(1980, 989.4e12, 133.8e12, 66.9e12, 33.5e12, 4.8e12),
}
ESTIMATE = "estimate from GPM pipe activity and datasheet peaks"


@dataclass(frozen=True, slots=True)
class Point:
    flops: float  # achieved FLOP/s
    bandwidth: float  # achieved DRAM bytes/s
    compute_roof: float  # 0..1 of the peak of the pipe doing most of the work
    bandwidth_roof: float  # 0..1 of the peak bandwidth
    roof: str  # that pipe: tensor / fp16 / fp32 / fp64

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per DRAM byte."""
        return self.flops / self.bandwidth if self.bandwidth > 0 else None

    @property
    def text(self) -> str:
        return (
            f"{100 * self.compute_roof:.0f} % of the {self.roof} roof / "
            f"{100 * self.bandwidth_roof:.0f} % of the bandwidth roof (estimate)"
        )


def point(g: GpuSample) -> Point | None:
    """The GPU's roofline point now, or None: no GPM, or a GPU whose peaks memtop does not know."""
    peak = PEAKS.get(g.name)
    if peak is None or g.mode != "gpm" or g.dram is None:
        return None
    clock = min(1.0, g.sm_clock / peak.boost_mhz) if g.sm_clock else 1.0
    pipes = {
        "tensor": (g.tensor, peak.tensor),
        "fp16": (g.fp16, peak.fp16),
        "fp32": (g.fp32, peak.fp32),
        "fp64": (g.fp64, peak.fp64),
    }
    flops = {k: (a or 0.0) / 100 * p * clock for k, (a, p) in pipes.items()}
    roof = max(flops, key=lambda k: flops[k])
    total = sum(flops.values())
    bw = g.dram / 100 * peak.dram
    return Point(total, bw, flops[roof] / pipes[roof][1], bw / peak.dram, roof)


READS = ("tensor", "fp16", "fp32", "fp64", "dram", "sm_clock")
TRAIL_BINS = 30  # the GPU detail's trail: the last 15 s of 0.5 s bins


def mean_point(name: str, means: dict[str, float | None]) -> Point | None:
    """point() of a span's mean reads: one bin's (the trail) or a run's busy samples (`report`)."""
    return point(GpuSample(0.0, 0, "", name, "gpm").with_values({k: means.get(k) for k in READS}))


class Trail:
    """Each GPU's roofline point per bin, the last TRAIL_BINS: mean_point of the bin's GPM samples,
    added when the bin closes (the next bin's first sample). Not thread-safe: the pipeline's lock."""

    def __init__(self, bin_s: float) -> None:
        self.bin_s = bin_s
        self.points: dict[int, deque[tuple[float, Point]]] = {}  # GPU -> (bin start, its point)
        self._open: dict[int, tuple[float, str, dict[str, list[float]]]] = {}

    def add(self, g: GpuSample) -> None:
        if g.mode != "gpm" or g.name not in PEAKS:
            return
        b = bin_start(g.t, self.bin_s)
        cur = self._open.get(g.index)
        if cur is None or cur[0] != b:
            if cur is not None:
                self._close(g.index, *cur)
            cur = self._open[g.index] = (b, g.name, {k: [] for k in READS})
        for k in READS:
            if (v := getattr(g, k)) is not None:
                cur[2][k].append(v)

    def _close(self, gpu: int, b: float, name: str, reads: dict[str, list[float]]) -> None:
        p = mean_point(name, {k: sum(v) / len(v) if v else None for k, v in reads.items()})
        if p is not None:
            self.points.setdefault(gpu, deque(maxlen=TRAIL_BINS)).append((b, p))


def report_section(name: str | None, means: dict[str, float | None] | None) -> dict | None:
    """The roofline point over a run's busy GPM samples (``means``: Recording.gpu_reads), for `report`;
    None without GPM samples; a GPU without datasheet peaks says so."""
    if not means or not means.get("samples"):
        return None
    if name not in PEAKS:
        return {"estimate": ESTIMATE, "unknown": f"no datasheet peaks for {name}: memtop never guesses one"}
    p = mean_point(name, means)
    if p is None:
        return None
    ai = p.intensity
    return {
        "estimate": ESTIMATE,
        "samples": means["samples"],
        "tflops": round(p.flops / 1e12, 1),
        "dram_gbps": round(p.bandwidth / 1e9, 1),
        "intensity": None if ai is None else round(ai, 1),
        "roof": p.roof,
        "compute_roof": round(p.compute_roof, 3),
        "bandwidth_roof": round(p.bandwidth_roof, 3),
    }


def report_lines(r: dict, md: bool) -> list[str]:
    lead = f"{'- ' if md else ''}roofline (while busy): "
    if "unknown" in r:
        return [lead + r["unknown"]]
    return [
        lead
        + f"{100 * r['compute_roof']:.0f} % of the {r['roof']} roof / {100 * r['bandwidth_roof']:.0f} % of "
        f"the bandwidth roof; {r['tflops']} TFLOP/s, {r['dram_gbps']} GB/s, {r['intensity']} FLOP/B ({r['estimate']})"
    ]
