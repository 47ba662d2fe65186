"""One node's pipeline for the outputs that are not the TUI: `memtop snapshot` (JSON) and `memtop
serve` (Prometheus). A Sampler (or a recording replayed) feeds one Pipeline; every output reads its
newest View, so nothing here polls NVML on its own. The snapshot schema is docs/snapshot.schema.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from memtop import __version__
from memtop.analysis import energy, health
from memtop.analysis.jobs import jobs_on_gpus
from memtop.analysis.jobshare import Job, entry_key
from memtop.analysis.phases import CHARS, LABELS, TITLES
from memtop.core.errors import UserError
from memtop.core.metrics import METRICS
from memtop.core.model import CLOCK_EVENT_NAMES, Frame, ProcSample
from memtop.live.pipeline import Pipeline, ReplaySource, Status, View

SCHEMA_VERSION = 1
NO_GPU_EXIT = 4  # `memtop snapshot` on a node with no GPU to report (README, "Exit codes")
BIN_S = 0.5  # the classifier's bin
BAND_STEP_S = 2.0  # one character of the phase band per this many seconds...
BAND_STEPS = 120  # ...over the last four minutes
PHASES = (*LABELS, "warmup")
GAUGES = tuple(m for m in METRICS if m.prom is not None)


MAX_GPU_PROCS = 4096  # processes seen on GPUs kept for energy per job (a long serve sees many come and go)


class CountingPipeline(Pipeline):
    """A Pipeline that also keeps running totals for counters: seconds in each clock-event reason
    (from every frame, replayed or live) and seconds in each phase (from the labels, when read)."""

    def reset(self) -> None:
        super().reset()
        if not hasattr(self, "clock_seconds"):  # counters survive a replay's loop, as counters must
            # seconds are floats, which typeshed's Counter does not admit
            self.clock_seconds: dict[int, defaultdict[str, float]] = {}
            self.phase_seconds: dict[int, defaultdict[str, float]] = {}
            # joules (memtop.analysis.energy.split)
            self.phase_energy: dict[int, defaultdict[str, float]] = {}
            self.health_counts: Counter[tuple[int, str, str]] = Counter()  # (gpu, kind, Xid or "")
            # for energy per job: each process's SM %-seconds per GPU and the processes seen on GPUs
            self.sm_seconds: dict[int, defaultdict[int, float]] = {}
            self.gpu_procs: dict[int, ProcSample] = {}
            self._seen: dict[int, float] = {}
            # a shared GPU's energy per job by the jobs' own labels (memtop.analysis.energy.job_split):
            # GPU -> job key -> joules by label, and each job as last seen
            self.job_phase_energy: dict[int, dict[str, defaultdict[str, float]]] = {}
            self.energy_jobs: dict[str, Job] = {}
        self.jobshare.shares = {}  # (each job's SM share at each instant, dropped once split)
        self._last_t: dict[int, float] = {}
        # (t, counter J, power W) of the samples not yet split; the first: the read the next rise starts at
        self._energy: dict[int, list[tuple[float, float, float | None]]] = {}
        self._n_health = 0

    def on_frame(self, frame: Frame, tick: bool = True) -> None:
        super().on_frame(frame, tick)
        with self._lock:
            fresh = self.n_health - self._n_health
            self._n_health = self.n_health
            for e in list(self.health)[len(self.health) - min(fresh, len(self.health)) :]:
                self.health_counts[e.gpu, e.kind, str(e.xid or "")] += 1
            for g in frame.gpus:
                if g.energy_j is not None:
                    pending = self._energy.setdefault(g.index, [])
                    if not pending or g.t > pending[-1][0]:
                        pending.append((g.t, g.energy_j, g.power_w))
            for p in frame.host.procs if frame.host is not None else ():
                if p.gpus:
                    self.gpu_procs.pop(p.pid, None)  # (re-inserted: the oldest seen go first)
                    self.gpu_procs[p.pid] = p
                    if len(self.gpu_procs) > MAX_GPU_PROCS:
                        del self.gpu_procs[next(iter(self.gpu_procs))]
            for g in frame.gpus:
                prev = self._last_t.get(g.index)
                self._last_t[g.index] = g.t
                if prev is None or not 0 < g.t - prev < 5.0:
                    continue
                sm = self.sm_seconds.setdefault(g.index, defaultdict(float))
                for u in g.proc_util:
                    sm[u.pid] += (u.sm or 0.0) * (g.t - prev)
                if not g.clock_events:
                    continue
                c = self.clock_seconds.setdefault(g.index, defaultdict(float))
                for bit, name in CLOCK_EVENT_NAMES.items():
                    if g.clock_events & bit:
                        c[name] += g.t - prev

    def job_energy(self, per_gpu: dict[int, dict]) -> tuple[list[dict], list[dict]]:
        """Energy per job since memtop started (memtop.analysis.energy.job_sections, as `report` splits it): a
        shared GPU's by each process's part of its SM time since then."""
        with self._lock:
            shares = {
                gpu: [{"pid": pid, "sm_share": v / total} for pid, v in sm.items()]
                for gpu, sm in self.sm_seconds.items()
                if (total := sum(sm.values())) > 0
            }
            own = {
                gpu: {
                    entry_key(job, self.gpu_procs): (list(job.pids), dict(by))
                    for k, by in by_job.items()
                    if (job := self.energy_jobs.get(k)) is not None
                }
                for gpu, by_job in self.job_phase_energy.items()
            }
            return energy.job_sections(per_gpu, jobs_on_gpus(self.gpu_procs), shares, own)

    def count_phases(self, view: View) -> dict[int, defaultdict[str, float]]:
        """Adds the labels closed since the last call (a replay restarting from its beginning starts
        counting again from there) and returns the totals."""
        with self._lock:
            for gpu, labels in view.labels.items():
                seen = self._seen.get(gpu, -1.0)
                if labels and labels[-1].t < seen:  # the pipeline was reset (replay loop or seek)
                    seen = -1.0
                c = self.phase_seconds.setdefault(gpu, defaultdict(float))
                new = [lab for lab in labels if lab.t > seen]
                for lab in new:
                    c[lab.label] += BIN_S
                if new:
                    self._split_energy(gpu, new)
                if labels:
                    self._seen[gpu] = max(seen, labels[-1].t)
            return {g: defaultdict(float, c) for g, c in self.phase_seconds.items()}

    def _split_energy(self, gpu: int, new: list) -> None:
        """Adds the energy of the samples up to the newest counter read in the bins just labelled (the
        rest wait for their labels and the next read: live, no power x time stands in for a read)."""
        pending = self._energy.get(gpu, [])
        end = new[-1].t + BIN_S
        k = next((i for i, s in enumerate(pending) if s[0] >= end), len(pending))
        r = energy.reads([s[1] for s in pending[:k]])
        if len(r) < 2:
            return
        k = int(r[-1]) + 1  # up to the newest read
        t, e_, p = zip(*pending[:k], strict=True)
        got = energy.split(t, e_, p, [lab.t for lab in new], [lab.label for lab in new], BIN_S, tail=False)
        c = self.phase_energy.setdefault(gpu, defaultdict(float))
        for label, joules in got.items():
            c[label] += joules
        self._energy[gpu] = pending[k - 1 :]  # that read is the next rise's base
        self._split_job_energy(gpu, new, (t, e_, p))

    def _split_job_energy(self, gpu: int, new: list, series: tuple) -> None:
        """The same samples' energy per job where jobs share the GPU, as `report` splits it: by each
        instant's SM shares, to each job's own labels (the GPU's where a job's has not come yet)."""
        shares = (self.jobshare.shares or {}).get(gpu)
        by_job = self.jobshare.labels.get(gpu)
        if not shares or not by_job:
            return
        spans = {
            k: (shares.get(k, []), [lab.t for lab in ls], [lab.label for lab in ls])
            for k, ls in by_job.items()
        }
        gpu_bins = ([lab.t for lab in new], [lab.label for lab in new])
        for key, got in energy.job_split(series, BIN_S, spans, gpu_bins, tail=False).items():
            c = self.job_phase_energy.setdefault(gpu, {}).setdefault(key, defaultdict(float))
            for label, joules in got.items():
                c[label] += joules
            if (job := self.jobshare.jobs.get(key)) is not None:
                self.energy_jobs.pop(key, None)  # (re-inserted: the longest gone go first)
                self.energy_jobs[key] = job
        while len(self.energy_jobs) > MAX_GPU_PROCS:
            gone = next(iter(self.energy_jobs))
            del self.energy_jobs[gone]
            for jobs_there in self.job_phase_energy.values():
                jobs_there.pop(gone, None)
        self.jobshare.drop_shares(gpu, series[0][-1])


class Node:
    """The node's one pipeline, live or replayed, and what every output reads from it."""

    def __init__(self, args: argparse.Namespace, warmup_s: float = 5.0) -> None:
        from memtop.collectors.jobid import JobIds

        self.jobs = JobIds()
        self.ready = threading.Event()
        self.failed: UserError | None = None  # what ended a replay (check)
        self.source = None
        self.sampler = None
        self.warmup_s = warmup_s
        self._started = 0.0
        self.node_id = platform.node()  # serve makes it host:port, which tells apart nodes on one host
        replay = getattr(args, "replay", None)
        if args.demo or replay:
            from memtop.commands.local import demo_path, open_recording

            path = Path(replay) if replay and not args.demo else demo_path()
            rec = open_recording(path)  # (a missing file, a directory or a FIFO: one line)
            mode = "demo" if args.demo else "replay"
            self.pipeline = CountingPipeline(Status(mode, duration=rec.duration, source=str(path)), rec.meta)
            self.pipeline.on_tick = self.ready.set  # after the prefill
            self.pipeline.paint_interval = 3600.0  # ticks are only wanted for that
            self.source = ReplaySource(
                rec, self.pipeline, loop=True, start_at=min(60.0, rec.duration / 2), on_error=self._failed
            )
            self.hostname = str(rec.meta.get("host") or platform.node())
        else:
            from memtop.live.sampler import Sampler, SamplerConfig

            self.pipeline = CountingPipeline(Status("live"), {"host": platform.node()})
            self.sampler = Sampler(
                SamplerConfig.from_args(args, recording=False), on_frame=self.pipeline.on_frame
            )
            self.hostname = platform.node()

    def start(self) -> None:
        self._started = time.monotonic()
        if self.source is not None:
            self.source.start()
        elif self.sampler is not None:
            self.sampler.start()
            self.pipeline.meta = {**self.pipeline.meta, **self.sampler.run_meta()}

    def stop(self) -> None:
        if self.source is not None:
            self.source.stop()
        if self.sampler is not None:
            self.sampler.stop()

    def _failed(self, e: UserError) -> None:
        self.failed = e
        self.ready.set()  # (nothing more comes: a wait ends)

    def check(self) -> None:
        """Raise what ended the replay (a recording damaged past what it can skip), if anything."""
        if self.failed is not None:
            raise self.failed

    def wait_ready(self, timeout: float) -> bool:
        """Replays are ready once the timeline is prefilled; a live node after its warm-up."""
        if self.source is not None:
            return self.ready.wait(timeout)
        time.sleep(max(0.0, min(timeout, self._started + self.warmup_s - time.monotonic())))
        return self.pipeline.frame is not None

    def is_ready(self) -> bool:
        if self.source is not None:
            return self.ready.is_set()
        return self.pipeline.frame is not None

    def view(self) -> View:
        return self.pipeline.view()

    def no_gpu(self) -> str | None:
        """Why this node reports no GPU (once it has data), else None: a live node without a GPU
        reader (no driver, or the driver lists none), or a recording whose newest frame has none."""
        if self.sampler is not None:
            return no_gpu_reason(self.sampler.nvml) if self.pipeline.frame is not None else None
        frame = self.pipeline.frame
        return "the recording holds no GPU" if frame is not None and not frame.gpus else None

    def gpu_jobs(self, frame: Frame | None) -> tuple[dict[int, dict[str, str]], list[dict]]:
        """Job identity per GPU (its first main process's) and the processes using GPUs."""
        per_gpu: dict[int, dict[str, str]] = {}
        procs: list[dict] = []
        if frame is None or frame.host is None:
            return per_gpu, procs
        for p in frame.host.procs:
            if not p.gpus:
                continue
            # a recording's PIDs are another machine's: only a live node reads job identity (the
            # cgroup's part is recorded: a replay has that)
            job = self.jobs.get(p.pid, p.started) if self.sampler is not None else frame.job_of(p.pid)
            for g in p.gpus:
                per_gpu.setdefault(g, job)
            procs.append(
                {
                    "pid": p.pid,
                    "name": p.name,
                    "gpus": list(p.gpus),
                    "cpu_pct": round(p.cpu_pct, 1),
                    "job": job,
                    "gpu_util": gpu_util(frame, p.pid),
                }
            )
        return per_gpu, procs


