"""`memtop export --perfetto`: Chrome/Perfetto trace-event JSON of a recording.

Timestamps (``ts``, µs) are CLOCK_MONOTONIC, the clock memtop stamps Frames with; the trace's
metadata carries the wall-clock offset (docs/EXPORT.md says how to line it up with nsys).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from memtop.errors import UserError
from memtop.phases import TITLES, Classifier
from memtop.stackclass import site
from memtop.store import Recording

GPU_PID_BASE = 1_000_000  # GPU tracks get synthetic pids that cannot clash with real ones
HOST_PID = 999_999
COUNTERS = (
    ("SM %", "sm"),
    ("tensor %", "tensor"),
    ("DRAM %", "dram"),
    ("graphics %", "graphics"),
    ("util %", "util"),
    ("power W", "power_w"),
    ("SM clock MHz", "sm_clock"),
)


def _us(t: float) -> float:
    return round(t * 1e6, 1)


def events(rec: Recording, progress: bool = False) -> list[dict]:
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}}
    ]
    for g in rec.meta.get("gpus") or []:
        pid = GPU_PID_BASE + g["index"]
        ev.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": f"GPU {g['index']} {g['name']}"},
            }
        )
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "phases"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "markers"}})
    clf = Classifier()
    seen_host = seen_stack = None
    named: set[int] = set()
    last_gpu_t: dict[int, float] = {}
    n = rec.n_frames
    for k, f in enumerate(rec.frames()):
        if progress and k % 500 == 0:
            print(f"\rexporting {100 * k / n:3.0f} %", end="", file=sys.stderr, flush=True)
        clf.feed(f)
        for g in f.gpus:
            if last_gpu_t.get(g.index) == g.t:
                continue
            last_gpu_t[g.index] = g.t
            pid = GPU_PID_BASE + g.index
            for name, attr in COUNTERS:
                v = getattr(g, attr)
                if v is not None:
                    ev.append(
                        {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": _us(g.t), "args": {"value": v}}
                    )
            if g.pcie_rx is not None or g.pcie_tx is not None:
                ev.append(
                    {
                        "ph": "C",
                        "name": "PCIe GB/s",
                        "pid": pid,
                        "tid": 0,
                        "ts": _us(g.t),
                        "args": {
                            "rx": round((g.pcie_rx or 0) / 1e9, 3),
                            "tx": round((g.pcie_tx or 0) / 1e9, 3),
                        },
                    }
                )
        h = f.host
        if h is not None and h.t != seen_host:
            seen_host = h.t
            ev.append(
                {
                    "ph": "C",
                    "name": "CPU %",
                    "pid": HOST_PID,
                    "tid": 0,
                    "ts": _us(h.t),
                    "args": {"value": round(sum(h.cpu_pct) / max(1, len(h.cpu_pct)), 1)},
                }
            )
            for p in h.procs:
                ev.append(
                    {
                        "ph": "C",
                        "name": f"CPU % {p.pid} {p.name}",
                        "pid": HOST_PID,
                        "tid": 0,
                        "ts": _us(h.t),
                        "args": {"value": round(p.cpu_pct, 1)},
                    }
                )
        for s in f.stacks:
            if (s.pid, s.t) == seen_stack or s.main is None:
                continue
            seen_stack = (s.pid, s.t)
            if s.pid not in named:
                named.add(s.pid)
                ev.append(
                    {
                        "ph": "M",
                        "name": "process_name",
                        "pid": s.pid,
                        "tid": 0,
                        "args": {"name": f"pid {s.pid}"},
                    }
                )
            m = s.main
            w, code = site(m.frames)
            ev.append(
                {
                    "ph": "i",
                    "s": "t",
                    "name": f"{m.klass}: {m.frames[0].name if m.frames else '?'}",
                    "pid": s.pid,
                    "tid": m.tid,
                    "ts": _us(s.t),
                    "args": {
                        "class": m.klass,
                        "where": w,
                        "code": code,
                        "gil": m.owns_gil,
                        "stack": [f"{fr.name} {fr.file}:{fr.line}" for fr in m.frames[:12]],
                    },
                }
            )
    clf.flush()
    for gpu, labels in clf.labels.items():
        run: list = []
        for lab in [*labels, None]:
            if run and (lab is None or lab.label != run[0].label):
                a, b = run[0], run[-1]
                ev.append(
                    {
                        "ph": "X",
                        "name": TITLES.get(a.label, a.label),
                        "pid": GPU_PID_BASE + gpu,
                        "tid": 1,
                        "ts": _us(a.t),
                        "dur": _us(b.t + clf.bin_s - a.t),
                        "args": {"label": a.label, "confidence": b.confidence, "rule": b.rule, **b.evidence},
                    }
                )
                run = []
            if lab is not None and lab.label != "warmup":
                run.append(lab)
    for m in rec.markers():
        for g in rec.meta.get("gpus") or [{"index": 0}]:
            ev.append(
                {
                    "ph": "X",
                    "name": f"marker {m.name}",
                    "pid": GPU_PID_BASE + g["index"],
                    "tid": 2,
                    "ts": _us(m.t0),
                    "dur": _us(m.t1 - m.t0),
                    "args": {"label": m.label, "facts": m.facts},
                }
            )
    if progress:
        print("\r" + " " * 20 + "\r", end="", file=sys.stderr)
    return ev


def export_perfetto(rec: Recording, out: Path, force: bool = False, progress: bool = False) -> int:
    if out.exists() and not force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    if not out.parent.exists() or not os.access(out.parent, os.W_OK):
        raise UserError(f"cannot write {out}: directory {out.parent} is missing or not writable")
    ev = events(rec, progress)
    doc = {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "metadata": {
            "clock": "CLOCK_MONOTONIC",
            "wall_offset_s": rec.meta.get("wall_offset"),
            "host": rec.meta.get("host"),
            "memtop_version": rec.meta.get("memtop_version"),
        },
    }
    try:
        out.write_text(json.dumps(doc, separators=(",", ":")))
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None
    return len(ev)
