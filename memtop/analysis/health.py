"""GPU health: the counters NVML gives (ECC, retired pages, remapped rows, PCIe replays, NVLink errors,
clock-violation time), the critical Xids the driver reports, and the events a change of them makes.

One definition, read by every output: ``HealthTracker`` turns the GpuSamples of one GPU, in time order,
into ``HealthEvent``s (live in the pipeline, in `report` over a recording's samples); ``COUNTERS`` is the
table `serve` and `snapshot` export (names close to dcgm-exporter's). No textual, no NVML here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

from memtop.analysis.verdict import Verdict
from memtop.core.model import GpuHealth, GpuSample, PcieLink
from memtop.core.timefmt import clock, length

Severity = Literal["critical", "warning"]

# What to run next when the hardware is suspect (the verdict and the report print it).
CMD_REMAP = "nvidia-smi -q -d ROW_REMAPPER"
CMD_ECC = "nvidia-smi -q -d ECC,PAGE_RETIREMENT"
CMD_PCIE = "nvidia-smi -q -d PCIE"
CMD_DIAG = "dcgmi diag -r 2"
CMD_XID = "sudo dmesg -T | grep -i xid"
CMD_NVLINK = "nvidia-smi nvlink -e"
CMD_PERF = "nvidia-smi -q -d PERFORMANCE"

# Critical Xids and their meaning, as NVIDIA's Xid catalogue documents them
# (docs.nvidia.com/deploy/xid-errors), with what to do next.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (often the application: an illegal address or instruction)", CMD_XID),
    31: ("GPU memory page fault (usually the application: an illegal memory access)", CMD_XID),
    43: ("GPU stopped processing (a user application fault)", CMD_XID),
    45: ("preemptive cleanup after an earlier error (the process was killed)", CMD_XID),
    48: ("double-bit ECC error (uncorrectable)", CMD_ECC),
    61: ("internal micro-controller breakpoint/warning", CMD_DIAG),
    62: ("internal micro-controller halt", CMD_DIAG),
    63: ("ECC page retirement or row remapping recorded", CMD_REMAP),
    64: ("ECC page retirement or row remapping failed", CMD_REMAP),
    68: ("video processor exception", CMD_DIAG),
    74: ("NVLink error", CMD_NVLINK),
    79: ("GPU has fallen off the bus", CMD_XID),
    92: ("high single-bit ECC error rate", CMD_ECC),
    94: ("contained ECC error (the affected application was stopped)", CMD_REMAP),
    95: ("uncontained ECC error (every application on the GPU is affected: reset it)", CMD_REMAP),
    109: ("context switch timeout", CMD_DIAG),
    119: ("GSP RPC timeout", CMD_DIAG),
    120: ("GSP error", CMD_DIAG),
    140: ("unrecovered ECC error", CMD_REMAP),
}


@dataclass(frozen=True, slots=True)
class Counter:
    """A health counter as `serve` exports it."""

    field: str  # GpuHealth field
    title: str  # for people (the GPU detail screen)
    prom: str  # Prometheus name without the memtop_ prefix
    counter: bool  # a counter (only grows) or a gauge (a 0/1 state)
    dcgm: str  # the dcgm-exporter field with the same meaning
    help: str
    scale: float = 1.0  # to the Prometheus unit


COUNTERS: tuple[Counter, ...] = (
    Counter("ecc_sbe_volatile", "corrected ECC", "gpu_ecc_sbe_volatile_total", True, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "corrected (single-bit) ECC errors since the driver loaded"),
    Counter("ecc_dbe_volatile", "uncorrected ECC", "gpu_ecc_dbe_volatile_total", True, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "uncorrected (double-bit) ECC errors since the driver loaded"),
    Counter("ecc_sbe_aggregate", "corrected ECC (board life)", "gpu_ecc_sbe_aggregate_total", True, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
            "corrected ECC errors over the board's life"),
    Counter("ecc_dbe_aggregate", "uncorrected ECC (board life)", "gpu_ecc_dbe_aggregate_total", True, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "uncorrected ECC errors over the board's life"),
    Counter("retired_sbe", "pages retired (single-bit)", "gpu_retired_pages_sbe", False, "DCGM_FI_DEV_RETIRED_SBE",
            "pages retired for repeated single-bit errors"),
    Counter("retired_dbe", "pages retired (double-bit)", "gpu_retired_pages_dbe", False, "DCGM_FI_DEV_RETIRED_DBE",
            "pages retired for double-bit errors"),
    Counter("retired_pending", "page retirement pending", "gpu_retired_pages_pending", False, "DCGM_FI_DEV_RETIRED_PENDING",
            "1 while a page retirement waits for the next reset"),
    Counter("remap_correctable", "rows remapped (correctable)", "gpu_correctable_remapped_rows", False,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows remapped for correctable errors"),
    Counter("remap_uncorrectable", "rows remapped (uncorrectable)", "gpu_uncorrectable_remapped_rows", False,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows remapped for uncorrectable errors"),
    Counter("remap_pending", "row remap pending", "gpu_row_remap_pending", False, "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "1 while a row remap waits for the next reset"),
    Counter("remap_failure", "row remap failed", "gpu_row_remap_failure", False, "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "1 once a row remap failed (no spare rows)"),
    Counter("pcie_replay", "PCIe replays", "gpu_pcie_replay_total", True, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "PCIe packets replayed (link errors recovered by the link layer)"),
    Counter("nvlink_crc", "NVLink CRC errors", "gpu_nvlink_crc_errors_total", True, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "NVLink CRC flit errors, summed over the active links"),
    Counter("nvlink_replay", "NVLink replays", "gpu_nvlink_replay_errors_total", True,
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVLink replays, summed over the active links"),
    Counter("nvlink_recovery", "NVLink recoveries", "gpu_nvlink_recovery_errors_total", True,
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVLink recoveries, summed over the active links"),
    Counter("violation_power_ns", "power-capped", "gpu_power_violation_seconds_total", True, "DCGM_FI_DEV_POWER_VIOLATION",
            "time the clocks were held down by the power limit", 1e-9),
    Counter("violation_thermal_ns", "thermal-capped", "gpu_thermal_violation_seconds_total", True, "DCGM_FI_DEV_THERMAL_VIOLATION",
            "time the clocks were held down by the thermal limit", 1e-9),
)  # fmt: skip
HEALTH_FIELDS = tuple(f.name for f in fields(GpuHealth) if f.name not in ("t", "xids"))

# a counter that grows is an event of this severity, with this wording and next command
_GROWS: dict[str, tuple[Severity, str, str]] = {
    "ecc_dbe_volatile": ("critical", "uncorrectable (double-bit) ECC error", CMD_REMAP),
    "ecc_sbe_volatile": ("warning", "corrected (single-bit) ECC error", CMD_ECC),
    "retired_dbe": ("critical", "page retired for a double-bit error", CMD_ECC),
    "retired_sbe": ("warning", "page retired for single-bit errors", CMD_ECC),
    "remap_uncorrectable": ("critical", "row remapped for an uncorrectable error", CMD_REMAP),
    "remap_correctable": ("warning", "row remapped for a correctable error", CMD_REMAP),
    "pcie_replay": ("warning", "PCIe replays (link errors)", CMD_PCIE),
    "nvlink_crc": ("warning", "NVLink CRC errors", CMD_NVLINK),
    "nvlink_replay": ("warning", "NVLink replays", CMD_NVLINK),
    "nvlink_recovery": ("warning", "NVLink recoveries", CMD_NVLINK),
    "violation_thermal_ns": ("warning", "clocks held down by the thermal limit", CMD_PERF),
}
# a 0/1 state that turns on
_TURNS_ON: dict[str, tuple[str, str]] = {
    "remap_pending": ("remapped rows pending: drain the GPU and reset it", CMD_REMAP),
    "remap_failure": ("row remapping failed: the GPU has no spare rows left (RMA)", CMD_REMAP),
    "retired_pending": ("page retirement pending: drain the GPU and reset it", CMD_ECC),
}


@dataclass(frozen=True, slots=True)
class HealthEvent:
    t: float
    gpu: int
    kind: str  # the GpuHealth field, "xid", "link" or "lost"
    severity: Severity
    text: str  # what happened, for people
    command: str  # what to run next
    xid: int | None = None  # the Xid's number, for kind "xid"

    def as_dict(self, t0: float = 0.0) -> dict:
        return {
            "at_s": round(self.t - t0, 1),
            "kind": self.kind,
            "severity": self.severity,
            "text": self.text,
            "command": self.command,
        }


def xid_text(code: int) -> str:
    meaning = XID_MEANINGS.get(code, ("see NVIDIA's Xid catalogue", CMD_XID))[0]
    return f"Xid {code}: {meaning}"


def link_text(link: PcieLink) -> str:
    return f"PCIe link {link.text} (max {link.max_text})"


class HealthTracker:
    """The health events of one GPU, from its samples in time order: a counter that grew, a state that
    turned on, a Xid, a PCIe link that trained below its maximum or dropped, a GPU that was lost. The
    first read is the baseline: counts from before it are the GPU's history, not events (a state already
    on, a downtrained link, is one)."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self._health: GpuHealth | None = None
        self._link: PcieLink | None = None
        self._lost = False

    def feed(self, g: GpuSample) -> list[HealthEvent]:
        out: list[HealthEvent] = []
        if g.mode == "lost":
            if not self._lost:
                out.append(self._ev(g.t, "lost", "critical", "GPU lost: it fell off the bus", CMD_XID))
            self._lost = True
            return out
        self._lost = False
        h = g.health
        if h is not None and (self._health is None or h.t != self._health.t):
            out += self._counters(self._health, h)
            self._health = h
        if g.link is not None and g.link != self._link:
            out += self._links(self._link, g.link, g)
            self._link = g.link
        return out

    def _ev(self, t: float, kind: str, sev: Severity, text: str, cmd: str) -> HealthEvent:
        return HealthEvent(t, self.gpu, kind, sev, text, cmd)

    def _counters(self, prev: GpuHealth | None, h: GpuHealth) -> list[HealthEvent]:
        out = [
            HealthEvent(
                h.t, self.gpu, "xid", "critical", xid_text(x), XID_MEANINGS.get(x, ("", CMD_XID))[1], x
            )
            for x in h.xids
        ]
        for name, (text, cmd) in _TURNS_ON.items():
            if getattr(h, name) and not (prev is not None and getattr(prev, name)):
                out.append(self._ev(h.t, name, "critical", text, cmd))
        if prev is None:
            return out
        for name, (sev, text, cmd) in _GROWS.items():
            a, b = getattr(prev, name), getattr(h, name)
            if a is not None and b is not None and b > a:
                n = (b - a) / 1e9 if name.endswith("_ns") else b - a
                what = f"{text}: {n:.1f} s" if name.endswith("_ns") else f"{text}: +{n}"
                out.append(self._ev(h.t, name, sev, what, cmd))
        return out

    def _links(self, prev: PcieLink | None, link: PcieLink, g: GpuSample) -> list[HealthEvent]:
        """A link narrower than its maximum, or one that narrowed, is a fault; a lower generation only
        while the GPU is busy (an idle link drops its generation to save power and retrains under load)."""
        busy = (g.busy or 0.0) >= 50.0
        narrow = link.width < (prev.width if prev is not None else link.max_width)
        slow = busy and link.gen < link.max_gen
        if not (narrow or slow):
            return []
        was = f", was {prev.text}" if prev is not None and prev.text != link.text else ""
        return [self._ev(g.t, "link", "warning", f"{link_text(link)}{was}", CMD_PCIE)]