def gpu_util(frame: Frame, pid: int) -> list[dict]:
    """The process's share of each GPU it used this second (the driver's per-process figures)."""
    return [
        {"gpu": g.index, "sm": u.sm, "mem": u.mem, "enc": u.enc, "dec": u.dec}
        for g in frame.gpus
        if (u := g.util_of(pid)) is not None
    ]


def no_gpu_reason(nvml) -> str | None:
    """Why a started NVML collector has no GPU to read (its capabilities say), else None."""
    if nvml.readers:
        return None
    why = [c.detail for c in nvml.capabilities() if not c.ok and c.detail]
    return "; ".join(why) or "the NVIDIA driver lists no GPU"


def band(labels, end: float) -> str:
    """The phase band: one character (phases.CHARS) per BAND_STEP_S over the last minutes, oldest
    first; the step's most common label, or a space where there is none."""
    steps: list[Counter[str]] = [Counter() for _ in range(BAND_STEPS)]
    start = end - BAND_STEPS * BAND_STEP_S
    for lab in reversed(labels):
        if lab.t < start:
            break
        i = int((lab.t - start) / BAND_STEP_S)
        if 0 <= i < BAND_STEPS:
            steps[i][lab.label] += 1
    return "".join(CHARS.get(c.most_common(1)[0][0], "?") if c else " " for c in steps).rstrip()


