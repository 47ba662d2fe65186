"""Text for the panels, from a View. Pure functions: no widgets, no I/O."""

from __future__ import annotations

from rich.text import Text

from memtop.model import Capability, GpuSample, HostSample, StackSample
from memtop.phases import STACK_WINDOW_S
from memtop.pipeline import View
from memtop.stackclass import where
from memtop.timefmt import clock

from .timeline import PHASE_COLORS

CLASS_COLORS = {"sync": "red", "copy": "magenta", "data": "yellow", "other": "white", "idle": "bright_black"}


def pct(v: float | None) -> str:
    return "  -" if v is None else f"{v:3.0f}"


def rate(bps: float | None) -> str:
    if bps is None:
        return "   -"
    if bps >= 1e9:
        return f"{bps / 1e9:4.1f}G"
    if bps >= 1e6:
        return f"{bps / 1e6:4.0f}M"
    return f"{bps / 1e3:4.0f}K"


def mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**30:.1f}"


def gpu_row(g: GpuSample, phase: str) -> tuple:
    frac = g.pcie_fraction()
    mem = f"{mib(g.mem_used)}/{mib(g.mem_total)}G" if g.mem_total else "-"
    thr = ",".join(g.throttle_reasons) if g.throttled else ""
    sm = g.sm if g.mode == "gpm" else g.util
    return (
        str(g.index),
        Text(phase, style=PHASE_COLORS.get(phase, "white")),
        pct(sm),
        pct(g.tensor),
        pct(g.dram if g.mode == "gpm" else g.mem_util),
        rate(g.pcie_rx),
        rate(g.pcie_tx),
        pct(None if frac is None else 100 * frac),
        mem,
        "-" if g.power_w is None else f"{g.power_w:.0f}W",
        "-" if g.temp_c is None else f"{g.temp_c:.0f}C",
        Text(thr or "-", style="bold red" if thr else "dim"),
    )


# (title, width): fixed widths, so a value never resizes (and repaints) a whole table
GPU_COLUMNS = (
    ("GPU", 3),
    ("phase", 8),
    ("SM%", 4),
    ("TC%", 4),
    ("DRAM%", 5),
    ("PCIe RX", 7),
    ("PCIe TX", 7),
    ("link%", 5),
    ("mem", 11),
    ("power", 5),
    ("temp", 4),
    ("throttle", 14),
)
PROC_COLUMNS = (
    ("PID", 7),
    ("user", 8),
    ("GPU", 3),
    ("GPU mem", 7),
    ("CPU%", 4),
    ("thr", 4),
    ("st", 2),
    ("role", 6),
    ("phase", 8),
    ("NUMA", 5),
    ("top frame", 34),
)  # fits 3/5 of 200 columns


def header(v: View) -> Text:
    f = v.frame
    meta = v.meta
    gpus = f.gpus if f else ()
    names = sorted({g.name for g in gpus})
    modes = sorted({g.mode for g in gpus})
    mode = {"gpm": "GPM 10 Hz", "nvml": "NVML-only", "lost": "GPU lost"}
    t = Text()
    t.append(" memtop ", style="bold reverse")
    t.append(f" {meta.get('host') or ''} ")
    if f is None:
        t.append("starting… ", style="dim")
    elif gpus:
        t.append(f"{len(gpus)}× {', '.join(names)} ")
        t.append(f"driver {meta.get('driver') or '?'} ", style="dim")
        t.append(" ".join(mode.get(m, m) for m in modes), style="bold")
    else:
        t.append("no GPU found (run `memtop --demo` to see a recording) ", style="bold yellow")
    s = v.status
    if s.mode == "live" and s.frozen_at is not None:  # paused: sampling and recording go on
        t.append(f"  ⏸ LIVE paused, -{clock(s.frozen_at)}", style="bold yellow")
    elif s.mode == "live":
        t.append("  ● LIVE", style="bold green")
    else:
        t.append(
            f"  {'⏸' if s.paused else '▶'} {s.mode.upper()} {s.position:5.1f}/{s.duration:.0f}s ×{s.speed:g}",
            style="bold cyan",
        )
    if s.recording:
        t.append(f"  ● REC {s.recording}", style="bold red")
    if s.fault:
        t.append(f"  {s.fault}", style="bold red")
    return t


def verdict_text(v: View, gpu: int) -> Text:
    vd = v.verdicts.get(gpu)
    t = Text()
    if vd is None:
        f = v.frame
        if f is not None and not f.gpus:
            t.append("No GPU to judge: ", style="bold")
            t.append(
                next((c.detail for c in f.caps if c.source == "nvml" and not c.ok), "no NVIDIA GPU found")
            )
            t.append("  — host panels below are live. Try `memtop --demo`.", style="dim")
        else:
            t.append("gathering…", style="dim")
        return t
    color = PHASE_COLORS.get(vd.label, "white")
    t.append(vd.headline, style=f"bold {color}")
    t.append(f"\n{vd.evidence}", style="dim")
    if vd.advice:
        t.append(f"\n→ {vd.advice[0]}")
    if vd.command and not vd.healthy:
        t.append(f"\n$ {vd.command}", style="italic")
    return t