def health_events(samples: list[GpuSample]) -> list[HealthEvent]:
    """The events of one GPU's samples, in time order."""
    if not samples:
        return []
    tr = HealthTracker(samples[0].index)
    return [e for g in samples for e in tr.feed(g)]


def summary(h: GpuHealth | None) -> dict[str, int]:
    """The counters a GPU gives (None ones left out), for `snapshot` and `report`."""
    if h is None:
        return {}
    return {n: v for n in HEALTH_FIELDS if (v := getattr(h, n)) is not None}


# throttle reasons that say the hardware holds the clocks down (a power cap under load is the GPU
# working as configured, not a fault)
HW_THROTTLE = ("hw slowdown", "hw thermal", "hw power brake", "sw thermal")


def suspect(
    events: Sequence[HealthEvent], g: GpuSample | None, since: float, end: float
) -> tuple[str, str] | None:
    """What on this GPU's hardware could explain a problem since ``since``: (what, command), or None.
    A critical event at any time, a warning since then, the clocks held down by the hardware now, or a
    PCIe link narrower than its maximum now."""
    # the newest such instant; of its events the first critical one the tracker made (a Xid before the
    # counters it moved)
    hit = [e for e in events if e.severity == "critical" or e.t >= since]
    if hit:
        e = min((e for e in hit if e.t == hit[-1].t), key=lambda e: e.severity != "critical")
        return f"{e.text} ({length(max(0.0, end - e.t))} ago)", e.command
    if g is not None:
        hw = [r for r in g.throttle_reasons if r in HW_THROTTLE]
        if hw:
            return f"its clocks are held down now ({', '.join(hw)})", CMD_PERF
        if g.link is not None and g.link.width < g.link.max_width:
            return f"its {link_text(g.link)}", CMD_PCIE
    return None