def snapshot(node: Node) -> dict:
    """What the TUI knows now, as plain data (the schema in docs/snapshot.schema.json)."""
    view = node.view()
    node.pipeline.count_phases(view)  # (the energy by phase follows the labels counted)
    frame = view.frame
    jobs, procs = node.gpu_jobs(frame)
    gpus = []
    for g in frame.gpus if frame is not None else ():
        labels = view.labels.get(g.index, ())
        v = view.verdicts.get(g.index)
        gpus.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "mode": g.mode,
                "gauges": {m.name: getattr(g, m.name) for m in GAUGES if getattr(g, m.name) is not None},
                "throttle": list(g.throttle_reasons),
                "phase": labels[-1].label if labels else "gathering",
                "shares": {k: round(s, 4) for k, s in (v.shares if v else {}).items()},
                "band": band(labels, labels[-1].t + BIN_S) if labels else "",
                "verdict": None
                if v is None
                else {
                    "label": v.label,
                    "title": TITLES.get(v.label, v.label),
                    "share": round(v.share, 4),
                    "window_s": round(v.window_s, 1),
                    "headline": v.headline,
                    "evidence": v.evidence,
                    "advice": list(v.advice),
                    "command": v.command,
                    "straggler": v.straggler,
                    "missing": v.missing,
                },
                "job": jobs.get(g.index, {}),
                **_shared_jobs(view, g),
                **_hardware(node.pipeline, view, g),
            }
        )
    st = view.status
    out: dict = {
        "schema_version": SCHEMA_VERSION,
        "memtop_version": __version__,
        "hostname": node.hostname,
        "time": round(time.time(), 3),
        "mode": st.mode,
        "position_s": round(st.position, 1) if st.mode != "live" else None,
        "band_step_s": BAND_STEP_S,
        "gpus": gpus,
        "processes": procs,
        "notes": list(frame.notes) if frame is not None else [],
        "no_gpu": node.no_gpu(),
    }
    per_gpu = {g["index"]: g["energy"] for g in gpus if "energy" in g}
    # energy since memtop started, per job: the report's split (memtop.analysis.energy.job_sections)
    if per_gpu:
        by_job, unattributed = node.pipeline.job_energy(per_gpu)
        out["energy_jobs"] = by_job
        if unattributed:
            out["energy_not_per_job"] = unattributed
    return out


