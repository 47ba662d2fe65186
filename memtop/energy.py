"""Energy by cause: the driver's energy counter (nvmlDeviceGetTotalEnergyConsumption, not power
integrated from samples) split by the phase label of each bin.

``split`` is the one computation: `report` calls it over a recording's counter and labels, live
outputs (`snapshot`, `serve`) over the samples and labels closed since their last count. Each rise of
the counter between two samples goes to the bin of the later sample; a bin with no label (before the
first one) counts as "unlabelled", so the split always sums to the counter's rise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memtop.phases import bin_start

UNLABELLED = "unlabelled"
J_PER_KWH = 3.6e6


def split(
    t: Sequence[float] | np.ndarray,
    e: Sequence[float] | np.ndarray,
    bin_t: Sequence[float] | np.ndarray,
    bin_label: Sequence[str] | np.ndarray,
    bin_s: float,
) -> dict[str, float]:
    """Joules per label from counter readings ``e`` (J) at times ``t`` (ascending) and the labelled
    bins (their starts ``bin_t``, ascending, and labels). A counter that went back (the driver
    reloaded) gives nothing for that step."""
    ta = np.asarray(t, dtype=np.float64)
    ea = np.asarray(e, dtype=np.float64)
    if len(ta) < 2:
        return {}
    rise = np.diff(ea)
    ok = rise > 0
    at = np.rint(bin_start(ta[1:][ok], bin_s) / bin_s)
    rise = rise[ok]
    labels = np.asarray(bin_label, dtype=object)
    bins = np.rint(np.asarray(bin_t, dtype=np.float64) / bin_s)
    out: dict[str, float] = {}
    if len(bins):
        i = np.minimum(np.searchsorted(bins, at), len(bins) - 1)
        hit = bins[i] == at
        for lab in set(labels[i[hit]].tolist()):
            out[str(lab)] = float(rise[hit][labels[i[hit]] == lab].sum())
        rise = rise[~hit]
    if len(rise):
        out[UNLABELLED] = out.get(UNLABELLED, 0.0) + float(rise.sum())
    return out


def shares(by_label: dict[str, float]) -> dict[str, dict[str, float]]:
    """{label: {joules, kwh, share}}, largest first: the report's and the snapshot's form."""
    total = sum(by_label.values()) or 1.0
    return {
        k: {"joules": round(v, 1), "kwh": round(v / J_PER_KWH, 6), "share": round(v / total, 4)}
        for k, v in sorted(by_label.items(), key=lambda kv: -kv[1])
    }


def report_section(
    series: tuple[list[float], list[float]] | None, bin_t: np.ndarray, bin_label: np.ndarray, bin_s: float
) -> dict | None:
    """A GPU's energy in `report`: the counter's rise over the range and its split by phase, or None
    where the recording has no energy counter."""
    if series is None or len(series[0]) < 2:
        return None
    by = split(series[0], series[1], bin_t, bin_label, bin_s)
    total = sum(by.values())
    return {
        "source": "driver energy counter",
        "joules": round(total, 1),
        "kwh": round(total / J_PER_KWH, 6),
        "by_phase": shares(by),
    }


def job_sections(per_gpu: dict[int, dict], jobs: dict[int, str]) -> list[dict]:
    """Energy per job (GPUs grouped by memtop.jobs): the sum of its GPUs' splits."""
    groups: dict[str, list[int]] = {}
    for gpu, key in jobs.items():
        if gpu in per_gpu:
            groups.setdefault(key, []).append(gpu)
    out = []
    for gpus in groups.values():
        by: dict[str, float] = {}
        for g in gpus:
            for k, v in per_gpu[g]["by_phase"].items():
                by[k] = by.get(k, 0.0) + v["joules"]
        total = sum(by.values())
        out.append(
            {
                "gpus": sorted(gpus),
                "joules": round(total, 1),
                "kwh": round(total / J_PER_KWH, 6),
                "by_phase": shares(by),
            }
        )
    return out


def report_lines(e: dict, md: bool) -> list[str]:
    parts = ", ".join(f"{k} {100 * v['share']:.0f} %" for k, v in e["by_phase"].items())
    return [f"{'- ' if md else ''}energy: {e['kwh']:.4f} kWh ({e['joules']:.0f} J, {e['source']}): {parts}"]
