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

from collections.abc import Mapping, Sequence

import numpy as np

from memtop.analysis.phases import bin_start

UNLABELLED = "unlabelled"
J_PER_KWH = 3.6e6
SOURCE = "driver energy counter, shared among bins by power"

_Floats = Sequence[float | None] | np.ndarray


def _floats(v: _Floats) -> np.ndarray:
    """Values as floats, None as NaN (a recording's arrays already are)."""
    return (
        v
        if isinstance(v, np.ndarray)
        else np.asarray([np.nan if x is None else x for x in v], dtype=np.float64)
    )


def reads(e: _Floats) -> np.ndarray:
    """Indices of the samples where the counter was read: the first, and each change of its value."""
    e = _floats(e)
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
    ea, pa = _floats(e), _floats(p)
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
    return by_label(np.asarray(t, dtype=np.float64), per_sample(t, e, p, tail), bin_t, bin_label, bin_s)


def by_label(
    ta: np.ndarray, j: np.ndarray, bin_t: _Floats, bin_label: Sequence[str] | np.ndarray, bin_s: float
) -> dict[str, float]:
    """Each sample's joules ``j`` (at times ``ta``) summed by the label of its bin."""
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


def job_split(
    series: tuple[_Floats, _Floats, _Floats],
    bin_s: float,
    jobs: Mapping[str, tuple[Sequence[tuple[float, float]], _Floats, Sequence[str] | np.ndarray]],
    gpu_bins: tuple[_Floats, Sequence[str] | np.ndarray],
    tail: bool = True,
) -> dict[str, dict[str, float]]:
    """Joules per label of each job sharing one GPU, by its own labels. ``jobs``: key -> (its share of the
    GPU's SM time at each instant it was split, as (time, share); its bins' starts; their labels). Each
    sample's joules (``per_sample``) go to the jobs in proportion to their shares then (the newest at or
    before it, the first before the first: a job idle while the other computes takes little of that
    energy), and each job's part to its own label of that bin, or the GPU's (``gpu_bins``:
    starts and labels) in a bin the job has none of (the GPU held one job then, or the job's label of it
    has not come yet: live, a job's labels come a second after the GPU's). ``tail``: as ``per_sample``."""
    t, e, p = series
    ta = np.asarray(t, dtype=np.float64)
    j = per_sample(t, e, p, tail)
    w = np.zeros((len(jobs), len(ta)))
    for row, (shares, _, _) in enumerate(jobs.values()):
        if shares:
            pt, pv = (np.asarray(c, dtype=np.float64) for c in zip(*shares, strict=True))
            w[row] = pv[np.maximum(np.searchsorted(pt, ta, side="right") - 1, 0)]
    total = w.sum(axis=0)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    gt, gl = np.asarray(gpu_bins[0], dtype=np.float64), np.asarray(gpu_bins[1], dtype=object)
    out = {}
    for row, (key, (_, bin_t, labels)) in enumerate(jobs.items()):
        bt = np.asarray(bin_t, dtype=np.float64)
        other = ~np.isin(np.rint(gt / bin_s), np.rint(bt / bin_s))
        t_all = np.concatenate((bt, gt[other]))
        order = np.argsort(t_all, kind="stable")
        l_all = np.concatenate((np.asarray(labels, dtype=object), gl[other]))[order]
        out[key] = by_label(ta, j * w[row], t_all[order], l_all, bin_s)
    return out


def shares(by_label: dict[str, float]) -> dict[str, dict[str, float]]:
    """{label: {joules, kwh, share}}, largest first: the report's and the snapshot's form."""
    total = sum(by_label.values()) or 1.0
    return {
        k: {"joules": round(v, 1), "kwh": round(v / J_PER_KWH, 6), "share": round(v / total, 4)}
        for k, v in sorted(by_label.items(), key=lambda kv: -kv[1])
    }


def report_section(
    series: tuple[_Floats, _Floats, _Floats] | None,
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
    per_gpu: dict[int, dict],
    jobs: dict[int, dict[str, list[int]]],
    sm_share: dict[int, list[dict]],
    own: Mapping[int, Mapping[str, tuple[list[int], dict[str, float]]]] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Energy per job: each job's part of its GPUs' splits (GPU -> job -> pids from
    memtop.analysis.jobs.jobs_on_gpus), and the GPUs whose energy is not attributable per job.

    A GPU with one job gives it all its energy. A GPU whose jobs were labelled apart (``own``: GPU ->
    job -> (its pids, its joules by its own labels: ``job_split``)) gives each job what it used by its
    own phases. Any other GPU several jobs shared is split by their processes' part of its SM time over
    the range (``sm_share``, memtop.analysis.procshare's rows), by the GPU's labels. Where the recording
    holds no per-process SM figures for a shared GPU, its energy goes to no job: it is listed as not
    attributable, not guessed.
    """
    own = own or {}
    joules: dict[str, dict[int, dict[str, float]]] = {}  # job -> GPU -> its joules there by label
    pids: dict[str, list[int]] = {}
    unattributed = []
    for gpu, by_job in sorted(jobs.items()):
        if gpu not in per_gpu:
            continue
        if gpu in own:
            by_job = {k: ps for k, (ps, _) in own[gpu].items()}
            got = {k: by for k, (_, by) in own[gpu].items()}
        else:
            share = {r["pid"]: r["sm_share"] for r in sm_share.get(gpu, [])}
            sm = (
                dict.fromkeys(by_job, 1.0)
                if len(by_job) == 1
                else {k: sum(share.get(p, 0.0) for p in ps) for k, ps in by_job.items()}
            )
            if sum(sm.values()) <= 0:
                unattributed.append({"gpu": gpu, "jobs": len(by_job), "why": "no per-process SM figures"})
                continue
            f = {k: v / sum(sm.values()) for k, v in sm.items()}
            got = {k: {lab: v["joules"] * f[k] for lab, v in per_gpu[gpu]["by_phase"].items()} for k in sm}
        for key, ps in by_job.items():
            pids[key] = sorted({*pids.get(key, []), *ps})
        for key, there in got.items():
            joules.setdefault(key, {})[gpu] = there
    out = []
    for key, per in joules.items():
        by: dict[str, float] = {}
        for b in per.values():
            for k, v in b.items():
                by[k] = by.get(k, 0.0) + v
        total = sum(by.values())
        entry = {
            "job": key,
            "pids": pids[key],
            "gpus": sorted(per),
            "joules": round(total, 1),
            "kwh": round(total / J_PER_KWH, 6),
            "by_phase": shares(by),
        }
        shared = [g for g in per if len(jobs[g]) > 1 or g in own]
        if shared:  # its part of each GPU it shared
            entry["gpu_share"] = {
                str(g): round(sum(per[g].values()) / (_joules(per_gpu[g]) or 1.0), 3) for g in sorted(shared)
            }
        out.append(entry)
    return out, unattributed


def _joules(gpu: dict) -> float:
    """A GPU's joules in a report's or a snapshot's energy section (the latter has only its phases)."""
    return sum(v["joules"] for v in gpu["by_phase"].values())


def job_lines(jobs: list[dict], unattributed: list[dict], md: bool) -> list[str]:
    """The report's energy per job, in words."""
    dash = "- " if md else ""
    out = []
    for j in jobs:
        parts = ", ".join(f"{k} {100 * v['share']:.0f} %" for k, v in j["by_phase"].items())
        where = ", ".join(
            f"{100 * j['gpu_share'][str(g)]:.0f} % of GPU {g}'s energy by SM time"
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