def host_text(h: HostSample | None, caps: tuple[Capability, ...], perf: tuple, ascii_only: bool) -> Text:
    t = Text()
    if h is None:
        return Text("host: waiting…", style="dim")
    blocks = " .:-=+*#@" if ascii_only else " ▁▂▃▄▅▆▇█"
    cores = "".join(blocks[min(8, round(c / 12.5))] for c in h.cpu_pct)
    mean = sum(h.cpu_pct) / max(1, len(h.cpu_pct))
    t.append(f"CPU {mean:3.0f}% ", style="bold")
    t.append(f"[{cores}]", style="yellow")
    t.append(f" iowait {h.iowait_pct:.0f}%  load {h.load[0]:.1f}\n")
    t.append(
        f"mem {h.mem_used / 2**30:.1f}/{h.mem_total / 2**30:.1f}G  swap {h.swap_used / 2**30:.1f}/"
        f"{h.swap_total / 2**30:.1f}G\n"
    )
    if len(h.numa) > 1:
        for n in h.numa:
            t.append(
                f"node{n.node} cpus {n.cpus} free {n.mem_free / 2**30:.0f}G miss/s {n.miss_rate:.0f} "
                f"other/s {n.other_node_rate:.0f}\n"
            )
        gnodes = ", ".join(f"GPU{i}→node{n}" if n >= 0 else f"GPU{i}→?" for i, n in enumerate(h.gpu_nodes))
        t.append(f"{gnodes}\n", style="dim")
    else:
        t.append(f"NUMA: {len(h.numa)} node — placement n/a\n", style="dim")
    for p in perf:
        r = dict(p.rates)
        line = (
            f"perf {p.pid}: {r.get('task-clock', 0):.2f} CPUs, faults/s {r.get('page-faults', 0):.0f}, "
            f"ctxsw/s {r.get('context-switches', 0):.0f}"
        )
        if "ipc" in r:
            line += f", IPC {r['ipc']:.2f}, miss {100 * r.get('cache-miss-rate', 0):.1f}%"
        t.append(line + "\n")
    return t


def proc_rows(v: View) -> list[tuple[str, tuple]]:
    f = v.frame
    if f is None or f.host is None:
        return []
    gpu_mem = {p.pid: p.used_memory for g in f.gpus for p in g.processes}
    stacks = {s.pid: s for s in f.stacks}
    rows = []
    for p in f.host.procs:
        s = stacks.get(p.pid)
        top = ""
        if s is not None and s.main is not None and s.main.frames:
            m = s.main
            top = f"{m.klass}: {m.frames[0].name} {where(m.frames)}"
        elif s is not None and s.error:
            top = f"stacks: {s.error}"
        mem = gpu_mem.get(p.pid)
        labs = v.labels.get(p.gpus[0]) if p.gpus else None
        phase = labs[-1].label if labs else "-"
        rows.append(
            (
                str(p.pid),
                (
                    str(p.pid),
                    p.user[:8],
                    ",".join(map(str, p.gpus)) or "-",
                    "-" if mem is None else f"{mem / 2**30:.1f}G",
                    f"{p.cpu_pct:.0f}",
                    str(p.threads),
                    p.state,
                    "worker" if p.worker_of else "main",
                    Text(phase, style=PHASE_COLORS.get(phase, "")),
                    p.placement,
                    top[:34],
                ),
            )
        )
    return rows


def window_text(ev: dict | None) -> Text:
    """The classifier's sliding-window view of the main thread: class shares, GIL share."""
    t = Text()
    if not ev or not ev.get("stack_shares"):
        return t
    # shares in steps of 10 %: a steadier line repaints (and costs bytes) less often
    t.append(f"last {STACK_WINDOW_S:.0f} s: ", style="dim")
    for k, share in sorted(ev["stack_shares"].items(), key=lambda kv: -kv[1]):
        if share >= 0.05:
            t.append(f"{k} {10 * round(10 * share)}% ", style=CLASS_COLORS.get(k, ""))
    t.append(f"· GIL held {10 * round(10 * ev.get('gil', 0))}%\n", style="dim")
    return t


def stacks_text(
    s: StackSample | None, caps: tuple[Capability, ...], pid: int | None, window: dict | None = None
) -> Text:
    if pid is None:
        return Text("select a process to see its Python stacks", style="dim")
    if s is None or not s.threads:
        cap = next((c for c in caps if c.source == "stacks" and c.name == f"pid {pid}" and not c.ok), None)
        if cap is not None:
            return Text(
                f"stacks of {pid} unavailable: {cap.detail}" + (f"\nfix: {cap.fix}" if cap.fix else ""),
                style="yellow",
            )
        return Text(f"no stack sample for {pid} yet", style="dim")
    t = window_text(window)
    if s.native:
        t.append("native dump (on request)\n", style="bold")
    for th in sorted(s.threads, key=lambda th: (th.tid != s.pid, not th.active)):
        color = CLASS_COLORS.get(th.klass, "white")
        t.append(f"{th.name} ({th.tid}) ", style="bold")
        t.append(f"{th.klass}", style=f"bold {color}")
        t.append(f"{' active' if th.active else ' idle'}{' GIL' if th.owns_gil else ''}\n", style="dim")
        for fr in th.frames[:4]:
            t.append(
                f"  {fr.name} {fr.file.rsplit('/', 1)[-1]}:{fr.line}",
                style=color if fr is th.frames[0] else "",
            )
            if fr.code and fr is th.frames[0]:
                t.append(f"  {fr.code[:60]}", style="italic")
            t.append("\n")
    return t


def caps_text(caps: tuple[Capability, ...], notes: tuple[str, ...] = ()) -> Text:
    """What is unavailable (with the fix), then faults seen during the run."""
    t = Text()
    for n in notes[-5:]:
        t.append(f"fault: {n}\n", style="bold red")
    for c in caps:
        if c.ok:
            continue
        t.append(f"{c.source} {c.name}: {c.detail}", style="yellow")
        if c.fix:
            t.append(f" — {c.fix}", style="dim")
        t.append("\n")
    return t
