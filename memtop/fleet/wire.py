"""The network's decode boundary: every answer a node (/snapshot.json over HTTP, `memtop snapshot`
over ssh) or a Prometheus server sends becomes data here, or is refused with a reason.

Nothing past this module sees a node's bytes. What comes out holds only the fields the schema
(docs/snapshot.schema.json) names, with the types it names, every string passed through
memtop.core.sanitize.clean and cut to a length its field can legitimately have, every number finite and
in range, every list bounded. A GPU index that is not a small integer refuses the node: an index
chooses rows and keys, and a node that cannot say which GPU it is talking about says nothing usable.
The object count of an answer is bounded before it is parsed (json.loads of 60 MB of `{}` takes
gigabytes), so a hostile answer costs at most its bytes, which the transport has capped.
"""

from __future__ import annotations

import json
import math
import re

from memtop.analysis.phases import CHARS, LABELS
from memtop.core.metrics import METRICS
from memtop.core.model import JOB_KEYS
from memtop.core.sanitize import clean

SCHEMA_VERSION = 1
# A snapshot of 64 GPUs and 256 processes, every string at its cap, is under 700 KB; real ones are a
# few KB (8 GPUs with verdicts: 12 KB).
MAX_SNAPSHOT = 1 << 20
MAX_SNAPSHOT_OBJECTS = 20_000
# Prometheus answers grow with the fleet: 1 024 nodes of 8 GPUs are 65 536 phase series, ~25 points
# each in the band's range query (~30 MB, ~1.8 M JSON containers).
MAX_PROM = 48 << 20
MAX_PROM_OBJECTS = 2_000_000
MAX_SERIES = 100_000
MAX_GPUS = 64
MAX_INDEX = 1023
MAX_PROCS = 256
BAND_LEN = 120
PHASES = frozenset((*LABELS, "warmup", "gathering"))
_RANGES = {m.name: (m.lo, m.hi) for m in METRICS}  # what Metric.valid admits
MODES = ("live", "replay", "demo")
GPU_MODES = ("gpm", "nvml", "lost")


class Refused(ValueError):
    """An answer memtop will not use; str() is the reason, written by memtop (safe to print)."""


def check_size(body: bytes | bytearray, max_objects: int) -> None:
    """Refuse JSON of more than `max_objects` objects and arrays before it is parsed (every one
    begins with a bracket, and brackets inside strings only make the count cautious)."""
    if body.count(b"{") + body.count(b"[") > max_objects:
        raise Refused(f"bad response: over {max_objects} JSON objects")


def load_json(body: bytes | bytearray, max_objects: int) -> object:
    """JSON with at most `max_objects` objects and arrays (check_size)."""
    check_size(body, max_objects)
    try:
        # (decoded here: json.loads of bytes first guesses among UTF-8, -16 and -32; a node sends UTF-8)
        return json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # invalid UTF-8 and 5 000-digit integers are ValueErrors
        raise Refused("bad response: not JSON") from None


# -- typed fields ---------------------------------------------------------------------------
def _text(v: str, limit: int) -> str:
    """clean(v, limit): what a node sends is mostly short printable ASCII, which clean leaves as it
    is (a thousand nodes send a dozen strings each every few seconds)."""
    return v if len(v) <= limit and v.isascii() and v.isprintable() else clean(v, limit)


def _str(v: object, limit: int, default: str = "") -> str:
    return _text(v, limit) if isinstance(v, str) else default


def _num(v: object, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    if type(v) is float:  # (most of a snapshot's numbers: no conversion to try)
        f = v
    elif isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    else:
        try:
            f = float(v)  # a 4 000-digit int overflows
        except OverflowError:
            return None
    return f if lo <= f <= hi and f - f == 0.0 else None  # (NaN and the infinities fail the second)


def _small_int(v: object, hi: int) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi else None


def _obj(v: object) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v: object, limit: int) -> list:
    return v[:limit] if isinstance(v, list) else []