def _shared_jobs(view: View, g) -> dict:
    """The jobs sharing a GPU, each with its own phase, shares and verdict (memtop.analysis.jobshare); nothing
    where one job (or none) holds it."""
    per_job = view.job_verdicts.get(g.index, {})
    out = []
    for key, labels in view.job_labels.get(g.index, {}).items():
        job, v = view.jobs[key], per_job.get(key)
        sm = [u.sm for u in g.proc_util if u.pid in job.pids and u.sm is not None]
        out.append(
            {
                "title": job.title,
                "pid": job.pid,
                "pids": list(job.pids),
                "name": job.name,
                "identity": job.identity,
                "sm_pct": round(sum(sm), 1) if sm else None,
                "phase": labels[-1].label if labels else "gathering",
                "shares": {k: round(s, 4) for k, s in (v.shares if v else {}).items()},
                "headline": v.about or v.headline if v else "",
                "command": v.command if v else "",
            }
        )
    return {"shared_jobs": out} if out else {}


def _hardware(pipeline: CountingPipeline, view: View, g) -> dict:
    """A GPU's health (counters now, its newest events) and energy by phase since memtop started, where
    the GPU gives them."""
    out: dict = {}
    events = [e for e in view.health if e.gpu == g.index]
    if g.health is not None or events:
        ago = view.frame.t if view.frame is not None else 0.0
        out["health"] = {
            "counters": health.summary(g.health),
            "events": [e.as_dict(ago) for e in events[-10:]],
        }
    if g.mig_instances:
        out["mig"] = [asdict(m) for m in g.mig_instances]  # (its fields are the schema's, in order)
    joules = pipeline.phase_energy.get(g.index)
    if joules:
        out["energy"] = {"source": energy.SOURCE, "by_phase": energy.shares(joules)}
    return out


