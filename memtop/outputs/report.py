"""`memtop report`: the triage report of a recording (text, markdown, JSON).

The JSON form is the stable schema ("memtop-report/1", docs/REPORT.md); text and markdown
are rendered from it, so all three say the same thing.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from itertools import repeat
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any, cast

import numpy as np

from memtop.analysis import energy, health, roofline
from memtop.analysis.colscan import no_gc, report_scan
from memtop.analysis.jobs import jobs_of, jobs_on_gpus
from memtop.analysis.jobshare import READ_SKIP as JOB_READ_SKIP
from memtop.analysis.jobshare import SharedReport, entry_key, report_jobs, shared_verdict
from memtop.analysis.labelcols import codes as label_codes
from memtop.analysis.labelcols import columns as label_columns
from memtop.analysis.labelcols import counts as label_counts
from memtop.analysis.phases import CHARS, TITLES, Classifier, bin_start
from memtop.analysis.procshare import proc_shares
from memtop.analysis.scan import Stacks
from memtop.analysis.straggler import episodes
from memtop.analysis.verdict import verdict
from memtop.core.errors import UserError
from memtop.core.model import ProcSample
from memtop.core.sanitize import clean
from memtop.core.stackclass import site
from memtop.core.timefmt import clock, length
from memtop.core.wording import counted
from memtop.storage.store import Recording

SCHEMA = "memtop-report/1"


GAPS_SHOWN = 5  # the longest gaps listed in text, in time order
SOME_READS = "some stack reads failed; the stacks read at other times are used"
PERF_UNITS = {
    "task-clock": ("CPUs busy", 1, 2),
    "ipc": ("instructions/cycle", 1, 2),
    "cache-miss-rate": ("%", 100, 1),
}


def _perf(k: str, v: float) -> str:
    """A perf rate with its unit (the counters are per second unless PERF_UNITS says otherwise)."""
    unit, scale, digits = PERF_UNITS.get(k, ("/s", 1, 0))
    return f"{k} {scale * v:.{digits}f}{'' if unit == '/s' else ' '}{unit}"


def _phase_stacks(
    stacks: Stacks, pids: set[int], t: np.ndarray, labels: np.ndarray, bin_s: float, cache: dict
) -> dict[str, Counter]:
    """The main-thread stacks of the GPU's processes counted under the label of the bin each sample
    falls in (``t``, ``labels``: the bins' starts and labels). Each distinct dump's main thread and
    site are found once per pid (``cache``): an 8-hour report meets 57,600 samples and a few hundred
    stacks, counted over arrays (a step per sample cost an 8-hour report a tenth of a second)."""
    by_label: dict[str, Counter] = defaultdict(Counter)
    mine = np.flatnonzero(np.isin(stacks.pid, np.fromiter(pids, dtype=np.int64, count=len(pids))))
    if not len(mine) or not len(t):
        return by_label
    # each (pid, dump) pair once, as integers (np.unique of rows sorts them as structured values)
    pid_at = np.unique(stacks.pid[mine], return_inverse=True)[1].reshape(-1)
    pair = pid_at * len(stacks.dumps) + stacks.kind[mine]
    _, first, inv = np.unique(pair, return_index=True, return_inverse=True)
    f = mine[first]  # each pair's first sample
    key_id: dict[tuple, int] = {}  # each distinct key (a site) once: pairs may share one
    ids = []
    for pid, k, j in zip(stacks.pid[f].tolist(), stacks.kind[f].tolist(), f.tolist(), strict=True):
        key = cache.get((pid, k), ())
        if key == ():
            m = stacks.sample(j).main
            key = cache[pid, k] = (m.klass, *site(m.frames)) if m is not None and m.frames else None
        ids.append(-1 if key is None else key_id.setdefault(key, len(key_id)))
    kid = np.array(ids, dtype=np.int64)[inv.reshape(-1)]
    keep = kid >= 0
    if not keep.any():
        return by_label
    kid = kid[keep]
    # a sample's bin, and the label of that bin if there is one: round() of the bin starts in bins
    n = np.rint(bin_start(stacks.t[mine[keep]].astype(np.float64), bin_s) / bin_s)
    bins = np.rint(t / bin_s)
    i = np.minimum(np.searchsorted(bins, n), len(bins) - 1)
    hit = bins[i] == n
    # each (label, key) counted; labels and their keys in the order met (as a Counter of the samples)
    lab, names = label_codes(labels)
    code = lab[i[hit]] * len(key_id) + kid[hit]
    got, at, count = np.unique(code, return_index=True, return_counts=True)
    keys, order = list(key_id), np.argsort(at)
    for c, m in zip(got[order].tolist(), count[order].tolist(), strict=True):
        by_label[names[c // len(keys)]][keys[c % len(keys)]] = m
    return by_label


def build_report(
    rec: Recording,
    gpu: int | None = None,
    t_from: float | None = None,
    t_to: float | None = None,
) -> dict:
    """The report of [t_from, t_to] (seconds into the recording), from the scan by columns
    (memtop.analysis.colscan)."""
    with no_gc():  # the labels of hours: hundreds of thousands of objects, no cycles
        return _build_report(rec, gpu, t_from, t_to)


class _Reads:
    """The report's reads besides its scan (health samples, energy, the roofline's means, markers),
    made while this process waits for the scan's other chunks where they need no scan: the GPU rows'
    come from the scan's own read of them (each chunk's ``Aggregates.rows``). What a read notes as
    damaged is noted where the report takes its result, as when it was read there."""

    def __init__(self, rec: Recording, lo: float, hi: float) -> None:
        self._rec, self._lo, self._hi = rec, lo, hi
        self._health: tuple | None = None  # (result or exception, notes) of each read
        self._markers: tuple | None = None

    def __call__(self) -> None:
        if self._health is not None:
            return
        rec, lo, hi = self._rec, self._lo, self._hi

        def health() -> tuple:  # (without the lost samples: a lost GPU is rare, read again then)
            rows = rec.health_rows(hi)
            return rows, rec.health_samples(lo, hi, {}, rows)

        self._health, self._markers = self._noted(health), self._noted(rec.markers)

    def _noted(self, read: Callable[[], Any]) -> tuple:
        had = len(self._rec.damage)
        try:
            got = read()
        except Exception as e:  # raised where the report asks for it, after the scan, as before
            got = e
        notes = self._rec.damage[had:]
        del self._rec.damage[had:]
        return got, notes

    def _take(self, read: tuple | None) -> Any:
        assert read is not None
        got, notes = read
        for n in notes:
            self._rec.note(n)
        if isinstance(got, BaseException):
            raise got
        return got

    def result(self, spans: list) -> tuple:
        """(health samples, energy, busy means) of the scan's ``Aggregates.rows`` ``spans``."""
        self()
        rec, lo, hi = self._rec, self._lo, self._hi
        rows, health = self._take(self._health)
        got = rec.spans_read(spans, lo, hi, roofline.READS)
        if got.lost:
            health = rec.health_samples(lo, hi, got.lost, rows)
        return health, got.energy, got.busy

    def markers(self) -> list:
        self()
        return cast(list, self._take(self._markers))