# the schema's patterns for the numeric job fields (the rest are free text, cleaned)
_JOB_PATTERN = {
    "slurm_job_id": re.compile(r"[0-9]{1,12}(_[0-9]{1,8})?"),
    "rank": re.compile(r"[0-9]{1,10}"),
    "local_rank": re.compile(r"[0-9]{1,10}"),
    "world_size": re.compile(r"[0-9]{1,10}"),
    # from the cgroup (collectors/jobid.py parse_cgroup): the shapes it writes
    "pod_uid": re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"),
    "qos": re.compile(r"guaranteed|burstable|besteffort"),
    "container": re.compile(r"[0-9a-f]{12}"),
    "runtime": re.compile(r"docker|containerd|cri-o|podman"),
}


def job(v: object) -> dict[str, str]:
    """The job identity: only JOB_KEYS, the numeric ones only when they are numbers."""
    out = {}
    for k, x in _obj(v).items():
        pattern = _JOB_PATTERN.get(k)
        if k in JOB_KEYS and isinstance(x, str) and x and (pattern is None or pattern.fullmatch(x)):
            out[k] = _text(x, 64 if k == "slurm_job_name" else 63)
    return out


def shares(v: object) -> dict[str, float]:
    """Phase shares, normalised to sum to one: a node's rates or a merged scrape may not. A node's
    own shares, which sum to one but for their rounding, are kept as they came (round() is a
    microsecond a value, and a thousand nodes send seven of them per GPU every few seconds)."""
    items = _obj(v).items()
    # (what a node sends: floats; a NaN fails the comparison, an infinity the sum's check below)
    raw = {k: x for k, x in items if type(x) is float and x >= 0.0 and k in PHASES}
    if len(raw) != len(items) or not math.isfinite(total := sum(raw.values())):
        raw = {k: f for k, x in items if k in PHASES and (f := _num(x, 0.0)) is not None}
        total = sum(raw.values())
    if abs(total - 1.0) <= 1e-3:
        return raw
    return {k: round(f / total, 4) for k, f in raw.items()} if total > 0 else {}


def band(v: object) -> str:
    """The phase band: known phase characters and spaces only, the newest BAND_LEN steps."""
    if not isinstance(v, str):
        return ""
    v = v[-BAND_LEN:]
    if _BAND.fullmatch(v):  # (what a node sends: a thousand nodes' bands every few seconds)
        return v
    return "".join(c if c in _BAND_CHARS else " " for c in v)


_BAND_CHARS = frozenset(CHARS.values()) | {" "}
_BAND = re.compile("[" + re.escape("".join(sorted(_BAND_CHARS))) + "]*")


_LABEL = re.compile(r"[a-z][a-z_-]{0,15}")  # a phase's name (the row shows it as one)


def _texts(v: object, limit: int, count: int) -> list[str]:
    """A list of at most `count` strings, each _text(…, limit); other items left out."""
    return [_text(x, limit) for x in v[:count] if isinstance(x, str)] if v and isinstance(v, list) else []


# A thousand nodes' answers every few seconds go through _verdict and _gpu: the common case (a field
# of the right type, or absent, as in the compact form) is tested inline, without a call per field;
# what is not that case goes through the same helpers as everything else.
def _verdict(v: object) -> dict | None:
    if not isinstance(v, dict):
        return None
    label, title, headline = v.get("label"), v.get("title"), v.get("headline")
    evidence, command = v.get("evidence"), v.get("command")
    out: dict[str, object] = {
        "label": label if isinstance(label, str) and _LABEL.fullmatch(label) else "other",
        "title": _text(title, 64) if isinstance(title, str) else "",
        "share": _num(v.get("share"), 0.0, 1.0) or 0.0,
        "window_s": _num(v.get("window_s"), 0.0, 1e9) or 0.0,
        "headline": _text(headline, 300) if isinstance(headline, str) else "",
        "evidence": _text(evidence, 600) if isinstance(evidence, str) else "",
        "advice": _texts(v.get("advice"), 300, 5),
        "command": _text(command, 1000) if isinstance(command, str) else "",
    }
    if isinstance(v.get("straggler"), bool):
        out["straggler"] = v["straggler"]
    if isinstance(v.get("missing"), str):
        out["missing"] = _text(v["missing"], 300)
    return out