def hardware_first(v: Verdict, events: Sequence[HealthEvent], g: GpuSample | None) -> Verdict:
    """The verdict with the hardware first where a problem (a straggler, a slow or idle phase) coincides
    with a health event, a hardware throttle or a narrowed link on that GPU: check the GPU before
    profiling the program. A healthy busy GPU keeps its verdict unless the event is critical."""
    end = g.t if g is not None else (events[-1].t if events else 0.0)
    found = suspect(events, g, end - v.window_s, end)
    busy = v.healthy and v.label != "idle"
    if found is None or (busy and not any(e.severity == "critical" for e in events)):
        return v
    what, cmd = found
    about = f"{v.about or v.label}; hardware first: {what}"
    return replace(
        v,
        headline=f"{v.headline} — hardware first: {what}",
        advice=(
            f"check the GPU before profiling the program: {cmd}",
            f"then, if it is healthy: {CMD_DIAG}",
            *v.advice,
        ),
        command=cmd,
        about=about,
    )


def report_section(samples: list[GpuSample], t0: float) -> dict | None:
    """A GPU's health in `report`: its counters at the end of the range (None ones left out) and its
    events (seconds from the recording's start), or None where the recording has no health reads."""
    reads = [g.health for g in samples if g.health is not None]
    events = health_events(samples)
    if not reads and not events:
        return None
    return {
        "counters": summary(reads[-1] if reads else None),
        "events": [e.as_dict(t0) for e in events],
    }