def _build_report(rec: Recording, gpu: int | None, t_from: float | None, t_to: float | None) -> dict:
    lo, hi = rec.span(t_from, t_to)
    gpus_meta = rec.meta.get("gpus") or []
    known = {g["index"] for g in gpus_meta}
    if gpu is not None and gpu not in known:
        raise UserError(
            f"no GPU {gpu} in this recording (it has: {', '.join(map(str, sorted(known))) or 'none'})"
        )
    reads = _Reads(rec, lo, hi)
    labels_by_gpu, all_gaps, agg = report_scan(rec, lo, hi, bool(t_from), meanwhile=reads)
    last = agg.last
    if last is None:
        raise UserError("empty time range: no samples in it")
    stacks, throttle, peaks, links, procs, perf, caps = (
        agg.stacks,
        agg.throttle,
        agg.peaks,
        agg.links,
        agg.procs,
        agg.perf,
        agg.caps,
    )
    bin_s = Classifier().bin_s
    # the verdict's window is the report's: the whole run, or the range asked for
    of = (
        f"of the run ({clock(hi - lo)})"
        if t_from is None and t_to is None
        else f"of {clock(lo - rec.t0)}–{clock(hi - rec.t0)}"
    )
    spans = episodes(labels_by_gpu, jobs_of(procs), bin_s)  # none unless a job spans two GPUs

    out_gpus = []
    sites: dict[tuple[int, int], tuple] = {}
    health_by_gpu, energy_by_gpu, busy = reads.result(agg.rows)
    energies: dict[int, dict] = {}
    gpu_bins: dict[int, tuple] = {}  # each GPU's labelled bins (starts, labels), for energy per job
    shares = proc_shares(rec, lo, hi, {p.pid: p.name for p in procs.values()})
    # jobs sharing a GPU, each labelled apart (memtop.analysis.jobshare: a scan of Frames, only where two or more
    # processes had per-process figures on one GPU)
    shared = (
        report_jobs(rec.frames(lo, hi, skip=JOB_READ_SKIP), hi - lo, tuple(procs.values()), of)
        if any(len(ps) > 1 for ps in shares.values())
        else {}
    )
    for idx in sorted(labels_by_gpu):
        if gpu is not None and idx != gpu:
            continue
        labels = labels_by_gpu[idx]
        cols = label_columns(labels)
        counted = cols.label != "warmup"
        ct, cl = cols.t[counted], cols.label[counted]
        phase_s = label_counts(cl)
        total = sum(phase_s.values()) or 1
        gpu_pids = {p.pid for f_ in [last] for g in f_.gpus if g.index == idx for p in g.processes} | {
            p.pid for p in procs.values() if idx in p.gpus
        }
        by_label = _phase_stacks(stacks, gpu_pids, ct, cl, bin_s, sites)
        vd = verdict(labels, last, window_s=max(1.0, hi - lo), gpu=idx, procs=tuple(procs.values()), of=of)
        if idx in shared:  # the GPU's verdict names the job with the problem
            vd = shared_verdict(idx, vd, shared[idx].verdicts, shared[idx].jobs)
        hw = health.report_section(health_by_gpu.get(idx, []), rec.t0)
        en = energy.report_section(energy_by_gpu.get(idx), cols.t, cols.label, bin_s)
        if en is not None:
            energies[idx] = en
            gpu_bins[idx] = (cols.t, cols.label)
        vd = health.hardware_first(vd, health.health_events(health_by_gpu.get(idx, [])), last.gpu(idx))
        link = links.get(idx)
        pk = peaks[idx]
        meta_g: dict = next((g for g in gpus_meta if g["index"] == idx), {})
        out_gpus.append(
            {
                "index": idx,
                "name": meta_g.get("name"),
                "uuid": meta_g.get("uuid"),
                "mode": meta_g.get("mode"),
                "phases": {
                    k: {"seconds": round(v * bin_s, 1), "share": round(v / total, 3), "title": TITLES[k]}
                    for k, v in phase_s.most_common()
                },
                "timeline": _timeline(ct, cl, lo, hi, bin_s),
                "verdict": {
                    "label": vd.label,
                    "share": round(vd.share, 3),
                    "headline": vd.headline,
                    "evidence": vd.evidence,
                    "advice": list(vd.advice),
                    "command": vd.command,
                    "missing": vd.missing,
                },
                "phase_stacks": {
                    k: [
                        {"class": c, "where": w, "code": code, "samples": n}
                        for (c, w, code), n in cnt.most_common(3)
                    ]
                    for k, cnt in by_label.items()
                },
                "gaps": [
                    {
                        "at_s": round(g_.t0 - rec.t0, 1),
                        "duration_s": g_.duration_s,
                        "stack": None if g_.stack is None else g_.stack.as_dict(),
                    }
                    for g_ in all_gaps
                    if g_.gpu == idx
                ],
                "throttle": [
                    {"at_s": round(a - rec.t0, 1), "duration_s": round(b - a + 0.1, 1), "reasons": list(r)}
                    for a, b, r in throttle[idx]
                ],
                "straggler": [
                    {
                        "at_s": round(e.t0 - rec.t0, 1),
                        "duration_s": round(e.t1 - e.t0, 1),
                        "phase": e.phase,
                        "peers": list(e.peers),
                    }
                    for e in spans
                    if e.gpu == idx
                ],
                "pcie": None
                if link is None
                else {
                    "link": f"Gen{link.gen} x{link.width}",
                    "max": f"Gen{link.max_gen} x{link.max_width}",
                    "downtrained": link.downtrained,
                    "capacity_gbps": round(link.bytes_per_s / 1e9, 1),
                    "peak_rx_gbps": round(pk["rx"] / 1e9, 1),
                    "peak_tx_gbps": round(pk["tx"] / 1e9, 1),
                    "peak_pct_link": round(100 * max(pk["rx"], pk["tx"]) / link.bytes_per_s, 1),
                },
                **({"health": hw} if hw is not None else {}),
                **({"energy": en} if en is not None else {}),
                **(
                    {"roofline": rf}
                    if (rf := roofline.report_section(meta_g.get("name"), busy.get(idx)))
                    else {}
                ),
            }
        )
        if idx in shares:  # (recordings from before per-process figures were stored have none)
            out_gpus[-1]["processes"] = shares[idx]
        if idx in shared:
            out_gpus[-1]["jobs"] = shared[idx].rows
    numa = [
        {
            "pid": p.pid,
            "name": p.name,
            "placement": p.placement,
            "cpus_allowed": p.cpus_allowed,
            "mems_allowed": p.mems_allowed,
        }
        for p in procs.values()
        if p.worker_of is None
    ]
    perf_summary = {}
    for pid, ps in perf.items():
        rates = list(map(itemgetter(1), ps))
        perf_summary[str(pid)] = {  # (each sum the samples' values added in order, by map: no step each)
            k: round(sum(map(dict.get, rates, repeat(k), repeat(0.0))) / len(ps), 3)
            for k in sorted(set().union(*rates))
        }
    read = {
        f"pid {pid}" for pid in set(stacks.pid.tolist())
    }  # the capabilities' names of stacks that were read
    started = rec.meta.get("started_wall")
    rep = {
        "schema": SCHEMA,
        "recording": {
            "path": str(rec.path),
            "host": rec.meta.get("host"),
            "driver": rec.meta.get("driver"),
            "memtop_version": rec.meta.get("memtop_version"),
            "duration_s": round(rec.duration, 1),
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else None,
            "command": rec.meta.get("command"),
            "gpus": [{"index": g["index"], "name": g.get("name"), "mode": g.get("mode")} for g in gpus_meta],
        },
        "range_s": [round(lo - rec.t0, 1), round(hi - rec.t0, 1)],
        "unavailable": [
            {"source": c.source, "name": c.name, "state": c.state.value, "detail": c.detail, "fix": c.fix}
            if c.source != "stacks" or c.name not in read
            # its stacks are cited below: py-spy's error of one failed read is not the story
            else {**dict(source=c.source, name=c.name, state=c.state.value, fix=c.fix), "detail": SOME_READS}
            for c in caps.values()
            if not c.ok
        ],
        "gpus": out_gpus,
        "numa": numa,
        "perf": perf_summary,
        "markers": [
            {
                "at_s": round(m.t0 - rec.t0, 1),
                "duration_s": round(m.t1 - m.t0, 1),
                "label": m.label,
                "name": m.name,
            }
            for m in reads.markers()
            if m.t1 >= lo and m.t0 <= hi
        ],
    }
    captures = _captures(rec)
    if captures:  # (only where some were taken: a report of any other recording is as it was)
        rep["captures"] = captures
    if energies:
        rep["energy_jobs"], unattributed = energy.job_sections(
            energies, jobs_on_gpus(procs), shares, _own_energy(shared, energy_by_gpu, gpu_bins, procs, bin_s)
        )
        if unattributed:
            rep["energy_not_per_job"] = unattributed
    # what was skipped as damaged: the file's own checks (at open, markers) and the scan's
    damage = [*rec.damage, *(n for n in agg.damage if n not in rec.damage)]
    if damage:
        rep["damage"] = damage
    return rep


