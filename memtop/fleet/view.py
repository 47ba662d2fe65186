"""The merged view of many nodes: each node's state (its newest decoded snapshot, or why not), one
row per GPU across nodes, the straggler candidates within each job, and `--once` output.

Snapshots reach NodeState only through memtop.fleet.wire: every string here is already sanitized and
every field has its schema's type, whatever the node sent.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from memtop.analysis.phases import CHARS
from memtop.core.sanitize import clean
from memtop.fleet import wire

SCHEMA_VERSION = wire.SCHEMA_VERSION
STALE_INTERVALS = 3  # a node greys out after this many intervals without a good snapshot
RECENT_STEPS = 5  # straggler detection compares the last few band steps, not one 0.5 s bin
MAJORITY = 0.6  # ...and needs this share of the job's GPUs to agree on a phase
PHASE_OF = {c: p for p, c in CHARS.items()}


@dataclass
class NodeState:
    target: str  # what is unique: host or host:port as given, or a Prometheus scrape instance
    snapshot: dict | None = None
    ok_at: float = 0.0  # monotonic time of the newest good snapshot
    error: str | None = None  # why the newest poll failed: timeout, refused, auth, ...
    polls: int = 0
    failures: int = 0
    received: int = 0  # bytes of good answers
    version: int = 0  # counts the polls' outcomes: a view compares it, not the snapshot
    compact: bool = False  # the snapshot held is the compact form (wire.compact): the table's fields only
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # (version, stale): its rows, made once per outcome (rows() runs at every paint)
    made: tuple[int, bool, list[Row]] | None = field(default=None, repr=False)

    def age(self, now: float | None = None) -> float | None:
        return None if not self.ok_at else (now or time.monotonic()) - self.ok_at

    def stale(self, interval: float, now: float | None = None) -> bool:
        age = self.age(now)
        return age is None or age > STALE_INTERVALS * interval

    def receive(self, body: bytes | bytearray, compact: bool = False) -> bool:
        """A node's answer as it came off the wire (HTTP body, ssh line). With `compact`, an answer
        that is not the compact form is not used, and False says so (the node is an older memtop)."""
        try:
            raw = wire.load_json(body, wire.MAX_SNAPSHOT_OBJECTS)
        except wire.Refused as e:
            if compact:
                return False
            self.bad(str(e))
            return True
        if compact and not wire.is_compact(raw):
            return False
        self.good(raw, len(body), compact)
        return True

    def good(self, raw: object, size: int, compact: bool = False) -> None:
        """A decoded JSON value: kept if it is a snapshot (typed and sanitized), else the reason."""
        try:
            snap = wire.snapshot(raw)
        except wire.Refused as e:
            return self.bad(str(e))
        with self.lock:
            self.snapshot, self.ok_at, self.error, self.compact = snap, time.monotonic(), None, compact
            self.polls += 1
            self.version += 1
            self.received += size

    def bad(self, why: str) -> None:
        with self.lock:
            self.error = clean(why, 200)  # reasons may quote the network (ssh's stderr, TLS errors)
            self.polls += 1
            self.failures += 1
            self.version += 1


# -- the merged view ---------------------------------------------------------------------
@dataclass  # (not frozen: a frozen dataclass sets each field through object.__setattr__, 4x the cost)
class Row:
    key: str  # target/gpu
    target: str
    hostname: str
    gpu: dict
    job: str  # the group a straggler is judged in
    stale: str | None  # why the node is stale, or None
    phase: str = ""  # recent_phase: what straggler detection compares, and the row shows
    straggler: str | None = None  # evidence, when this GPU's phase differs from the rest of its job


def _job_key(g: dict) -> str:
    job = g.get("job") or {}
    if job.get("slurm_job_id"):
        return f"slurm {job['slurm_job_id']}"
    if job.get("pod"):
        return "pod " + re.sub(r"-[0-9]+$", "", job["pod"])  # trainer-0, trainer-1: one job
    return "all"


def recent_phase(g: dict) -> str:
    """The GPU's phase over the last few band steps (one 0.5 s bin is too jumpy to compare)."""
    band = g.get("band") or ""
    got = _RECENT.get(band[-RECENT_STEPS:]) if isinstance(band, str) else None
    if got is None:
        tail = [c for c in band[-RECENT_STEPS:] if c.strip()]
        got = PHASE_OF.get(Counter(tail).most_common(1)[0][0], "other") if tail else ""
        if isinstance(band, str):
            if len(_RECENT) >= 4096:  # (10 characters, 5 steps: a bound, seldom reached)
                _RECENT.clear()
            _RECENT[band[-RECENT_STEPS:]] = got
    return got or str(g.get("phase", "gathering"))


# a band's last steps -> their phase ("": none): a cluster of a thousand GPUs asks at every paint
_RECENT: dict[str, str] = {}