def _gpu(i: int, g: object) -> dict:
    if not isinstance(g, dict):
        raise Refused(f"bad snapshot: gpus[{i}] is not an object")
    index = _small_int(g.get("index"), MAX_INDEX)
    if index is None:
        raise Refused(f"bad snapshot: gpus[{i}].index is not 0-{MAX_INDEX}")
    phase, uuid, name = g.get("phase"), g.get("uuid"), g.get("name")
    gauges = {}
    for k, x in _obj(g.get("gauges")).items():  # in the recording's ranges (finite: no NaN passes)
        if (r := _RANGES.get(k)) is not None:
            if type(x) is float and r[0] <= x <= r[1]:  # (most of them: no call)
                gauges[k] = x
            elif (f := _num(x, *r)) is not None:
                gauges[k] = f
    job_ = g.get("job")
    return {
        "index": index,
        "uuid": _text(uuid, 64) if isinstance(uuid, str) else "",
        "name": _text(name, 96) if isinstance(name, str) else "",
        "mode": g["mode"] if g.get("mode") in GPU_MODES else "nvml",
        "gauges": gauges,
        "throttle": _texts(g.get("throttle"), 32, 16),
        "phase": phase if isinstance(phase, str) and phase in PHASES else "other",
        "shares": shares(g.get("shares")),
        "band": band(g.get("band")),
        "verdict": _verdict(g.get("verdict")),
        "job": job(job_) if job_ else {},
    }


def _process(p: object) -> dict | None:
    if not isinstance(p, dict) or (pid := _small_int(p.get("pid"), 1 << 22)) is None:
        return None
    gpus = [x for x in _list(p.get("gpus"), MAX_GPUS) if _small_int(x, MAX_INDEX) is not None]
    return {
        "pid": pid,
        "name": _str(p.get("name"), 64),
        "gpus": gpus,
        "cpu_pct": _num(p.get("cpu_pct"), 0.0, 1e5) or 0.0,
        "job": job(p.get("job")),
    }


def snapshot(raw: object) -> dict:
    """A node's snapshot as the schema says it is, or Refused with the reason."""
    if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), list):
        raise Refused("bad response: not a memtop snapshot")
    if len(raw["gpus"]) > MAX_GPUS:
        raise Refused(f"bad snapshot: over {MAX_GPUS} GPUs")
    gpus = [_gpu(i, g) for i, g in enumerate(raw["gpus"])]
    if len({g["index"] for g in gpus}) != len(gpus):
        raise Refused("bad snapshot: a GPU index appears twice")
    version, host = raw.get("memtop_version"), raw.get("hostname")
    position, procs = raw.get("position_s"), raw.get("processes")
    return {
        "schema_version": SCHEMA_VERSION,
        "memtop_version": _text(version, 32) if isinstance(version, str) else "",
        "hostname": _text(host, 253) if isinstance(host, str) else "",
        "time": _num(raw.get("time"), 0.0, 1e11) or 0.0,
        "mode": raw["mode"] if raw.get("mode") in MODES else "live",
        "position_s": None if position is None else _num(position, 0.0, 1e9),
        "band_step_s": _num(raw.get("band_step_s"), 0.01, 3600.0) or 0.5,
        "notes": _texts(raw.get("notes"), 300, 16),
        "gpus": gpus,
        "processes": [p for p in map(_process, procs[:MAX_PROCS]) if p is not None]
        if procs and isinstance(procs, list)
        else [],
    }