def _own_energy(
    shared: dict[int, SharedReport],
    series: dict,
    gpu_bins: dict[int, tuple],
    procs: dict[int, ProcSample],
    bin_s: float,
) -> dict[int, dict[str, tuple[list[int], dict[str, float]]]]:
    """Each shared GPU's energy per job by that job's own labels and SM shares (memtop.analysis.energy.job_split),
    keyed as memtop.analysis.jobs.jobs_on_gpus keys a job, so a job's other GPUs add to the same entry."""
    out = {}
    for gpu, sr in shared.items():
        if gpu not in series or gpu not in gpu_bins or not sr.shares:
            continue
        spans = {}
        for k, labs in sr.labels.items():
            cols = label_columns(labs)
            spans[k] = (sr.shares.get(k, []), cols.t, cols.label)
        by = energy.job_split(series[gpu], bin_s, spans, gpu_bins[gpu])
        out[gpu] = {entry_key(sr.jobs[k], procs): (list(sr.jobs[k].pids), b) for k, b in by.items()}
    return out


def _captures(rec: Recording) -> list[dict]:
    """The traces the live view captured while recording (metadata ``captures``, memtop.agent.tracer),
    type-checked: a damaged entry is left out."""
    out = []
    raw = rec.meta.get("captures")
    for c in raw if isinstance(raw, list) else []:
        if not isinstance(c, dict):
            continue
        t, pids = c.get("t"), c.get("pids")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not isinstance(pids, list):
            continue
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
            continue
        out.append(
            {
                "at_s": round(t - rec.t0, 1),
                "pids": pids,
                "trigger": str(c.get("trigger", "")),
                "outcome": "ok" if c.get("outcome") == "ok" else "failed",
                "file": c["file"] if isinstance(c.get("file"), str) else None,
                "detail": str(c.get("detail", "")),
            }
        )
    return out