def counters_text(values: Mapping[str, int]) -> str:
    """The counters a GPU gives (``summary``'s form) for people: the non-zero ones by their titles,
    times in seconds, and how many others are zero (the TUI's detail and `report`'s text)."""
    given = [(c, values[c.field]) for c in COUNTERS if values.get(c.field) is not None]
    shown = [f"{c.title} {v * c.scale:.1f} s" if c.scale != 1.0 else f"{c.title} {v}" for c, v in given if v]
    zero = len(given) - len(shown)
    if not shown:
        return f"{zero} counters, all zero" if zero else "no counters"
    return ", ".join(shown) + (f"; {zero} others 0" if zero else "")


def report_lines(h: dict, md: bool) -> list[str]:
    """The health section as text (the report's renderer; ``h`` already made safe for a terminal)."""
    ev = h["events"]
    crit = sum(e["severity"] == "critical" for e in ev)
    head = f"health: {len(ev)} event{'s' if len(ev) != 1 else ''}" + (f" ({crit} critical)" if crit else "")
    lines = [f"{head}; counters (since driver load): {counters_text(h['counters'])}"]
    for e in ev[:10]:
        lines.append(
            f"{'- ' if md else '  '}at {clock(e['at_s'])} {e['severity']}: {e['text']}  $ {e['command']}"
        )
    return lines