# -- the compact form -----------------------------------------------------------------------
# `memtop serve`'s /compact.json: of a snapshot, only what the cluster table shows (a row's job, phase,
# SM, band and verdict label; the straggler check's shares and verdict headline and evidence), about
# a third of the bytes and of the decoding. The node screen and the detail pane fetch the node's full
# /snapshot.json; a node that answers anything but this form is polled for /snapshot.json.
COMPACT_PATH = "/compact.json"
COMPACT_FORM = 1  # the form's version: what a node answers with anything else is not it
COMPACT_BAND = 60  # the table's widest band (tui.cluster.BAND_W); recent_phase reads the last 5
_COMPACT_GAUGES = ("sm", "util")  # the table's SM column, utilisation where SM activity is missing
_COMPACT_VERDICT = ("label", "share", "window_s", "headline", "evidence", "straggler")


def compact(snap: dict) -> dict:
    """The compact form of a snapshot as memtop.commands.snapshot makes it: a subset of the
    schema's fields (decoded by snapshot() as any snapshot is), marked as the form."""
    gpus = []
    for g in snap["gpus"]:
        v = g.get("verdict")
        gauges = g.get("gauges") or {}
        gpus.append(
            {
                "index": g["index"],
                "phase": g.get("phase"),
                "shares": g.get("shares"),
                "band": (g.get("band") or "")[-COMPACT_BAND:],
                "gauges": {k: gauges[k] for k in _COMPACT_GAUGES if k in gauges},
                "verdict": None if v is None else {k: v[k] for k in _COMPACT_VERDICT if k in v},
                "job": g.get("job"),
            }
        )
    return {
        "compact": COMPACT_FORM,
        "hostname": snap.get("hostname"),
        "time": snap.get("time"),
        "mode": snap.get("mode"),
        "band_step_s": snap.get("band_step_s"),
        "gpus": gpus,
    }


def is_compact(raw: object) -> bool:
    """Whether a node's decoded JSON says it is the compact form (an old node's 404 page, or a
    proxy's full snapshot for any path, is not)."""
    return isinstance(raw, dict) and raw.get("compact") == COMPACT_FORM


# -- Prometheus ---------------------------------------------------------------------------
Series = tuple[dict[str, str], list[tuple[float, float]]]


def _point(p: object) -> tuple[float, float]:
    """[time, "value"]: Prometheus sends the value as a string ("NaN" and "+Inf" included)."""
    if not (isinstance(p, list) and len(p) == 2 and isinstance(p[1], str) and len(p[1]) <= 40):
        raise Refused('bad Prometheus answer: a sample is not [time, "value"]')
    t = _num(p[0])
    try:
        v = float(p[1])
    except ValueError:
        raise Refused("bad Prometheus answer: a sample's value is not a number") from None
    if t is None:
        raise Refused("bad Prometheus answer: a sample's time is not a number")
    return t, v


def prom_result(body: bytes | bytearray) -> list[Series]:
    """A /api/v1/query or /query_range answer: each series' labels (cleaned) and its samples."""
    data = load_json(body, MAX_PROM_OBJECTS)
    if not isinstance(data, dict):
        raise Refused("bad Prometheus answer: not an object")
    if data.get("status") != "success":
        raise Refused(f"query failed: {_str(data.get('error'), 200, 'no reason given')}")
    result = _obj(data.get("data")).get("result")
    if not isinstance(result, list) or len(result) > MAX_SERIES:
        raise Refused(f"bad Prometheus answer: no result list of at most {MAX_SERIES} series")
    out: list[Series] = []
    for s in result:
        metric = s.get("metric") if isinstance(s, dict) else None
        if not isinstance(metric, dict) or len(metric) > 64:
            raise Refused("bad Prometheus answer: a series without labels")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
            raise Refused("bad Prometheus answer: a label that is not a string")
        labels = {clean(k, 64): clean(v, 253) for k, v in metric.items()}
        if "value" in s:
            points = [_point(s["value"])]
        elif isinstance(s.get("values"), list) and len(s["values"]) <= 11_000:  # Prometheus' own cap
            points = [_point(p) for p in s["values"]]
        else:
            raise Refused("bad Prometheus answer: a series without samples")
        out.append((labels, points))
    return out