def _timeline(t: np.ndarray, labels: np.ndarray, lo: float, hi: float, bin_s: float, width: int = 60) -> str:
    """One character per cell: the cell's most common phase (of the labels at times ``t``)."""
    if not len(t):
        return ""
    step = max(bin_s, (hi - lo) / width)
    n = min(width, math.ceil((hi - lo) / step - 1e-9))
    cell = np.floor((t - lo) / step)
    # (the bins in time order: each cell's are a slice, found by a search, not a mask per cell)
    edges = np.searchsorted(cell, np.arange(n + 1), "left").tolist()
    out = []
    for k in range(n):
        c = label_counts(labels[edges[k] : edges[k + 1]])
        out.append(CHARS.get(c.most_common(1)[0][0], "?") if c else " ")
    return "".join(out)


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\ud[89a-f]")  # as json's ASCII output writes one (or a pair)


def strict_json(v: object) -> object:
    """The report as strict JSON values: NaN/Infinity -> null, undecodable text -> U+FFFD."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        return _SURROGATE.sub("\ufffd", v)
    if isinstance(v, dict):
        return {strict_json(k): strict_json(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [strict_json(x) for x in v]
    return v


def _for_terminal(v: object) -> object:
    """Every string of the report made inert (sanitize.clean: one line, controls shown) and bounded."""
    if isinstance(v, str):
        return clean(v, 1000)
    if isinstance(v, dict):
        return {_for_terminal(k): _for_terminal(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_for_terminal(x) for x in v]
    return v


class _NotPlain(Exception):
    """A value ``_indented`` leaves to json (NaN, infinity, a subclass of a JSON type, another type)."""


_CONST = {True: "true", False: "false", None: "null"}


def _key(k: object) -> str:
    """A dict key as json writes it (str, then float, int, bool, None; in json's order)."""
    if type(k) is str:
        return encode_basestring_ascii(k)
    if type(k) is float and math.isfinite(k):
        return f'"{float.__repr__(k)}"'
    if type(k) is int:
        return f'"{int.__repr__(k)}"'
    if k is True or k is False or k is None:
        return f'"{_CONST[k]}"'
    raise _NotPlain


def _indented(v: object, nl: str = "\n") -> str:
    """``json.dumps(v, indent=2, allow_nan=False)``, the same text: with an indent json encodes in
    Python, a generator step per token (a tenth of a second of an 8-hour report's serial end); this
    joins each container's items at once, its scalars encoded by json's own C functions."""
    if type(v) is str:
        return encode_basestring_ascii(v)
    if type(v) is float:
        if not math.isfinite(v):
            raise _NotPlain
        return float.__repr__(v)
    if type(v) is int:
        return int.__repr__(v)
    if type(v) is dict:
        if not v:
            return "{}"
        inner = nl + "  "
        items = [_key(k) + ": " + _indented(x, inner) for k, x in v.items()]
        return "{" + inner + ("," + inner).join(items) + nl + "}"
    if type(v) is list or type(v) is tuple:
        if not v:
            return "[]"
        inner = nl + "  "
        return "[" + inner + ("," + inner).join([_indented(x, inner) for x in v]) + nl + "]"
    if v is None or v is True or v is False:
        return _CONST[v]
    raise _NotPlain


def render(rep: dict, fmt: str) -> str:
    if fmt == "json":
        with contextlib.suppress(_NotPlain):  # (a NaN, a lone surrogate: json's path below)
            text = _indented(rep)
            if not _ESCAPED_SURROGATE.search(text):
                return text
        try:  # the C encoder checks a report for NaN and lone surrogates at a tenth of strict_json's cost
            clean_ = not _ESCAPED_SURROGATE.search(json.dumps(rep, allow_nan=False))
        except ValueError:
            clean_ = False
        return json.dumps(rep if clean_ else strict_json(rep), indent=2, allow_nan=False)
    # text and markdown reach terminals: no string from the data stays raw (a dict stays a dict)
    rep = cast(dict, _for_terminal(rep))
    md = fmt == "markdown"
    h1, h2 = ("# ", "## ") if md else ("", "")
    r = rep["recording"]
    lines = [f"{h1}memtop report: {r['path']}", ""]
    lines.append(
        f"{'- ' if md else ''}host {r['host']}, driver {r['driver']}, recorded {r['started']}, "
        f"{clock(r['duration_s'])} (range {clock(rep['range_s'][0])}–{clock(rep['range_s'][1])}), "
        f"memtop {r['memtop_version']}"
    )
    lines.append(
        f"{'- ' if md else ''}GPUs: "
        + ", ".join(
            f"{g['index']}: {g['name']} ({'GPM' if g['mode'] == 'gpm' else 'NVML-only'})" for g in r["gpus"]
        )
    )
    if rep["unavailable"]:
        lines.append(
            f"{'- ' if md else ''}unavailable: "
            + "; ".join(f"{u['source']} {u['name']}: {u['detail']}" for u in rep["unavailable"])
        )
    if rep.get("damage"):
        lines.append(f"{'- ' if md else ''}damaged parts skipped: " + "; ".join(rep["damage"]))
    for g in rep["gpus"]:
        v = g["verdict"]
        lines += ["", f"{h2}{v['headline']}", ""]  # (it names its GPU: "GPU 0 — GPU 0 busy" said it twice)
        lines.append(f"{'**Evidence:** ' if md else 'evidence: '}{v['evidence']}")
        if v.get("missing"):
            lines.append(f"{'**Missing evidence:** ' if md else 'missing evidence: '}{v['missing']}")
        for a in v["advice"]:
            lines.append(f"{'- ' if md else '  -> '}{a}")
        if v["command"]:
            lines.append(f"{'`' if md else '  $ '}{v['command']}{'`' if md else ''}")
        lines += ["", "phases (share of time):" if not md else "| phase | time | share |"]
        if md:
            lines.append("|---|---:|---:|")
        for p in g["phases"].values():
            lines.append(
                f"| {p['title']} | {length(p['seconds'], 1)} | {100 * p['share']:.0f} % |"
                if md
                else f"  {p['title']:<28} {length(p['seconds'], 1):>9}  {100 * p['share']:5.1f} %"
            )
        lines += [
            "",
            f"timeline: {'`' if md else '['}{g['timeline']}{'`' if md else ']'}  "
            "(C compute, M memory, T transfer, S sync, I input, P cpu, N comm, . idle)",
        ]
        if g["phase_stacks"]:
            lines += ["", "stacks behind each phase (main thread, samples):"]
            for k, sts in g["phase_stacks"].items():
                for s in sts[:2]:
                    lines.append(
                        f"{'- ' if md else '  '}{TITLES.get(k, k)}: {s['class']} at {s['where']} "
                        f"{'`' + s['code'] + '`' if s['code'] else ''} ({s['samples']})"
                    )
        if g["gaps"]:
            n = len(g["gaps"])
            longest = sorted(
                sorted(g["gaps"], key=lambda gp: -gp["duration_s"])[:GAPS_SHOWN], key=lambda gp: gp["at_s"]
            )
            lines += [
                "",
                f"GPU gaps (idle >= 0.5 s while the process lives): {n}"
                + (f"; the longest {len(longest)} of {n}:" if len(longest) < n else ""),
            ]
            for gp in longest:
                st = gp["stack"] or {}
                lines.append(
                    f"{'- ' if md else '  '}at {clock(gp['at_s'])} for {length(gp['duration_s'], 1)}: "
                    f"{st.get('class', '?')} at {st.get('where', '?')}"
                )
        if g.get("straggler"):
            st = g["straggler"]
            lines += [
                "",
                f"straggler (its job's other GPUs waited for it in collectives): "
                f"{counted(len(st), 'episode')}, "
                f"{length(sum(e['duration_s'] for e in st), 1)} in all",
            ]
            for e in st[:5]:
                peers = ", ".join(map(str, e["peers"]))
                lines.append(
                    f"{'- ' if md else '  '}at {clock(e['at_s'])} for {length(e['duration_s'], 1)}: "
                    f"{TITLES.get(e['phase'], e['phase'])}"
                    f" while GPU{'s' if len(e['peers']) > 1 else ''} {peers} waited"
                )
        if g.get("processes"):
            lines.append(
                "GPU time by process: "
                + "; ".join(
                    f"{p['pid']} {p['name'] or '?'} SM {p['sm_pct']:.0f} % ({100 * p['sm_share']:.0f} % of it), "
                    f"memory {p['mem_pct']:.0f} %"
                    for p in g["processes"][:5]
                )
            )
        for j in g.get("jobs", ()):
            lines.append(
                f"{j['title']}: "
                + ", ".join(
                    f"{TITLES.get(k, k)} {100 * p['share']:.0f} %" for k, p in list(j["phases"].items())[:4]
                )
                + f"; {j['verdict']}"
            )
        if g["throttle"]:
            lines.append(
                f"throttling: {counted(len(g['throttle']), 'episode')}, e.g. "
                + ", ".join(
                    f"at {clock(t['at_s'])} {'/'.join(t['reasons'])} {t['duration_s']} s"
                    for t in g["throttle"][:3]
                )
            )
        if g["pcie"]:
            p = g["pcie"]
            lines.append(
                f"PCIe: {p['link']} (max {p['max']}){' DOWN-TRAINED' if p['downtrained'] else ''}, "
                f"{p['capacity_gbps']} GB/s; peak RX {p['peak_rx_gbps']} / TX {p['peak_tx_gbps']} GB/s "
                f"({p['peak_pct_link']} % of link)"
            )
        if g.get("health"):
            lines += health.report_lines(g["health"], md)
        if g.get("energy"):
            lines += energy.report_lines(g["energy"], md)
        if g.get("roofline"):
            lines += roofline.report_lines(g["roofline"], md)
    if rep.get("energy_jobs") or rep.get("energy_not_per_job"):
        lines += ["", *energy.job_lines(rep.get("energy_jobs", []), rep.get("energy_not_per_job", []), md)]
    if rep["numa"]:
        lines += ["", "NUMA placement: " + ", ".join(f"{n['pid']} {n['placement']}" for n in rep["numa"])]
    if rep["perf"]:
        for pid, rates in rep["perf"].items():
            lines.append(f"perf {pid}: " + ", ".join(_perf(k, v) for k, v in rates.items()))
    if rep.get("captures"):
        lines += ["", f"{h2}traces captured (memtop run's agent):"]
        for c in rep["captures"]:
            who = ", ".join(map(str, c["pids"]))
            what = c["file"] if c["outcome"] == "ok" else f"failed: {c['detail']}"
            lines.append(f"{'- ' if md else '  '}at {clock(c['at_s'])} ({c['trigger']}) pid {who}: {what}")
    return "\n".join(lines)