def rows(nodes: list[NodeState], interval: float) -> list[Row]:
    """One row per GPU of every node, the straggler candidates flagged: a node's rows are made
    again only when a poll ended or it went stale (a thousand nodes, a paint a second)."""
    cut = time.monotonic() - STALE_INTERVALS * interval
    out: list[Row] = []
    for n in nodes:
        stale = not n.ok_at or n.ok_at < cut  # (NodeState.stale, inline: this runs per node per paint)
        made = n.made
        if made is None or made[0] != n.version or made[1] != stale:
            with n.lock:
                version, snap, err = n.version, n.snapshot, n.error
            why = (err or ("no answer yet" if snap is None else "no fresh snapshot")) if stale else None
            made = n.made = (version, stale, _node_rows(n.target, snap, why, err))
        out += made[2]
    return _flag_stragglers(out)


def _node_rows(target: str, snap: dict | None, stale: str | None, err: str | None) -> list[Row]:
    if snap is None:
        return [Row(f"{target}/-", target, "", {}, "none", stale or err)]
    host = str(snap.get("hostname", ""))
    return [
        Row(f"{target}/{g.get('index')}", target, host, g, _job_key(g), stale, recent_phase(g))
        for g in snap.get("gpus", [])
        if isinstance(g, dict)
    ]


def _flag_stragglers(rs: list[Row]) -> list[Row]:
    """Within each job (Slurm id, pod set, or all GPUs shown), a GPU whose recent phase differs from
    what most of the job's GPUs are doing is the straggler candidate: in a synchronous job the slow
    rank computes while the others wait for it in a collective, or the reverse."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rs):
        if r.gpu and r.stale is None:
            groups.setdefault(r.job, []).append(i)
    out = rs
    for job, idx in groups.items():
        if len(idx) < 3:
            continue
        phases = Counter(rs[i].phase for i in idx)
        phases.pop("gathering", None)
        (major, count), *_ = phases.most_common(1) or [("", 0)]
        if not major or count < MAJORITY * len(idx) or count == len(idx):
            continue
        heads: dict[str, str] = {}  # phase -> the evidence's first part, the same for each GPU in it
        for i in idx:
            p = rs[i].phase
            if p in (major, "gathering"):
                continue
            head = heads.get(p)
            if head is None:
                where = "the job" if job == "all" else job
                head = heads[p] = f"{p} while {count} of {len(idx)} GPUs of {where} are {major}"
            out[i] = _flagged(rs[i], head)
    return out


def _flagged(r: Row, head: str) -> Row:
    """The row with its evidence: `head`, then the GPU's own share and verdict. The same Row as the
    last paint's when neither changed (a third of a thousand rows may be flagged; the view compares
    rows by identity first)."""
    got = _FLAGGED.get(r.key)
    if got is not None and got[0] is r:
        if got[1] == head:
            return got[3]
        tail = got[2]
    else:
        g = r.gpu
        v = g.get("verdict") or {}
        share = (g.get("shares") or {}).get(r.phase)
        tail = "" if share is None else f"; {100 * share:.0f} % {r.phase} over the last minute"
        if v.get("headline"):
            tail += f"; verdict: {v['headline']}" + (f" ({v['evidence']})" if v.get("evidence") else "")
    if len(_FLAGGED) >= 1 << 16:  # (rows of nodes gone: a bound, seldom reached)
        _FLAGGED.clear()
    flagged = Row(**{**r.__dict__, "straggler": head + tail})
    _FLAGGED[r.key] = (r, head, tail, flagged)
    return flagged


# row key -> (the row as made, its evidence's head and tail, the row flagged with them)
_FLAGGED: dict[str, tuple[Row, str, str, Row]] = {}


def merged(nodes: list[NodeState], interval: float) -> dict:
    """`--once --json`: every node's snapshot and state, and the straggler candidates."""
    now = time.monotonic()
    flagged = [r for r in rows(nodes, interval) if r.straggler]
    return {
        "schema_version": SCHEMA_VERSION,
        "time": round(time.time(), 3),
        "interval_s": interval,
        "nodes": [
            {
                "target": n.target,
                "ok": n.snapshot is not None and not n.stale(interval, now),
                "error": n.error,
                "age_s": None if (age := n.age(now)) is None else round(age, 2),
                "snapshot": n.snapshot,
            }
            for n in nodes
        ],
        "stragglers": [
            {
                "target": r.target,
                "hostname": r.hostname,
                "gpu": r.gpu.get("index"),
                "job": r.job,
                "evidence": r.straggler,
            }
            for r in flagged
        ],
    }


def print_text(nodes: list[NodeState], interval: float) -> None:
    for r in rows(nodes, interval):
        g = r.gpu
        head = f"{clean(r.target, 40):<24} GPU {g.get('index', '-')!s:<2}"
        if r.stale:
            print(f"{head} stale: {clean(r.stale, 80)}")
            continue
        flag = "  << straggler? " + clean(r.straggler, 300) if r.straggler else ""
        print(f"{head} {clean(g.get('phase', ''), 10):<9} {clean(g.get('band', '')[-40:], 40)}{flag}")