def parse_fail_on(text: str) -> tuple[str, float]:
    phase, sep, share = text.partition(":")
    try:
        value = float(share)
    except ValueError:
        value = -1.0
    if not sep or phase not in LABELS or not 0 <= value <= 1:
        raise UserError(f"--fail-on wants PHASE:SHARE with a phase in {', '.join(LABELS)} and 0..1: {text!r}")
    return phase, value


def exceeded(snap: dict, phase: str, limit: float) -> list[str]:
    return [
        f"GPU {g['index']} {phase} {g['shares'].get(phase, 0):.2f} > {limit}"
        for g in snap["gpus"]
        if g["shares"].get(phase, 0) > limit
    ]


def _text(snap: dict) -> str:
    lines = [f"{snap['hostname']} ({snap['mode']}), memtop {snap['memtop_version']}"]
    for g in snap["gpus"]:
        v = g["verdict"] or {}
        lines.append(f"GPU {g['index']} {g['phase']:<9} {v.get('headline', '')}")
        if v.get("evidence"):
            lines.append(f"    {v['evidence']}")
    return "\n".join(lines)


def run_snapshot(args: argparse.Namespace) -> int:
    """`memtop snapshot`: one snapshot, or with --interval a stream of them (JSON lines)."""
    from memtop.core.sanitize import clean, clean_multiline

    fail = parse_fail_on(args.fail_on) if args.fail_on else None
    count = args.count if args.count is not None else (0 if args.snap_interval else 1)
    interval = args.snap_interval or 5.0
    node = Node(args, warmup_s=interval)
    node.start()
    worst = 0
    try:
        if not node.wait_ready(60.0):
            raise UserError("no data yet: the sampler produced no frame")
        n = 0
        while True:
            node.check()
            snap = snapshot(node)
            if args.json:
                print(json.dumps(snap, separators=(",", ":")), flush=True)
            else:  # the recording's strings are untrusted
                print(clean_multiline(_text(snap)), flush=True)
            if snap["no_gpu"] and worst != NO_GPU_EXIT:  # said once, however long the stream
                print(f"memtop: no GPU: {clean(snap['no_gpu'], 300)}", file=sys.stderr, flush=True)
                worst = NO_GPU_EXIT
            if fail is not None and (over := exceeded(snap, *fail)):
                print("memtop: --fail-on exceeded: " + "; ".join(over), file=sys.stderr)
                worst = max(worst, 3)
            n += 1
            if count and n >= count:
                return worst
            time.sleep(interval)
    except BrokenPipeError:  # the reader went away (ssh closed): not an error
        return worst
    finally:
        node.stop()
