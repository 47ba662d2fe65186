"""Energy by cause: the driver's energy counter (nvmlDeviceGetTotalEnergyConsumption), split by the phase
label of each bin.

The counter costs ~4 ms of CPU a read on the H100 (bench/RESULTS.md, "Health counters"), so it is read
every few seconds (collectors/nvml.py, with the health counters) and a GpuSample repeats the last read.
``split`` is the one computation: `report` calls it over a recording, live outputs (`snapshot`, `serve`)
over the samples and labels closed since their last count. Each rise of the counter between two reads is
shared among the samples between them in proportion to their power x time (the 10 Hz power readings
give the shape, the counter the amount), and each sample's share goes to its bin's label; after the last
read of a report's range, power x time stands in (an estimate over at most one read interval). A bin
with no label counts as "unlabelled", so the split sums to the counter's rise (plus that tail).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memtop.analysis.phases import bin_start

UNLABELLED = "unlabelled"
J_PER_KWH = 3.6e6
SOURCE = "driver energy counter, shared among bins by power"

_Floats = Sequence[float | None] | np.ndarray


def reads(e: _Floats) -> np.ndarray:
    """Indices of the samples where the counter was read: the first, and each change of its value."""
    e = np.asarray([np.nan if v is None else v for v in e], dtype=np.float64)
    ok = np.isfinite(e)
    idx = np.flatnonzero(ok)
    if not len(idx):
        return idx
    v = e[idx]
    return idx[np.concatenate(([True], v[1:] != v[:-1]))]


def per_sample(t: _Floats, e: _Floats, p: _Floats, tail: bool = True) -> np.ndarray:
    """Joules of each sample (the first gets none): counter rises shared by power x time, and with
    ``tail`` power x time after the last read."""
    ta = np.asarray(t, dtype=np.float64)
    ea = np.asarray([np.nan if v is None else v for v in e], dtype=np.float64)
    pa = np.asarray([np.nan if v is None else v for v in p], dtype=np.float64)
    out = np.zeros(len(ta))
    r = reads(ea)
    if len(ta) < 2 or not len(r):
        return out
    dt = np.diff(ta, prepend=ta[0])
    w = np.nan_to_num(pa) * dt  # power x time of each sample's interval
    k = np.arange(len(ta))
    seg = np.searchsorted(r, k)  # the read that closes each sample's interval (len(r): after the last)
    inside = (seg > 0) & (seg < len(r))
    rise = np.diff(ea[r])
    rise[rise < 0] = 0.0  # the driver reloaded: that interval gives nothing
    wsum = np.bincount(seg[inside], weights=w[inside], minlength=len(r))
    nsum = np.bincount(seg[inside], minlength=len(r))
    si = seg[inside]
    share = np.where(
        wsum[si] > 0, w[inside] / np.where(wsum[si] > 0, wsum[si], 1.0), 1.0 / np.maximum(nsum[si], 1)
    )
    out[inside] = rise[si - 1] * share
    if tail:
        after = seg == len(r)
        out[after] = w[after]
    return out


def split(
    t: _Floats,
    e: _Floats,
    p: _Floats,
    bin_t: _Floats,
    bin_label: Sequence[str] | np.ndarray,
    bin_s: float,
    tail: bool = True,
) -> dict[str, float]:
    """Joules per label from samples (times ``t`` ascending, the counter ``e`` in J as last read, power
    ``p`` in W; None where unknown) and the labelled bins (their starts ``bin_t``, ascending, and labels)."""
    j = per_sample(t, e, p, tail)
    ta = np.asarray(t, dtype=np.float64)
    some = j > 0
    at = np.rint(bin_start(ta[some], bin_s) / bin_s)
    got = j[some]
    labels = np.asarray(bin_label, dtype=object)
    bins = np.rint(np.asarray(bin_t, dtype=np.float64) / bin_s)
    out: dict[str, float] = {}
    if len(bins) and len(at):
        i = np.minimum(np.searchsorted(bins, at), len(bins) - 1)
        hit = bins[i] == at
        for lab in set(labels[i[hit]].tolist()):
            out[str(lab)] = float(got[hit][labels[i[hit]] == lab].sum())
        got = got[~hit]
    if len(got):
        out[UNLABELLED] = out.get(UNLABELLED, 0.0) + float(got.sum())
    return out


def shares(by_label: dict[str, float]) -> dict[str, dict[str, float]]:
    """{label: {joules, kwh, share}}, largest first: the report's and the snapshot's form."""
    total = sum(by_label.values()) or 1.0
    return {
        k: {"joules": round(v, 1), "kwh": round(v / J_PER_KWH, 6), "share": round(v / total, 4)}
        for k, v in sorted(by_label.items(), key=lambda kv: -kv[1])
    }


def report_section(
    series: tuple[list[float], list[float | None], list[float | None]] | None,
    bin_t: np.ndarray,
    bin_label: np.ndarray,
    bin_s: float,
) -> dict | None:
    """A GPU's energy in `report`: the counter's rise over the range (and power x time after its last
    read) split by phase, or None where the recording has no energy counter."""
    if series is None or len(series[0]) < 2:
        return None
    by = split(*series, bin_t, bin_label, bin_s)
    total = sum(by.values())
    return {
        "source": SOURCE,
        "joules": round(total, 1),
        "kwh": round(total / J_PER_KWH, 6),
        "by_phase": shares(by),
    }


def job_sections(
    per_gpu: dict[int, dict], jobs: dict[int, dict[str, list[int]]], sm_share: dict[int, list[dict]]
) -> tuple[list[dict], list[dict]]:
    """Energy per job: each job's part of its GPUs' splits (GPU -> job -> pids from
    memtop.analysis.jobs.jobs_on_gpus), and the GPUs whose energy is not attributable per job.

    A GPU with one job gives it all its energy. A GPU several jobs shared is split by their processes'
    part of its SM time over the range (``sm_share``, memtop.analysis.procshare's rows); a job's phases there are
    the GPU's labels, as the split has no per-job label. Where the recording holds no per-process SM
    figures for a shared GPU, its energy goes to no job: it is listed as not attributable, not guessed.
    """
    parts: dict[str, dict[int, float]] = {}  # job -> GPU -> its fraction of that GPU's energy
    pids: dict[str, list[int]] = {}
    unattributed = []
    for gpu, by_job in sorted(jobs.items()):
        if gpu not in per_gpu:
            continue
        for key, ps in by_job.items():
            pids[key] = sorted({*pids.get(key, []), *ps})
        share = {r["pid"]: r["sm_share"] for r in sm_share.get(gpu, [])}
        got = {k: sum(share.get(p, 0.0) for p in ps) for k, ps in by_job.items()}
        if len(by_job) == 1:
            got = dict.fromkeys(by_job, 1.0)
        if sum(got.values()) <= 0:
            unattributed.append({"gpu": gpu, "jobs": len(by_job), "why": "no per-process SM figures"})
            continue
        for key, v in got.items():
            parts.setdefault(key, {})[gpu] = v / sum(got.values())
    out = []
    for key, fraction in parts.items():
        by: dict[str, float] = {}
        for g, f in fraction.items():
            for k, v in per_gpu[g]["by_phase"].items():
                by[k] = by.get(k, 0.0) + v["joules"] * f
        total = sum(by.values())
        entry = {
            "job": key,
            "pids": pids[key],
            "gpus": sorted(fraction),
            "joules": round(total, 1),
            "kwh": round(total / J_PER_KWH, 6),
            "by_phase": shares(by),
        }
        if any(len(jobs[g]) > 1 for g in fraction):  # its part of each GPU it shared
            entry["gpu_share"] = {str(g): round(f, 3) for g, f in fraction.items() if len(jobs[g]) > 1}
        out.append(entry)
    return out, unattributed


def job_lines(jobs: list[dict], unattributed: list[dict], md: bool) -> list[str]:
    """The report's energy per job, in words."""
    dash = "- " if md else ""
    out = []
    for j in jobs:
        parts = ", ".join(f"{k} {100 * v['share']:.0f} %" for k, v in j["by_phase"].items())
        where = ", ".join(
            f"{100 * j['gpu_share'][str(g)]:.0f} % of GPU {g} by SM time"
            if str(g) in j.get("gpu_share", {})
            else f"GPU {g}"
            for g in j["gpus"]
        )
        who = f"pid{'s' if len(j['pids']) > 1 else ''} {', '.join(map(str, j['pids']))}"
        out.append(f"{dash}energy of the job of {who} ({where}): {j['kwh']:.4f} kWh: {parts}")
    for u in unattributed:
        out.append(
            f"{dash}energy of GPU {u['gpu']} is not attributable per job: {u['jobs']} jobs shared it "
            f"and the recording holds {u['why']}"
        )
    return out


def report_lines(e: dict, md: bool) -> list[str]:
    parts = ", ".join(f"{k} {100 * v['share']:.0f} %" for k, v in e["by_phase"].items())
    return [f"{'- ' if md else ''}energy: {e['kwh']:.4f} kWh ({e['joules']:.0f} J, {e['source']}): {parts}"]
