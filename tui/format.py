"""Text for the panels, from a View. Pure functions: no widgets, no I/O.

Every string memtop did not write (host and GPU names, process users and command lines, stack
function/file names, source lines, thread names, capability details, notes) goes through
`memtop.core.sanitize.clean` here, and everything is built as Rich `Text`: nothing from data is parsed
as markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import groupby

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text

from memtop.analysis.jobshare import job_of_pid
from memtop.analysis.phases import STACK_WINDOW_S, Label
from memtop.core.metrics import BY_NAME, Metric
from memtop.core.metrics import fmt as metric_fmt
from memtop.core.model import Capability, Frame, GpuSample, HostSample, ProcSample, StackSample
from memtop.core.records import Evidence
from memtop.core.sanitize import clean
from memtop.core.stackclass import user_frame
from memtop.core.timefmt import clock, length
from memtop.core.wording import counted
from memtop.live.pipeline import View

from .palette import Look, look

DEFAULT = look(None)
_BOLD = Style(bold=True)  # added to a phase colour
NATIVE_DEPTH = 128  # frames per thread on the native dump screen (py-spy --native gives 40-80 in torch)


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


# -- the GPU table: its metric columns come from memtop.core.metrics (title, unit, compact format) -------
GPU_METRIC_COLUMNS = ("sm", "tensor", "dram", "pcie_rx", "pcie_tx", "power_w", "temp_c")
# the SM and DRAM columns show the model's fallbacks: without GPM, NVML's nearest figure
FALLBACK = {"sm": "activity", "dram": "bandwidth"}
_CELL_W = {"percent": 3, "bytes_per_s": 5, "watts": 4, "celsius": 3}


def _title(m: Metric) -> str:
    title = m.title if len(m.title) <= 7 else m.title[:4]
    return title + ("%" if m.kind == "percent" else "")


def _cell(m: Metric, v: float | None) -> str:
    """A metric's value in its column's few cells (the detail screen uses metrics.fmt in full)."""
    if v is None:
        return "-"
    if m.kind == "percent":
        return pct(v)
    if m.kind == "bytes_per_s":
        return rate(v)
    if m.kind == "watts":
        return f"{v:.0f}W"
    if m.kind == "celsius":
        return f"{v:.0f}C"
    return metric_fmt(m, v)


def metric_value(g: GpuSample, name: str) -> float | None:
    return getattr(g, FALLBACK.get(name, name))


def nvml_only(gpus: tuple[GpuSample, ...] | list[GpuSample]) -> bool:
    """No GPU with GPM: the SM and DRAM columns and series show NVML's rates."""
    return bool(gpus) and all(g.mode != "gpm" for g in gpus)


def gpu_titles(gpus: tuple[GpuSample, ...] | list[GpuSample], throttle_w: int = 14) -> list[str]:
    """The GPU table's column titles for these GPUs (``throttle_w``: the last column's width now)."""
    off = 2  # GPU, phase
    titles = [name for name, _ in GPU_COLUMNS]
    if nvml_only(gpus):
        for n, title in NVML_TITLES.items():
            titles[off + GPU_METRIC_COLUMNS.index(n)] = title
    if throttle_w < len(titles[-1]):
        titles[-1] = "thr"
    return titles


def gpu_widths(screen_w: int) -> dict[int, int]:
    """The GPU table's column widths that follow the screen, by column: the last (throttle reasons)
    takes what is left, at least its short title; where a reason ("sw power") would not fit, link%
    (the PCIe link's share of its peak, which the PCIe columns also show) is hidden. At 80 columns the
    title was cut to "th"; the reasons in full are in the GPU's detail (enter)."""
    link, last = [n for n, _ in GPU_COLUMNS].index("link%"), len(GPU_COLUMNS) - 1
    link_w = GPU_COLUMNS[link][1]
    left = screen_w - sum(w + 1 for _, w in GPU_COLUMNS[:-1]) - 1
    if left < len("sw power"):
        left, link_w = left + link_w + 1, 0
    return {link: link_w, last: max(3, min(GPU_COLUMNS[last][1], left))}


# what the SM and DRAM columns hold without GPM (NVML's utilisation rates), titled as what they are
NVML_TITLES = {"sm": "util", "dram": "memU"}

# (title, width): fixed widths, so a value never resizes (and repaints) a whole table
GPU_COLUMNS = (
    ("GPU", 3),
    ("phase", 9),
    *(
        (
            _title(BY_NAME[n]),
            max(len(_title(BY_NAME[n])), _CELL_W[BY_NAME[n].kind], len(NVML_TITLES.get(n, ""))),
        )
        for n in GPU_METRIC_COLUMNS
    ),
    ("link%", 5),
    ("mem", 11),
    ("throttle", 14),
)


def now_label(labels: tuple[Label, ...] | list[Label] | None) -> tuple[str, bool]:
    """The phase now and whether it is still settling (this bin's rule says otherwise: hysteresis
    holds the label until the new one has lasted). Row, band and headline all use this one."""
    if not labels:
        return "warmup", False
    lab = labels[-1]
    return lab.label, lab.raw != lab.label and "warmup" not in (lab.raw, lab.label)


def phase_cell(labels, lk: Look) -> Text:
    name, settling = now_label(labels)
    return Text(name + ("?" if settling else ""), style=lk.phase(name))


def gpu_row(g: GpuSample, labels, lk: Look = DEFAULT, straggler: bool = False) -> tuple:
    """``straggler``: the rest of its job waits for this GPU: the row says so where the phase goes (the
    phase stays in its band and in the headline once selected)."""
    frac = g.pcie_fraction()
    mem = f"{mib(g.mem_used)}/{mib(g.mem_total)}G" if g.mem_total else "-"
    thr = ",".join(g.throttle_reasons) if g.throttled else ""
    return (
        str(g.index),
        Text("straggler", style="bold reverse") if straggler else phase_cell(labels, lk),
        *(_cell(BY_NAME[n], metric_value(g, n)) for n in GPU_METRIC_COLUMNS),
        pct(None if frac is None else 100 * frac),
        mem,
        Text(thr or "-", style="bold red" if thr else "dim"),
    )


def mig_rows(g: GpuSample, lk: Look = DEFAULT) -> list[tuple[str, tuple]]:
    """A row under its GPU for each MIG instance (keyed "GPU.slot"): its profile where the phase goes
    and its memory; NVML gives no utilisation per instance without GPM (off under MIG), so "-"."""
    dash = Text("-", style="dim")
    return [
        (
            f"{g.index}.{m.index}",
            (
                f"{'`' if lk.glyphs.ascii else '└'}{m.index}",
                Text(clean(m.name.rsplit(" ", 1)[-1], 9), style="dim"),
                *(dash for _ in GPU_METRIC_COLUMNS),
                dash,
                f"{mib(m.mem_used)}/{mib(m.mem_total)}G" if m.mem_total else "-",
                dash,
            ),
        )
        for m in g.mig_instances
    ]


def row_gpu(key: str) -> int:
    """The GPU of a GPU table row's key (a MIG instance's row belongs to its GPU)."""
    return int(key.split(".", 1)[0])


# the top user frame follows the phase; the columns after it are cut first on a narrow screen
PROC_COLUMNS = (
    ("PID", 7),
    ("user", 8),
    ("GPU", 3),
    ("GPU mem", 7),
    ("SM%", 4),
    ("CPU%", 4),
    ("phase", 9),
)
TOP_FRAME = ("top frame (user code)", 24)  # widened to what the screen has
PROC_TAIL = (("thr", 4), ("st", 2), ("role", 6), ("NUMA", 5), ("job", 12))


def job_short(job: Mapping[str, str]) -> str:
    """A process's identity in a table cell: the Slurm job (and step), else the pod, else the container."""
    if job.get("slurm_job_id"):
        step = job.get("slurm_step")
        return clean(job["slurm_job_id"] + (f".{step}" if step else ""), 12)
    if job.get("pod") or job.get("pod_uid"):
        return clean(job.get("pod") or "pod " + job["pod_uid"][:8], 12)
    return clean(job.get("container", "-"), 12)


def job_long(job: Mapping[str, str]) -> str:
    """The same at length, for the header: "slurm job 4242 step 0", "pod trainer-0 burstable",
    "container 3f1c2e4d5b6a (docker)"."""
    parts = []
    if job.get("slurm_job_id"):
        parts.append(
            f"slurm job {job['slurm_job_id']}"
            + (f" step {job['slurm_step']}" if job.get("slurm_step") else "")
        )
    if job.get("pod") or job.get("pod_uid"):
        pod = job.get("pod") or job["pod_uid"][:8]
        parts.append(f"pod {pod}" + (f" {job['qos']}" if job.get("qos") else ""))
    if job.get("container"):
        parts.append(f"container {job['container']}" + (f" ({job['runtime']})" if job.get("runtime") else ""))
    return clean(", ".join(parts), 80)


def gpm_rate(meta: Mapping) -> str:
    """GPM and the rate the run read it at (its cadence: a live view 5 Hz, a recording 10 Hz unless
    --interval said otherwise); "GPM" alone where a recording's meta does not say (hostile or older)."""
    cadence = meta.get("cadence")
    s = cadence.get("gpu_s") if isinstance(cadence, Mapping) else None
    if isinstance(s, int | float) and not isinstance(s, bool) and 0.001 <= s <= 3600:  # (NaN fails)
        return f"GPM {1 / s:.3g} Hz"
    return "GPM"


def header(v: View, lk: Look = DEFAULT) -> Text:
    """Mode, position, recording and fault first: the line is cut at the right, and the machine's
    description (host, GPU names, driver) is what a narrow screen or a long name can spare."""
    f = v.frame
    meta = v.meta
    g = lk.glyphs
    gpus = f.gpus if f else ()
    names = sorted({clean(x.name, 40) for x in gpus})
    modes = sorted({x.mode for x in gpus})
    mode = {"gpm": gpm_rate(meta), "nvml": "NVML-only", "lost": "GPU lost"}
    t = Text()
    t.append(" memtop ", style="bold reverse")
    s = v.status
    if s.mode == "live" and s.frozen_at is not None:  # paused: sampling and recording go on
        t.append(f" {g.pause} LIVE paused, -{clock(s.frozen_at)}", style="bold yellow")
    elif s.mode == "live":
        t.append(f" {g.dot} LIVE", style="bold green")
    else:
        t.append(
            f" {g.pause if s.paused else g.play} {s.mode.upper()} {clock(s.position)}/{clock(s.duration)} "
            f"{g.times}{s.speed:g}",
            style="bold cyan",
        )
    if s.recording:
        t.append(f"  {g.dot} REC {clean(s.recording, 60)}", style="bold red")
    if s.fault:
        t.append(f"  {clean(s.fault, 120)}", style="bold red")
    t.append(f"  {clean(meta.get('host') or '', 40)} ")
    jobs = {job_long(dict(j.job)) for j in f.jobs} - {""} if f else set()
    if jobs:  # who the GPU processes work for (their cgroups): one named, or how many
        t.append(f"{jobs.pop() if len(jobs) == 1 else counted(len(jobs), 'job')} ", style="bold")
    if f is None:
        t.append(f"starting{g.ellipsis} ", style="dim")
    elif gpus:
        t.append(f"{len(gpus)}{g.times} {', '.join(names)} ")
        t.append(f"driver {clean(meta.get('driver') or '?', 20)} ", style="dim")
        t.append(" ".join(mode.get(m, m) for m in modes), style="bold")
    else:
        t.append("no GPU found: host, processes and stacks only ", style="bold yellow")
    return t


SHARE_BAR_W = 20  # cells of the window's share bar
SHARES_SHOWN = 4  # phases named after the bar, the largest first


def share_cells(shares: Mapping[str, float], width: int = SHARE_BAR_W) -> list[str]:
    """``width`` cells split between the phases by their shares (largest remainders), largest first:
    a phase with a share shows at least one cell where there are cells enough."""
    items = [(k, s) for k, s in sorted(shares.items(), key=lambda kv: -kv[1]) if s > 0]
    total = sum(s for _, s in items)
    if not items or total <= 0:
        return []
    exact = [width * s / total for _, s in items]
    n = [int(x) for x in exact]
    for i in sorted(range(len(items)), key=lambda i: n[i] - exact[i])[: width - sum(n)]:
        n[i] += 1
    return [k for (k, _), c in zip(items, n) for _ in range(c)]


def headline(v: View, gpu: int, lk: Look = DEFAULT) -> Text:
    """One clock, two things: the phase now, then the window's phases (a share bar, the largest named
    first). What the lines under it explain is the verdict line after it (verdict_text)."""
    vd = v.verdicts.get(gpu)
    name, settling = now_label(v.labels.get(gpu))
    g = lk.glyphs
    t = Text()
    t.append(f"GPU {gpu} ", style="bold")
    if vd is not None and vd.straggler:  # the rest of its job waits for this GPU: first, never cut
        t.append("STRAGGLER", style="bold reverse")
        t.append(" ")
    t.append("now: ", style="dim")
    now = "warming up" if name == "warmup" else name
    t.append(now + ("?" if settling else ""), style=lk.phase(name) + _BOLD)
    if vd is None or not vd.shares:
        return t
    t.append(f" {'|' if g.ascii else '│'} ", style="dim")
    t.append(f"last {length(vd.window_s)} ", style="dim")
    for k, run in groupby(share_cells(vd.shares)):
        ch, style = lk.mark(k)
        t.append(ch * len(list(run)), style=style)
    for i, (k, s) in enumerate(sorted(vd.shares.items(), key=lambda kv: -kv[1])[:SHARES_SHOWN]):
        t.append(f"{' ' if i == 0 else f' {g.sep} '}")
        t.append(f"{k} {100 * s:.0f} %", style=lk.phase(k))
    return t


def fit_command(cmd: str, width: int, ellipsis: str = "…") -> str:
    """A command in ``width`` cells keeping what differs between verdicts (the output name and the
    target: everything from ``-o``): the fixed options after the tool's name give way first, then
    the end of the target (`c` copies it whole)."""
    if cell_len(cmd) <= width:  # cells, not characters: a command line may hold wide (CJK) characters
        return cmd
    cut = cmd.find(" -o ")
    words = cmd[:cut].split(" ") if cut > 0 else []
    short = " ".join(words[:2]) + " " + ellipsis + cmd[cut:] if len(words) > 2 else cmd
    return (
        short
        if cell_len(short) <= width
        else set_cell_size(short, max(0, width - cell_len(ellipsis))) + ellipsis
    )


def verdict_text(v: View, gpu: int, lk: Look = DEFAULT, width: int = 200) -> Text:
    """The phase now and the window's shares, then one verdict: what it says and over which time, its
    evidence, its advice, its next command. A line each (the panel cuts them with an ellipsis); every
    line after the second explains the verdict named on the second, and `c` copies its command."""
    vd = v.verdicts.get(gpu)
    t = Text()
    if vd is None:
        f = v.frame
        if f is not None and not f.gpus:
            t.append("No GPU to judge: ", style="bold")
            t.append(
                clean(
                    next(
                        (c.detail for c in f.caps if c.source == "nvml" and not c.ok), "no NVIDIA GPU found"
                    ),
                    200,
                )
            )
            # without NVML no process is known to use a GPU: say how to pick one
            procs = f.host is not None and bool(f.host.procs)
            t.append(
                "\nShown: host CPU and memory, NUMA"
                + (", the watched processes and their Python stacks." if procs else "."),
                style="dim",
            )
            if not procs:
                t.append("\n`memtop --pid PID` watches a process you pick: its CPU, threads, Python stacks.")
            t.append("\n`memtop --demo` shows a recorded GPU run.", style="dim")
        else:
            t.append(f"gathering{lk.glyphs.ellipsis}", style="dim")
        return t
    t.append_text(headline(v, gpu, lk))
    if vd.label == "gathering":
        t.append(f"\n{clean(vd.evidence)}", style="dim")
        return t
    t.append("\nverdict: ", style="bold")
    t.append(clean(vd.about or vd.headline), style=lk.phase(vd.label) + _BOLD)
    t.append("\n" + clean(vd.evidence), style="dim")
    if vd.advice:
        t.append(f"\n{lk.glyphs.arrow} {clean(vd.advice[0])}")
    if vd.command and not vd.healthy:
        t.append(f"\n$ {fit_command(clean(vd.command), width - 2, lk.glyphs.ellipsis)}", style="italic")
    return t


def command(v: View | None, gpu: int) -> str | None:
    """What `c` copies: the command of the verdict on screen (verdict_text's last line), whole."""
    vd = v.verdicts.get(gpu) if v is not None else None
    # the same condition as verdict_text's `$` line: a healthy verdict shows no command, so none is copied
    return clean(vd.command) if vd is not None and vd.command and not vd.healthy else None


CORES_MIN = 8  # cells of the per-core bar before iowait and load give way to it


def cpu_line(h: HostSample, width: int, lk: Look = DEFAULT) -> Text:
    """The host's CPU line in ``width`` cells, never wrapped (at 80x24 its load went to a line of its
    own): the mean, the per-core bar, iowait, load. Load gives way first, then iowait, while the bar
    would get fewer than CORES_MIN cells; with more cores than cells a cell shows the busiest of its
    cores (a saturated main thread's core stays in sight)."""
    pct = h.cpu_pct or (0.0,)
    head = f"CPU {sum(pct) / len(pct):3.0f}% "
    tails = [f" iowait {h.iowait_pct:.0f}%", f"  load {h.load[0]:.1f}"]
    room = width - len(head) - 2 - sum(map(len, tails))
    while tails and room < min(len(pct), CORES_MIN):
        room += len(tails.pop())
    n = max(1, min(len(pct), room))
    busiest = [max(pct[i * len(pct) // n : (i + 1) * len(pct) // n]) for i in range(n)]
    t = Text(head, style="bold")
    t.append(f"[{''.join(lk.glyphs.blocks[min(8, round(c / 12.5))] for c in busiest)}]", style="yellow")
    return t.append("".join(tails))


def host_text(
    h: HostSample | None, caps: tuple[Capability, ...], perf: tuple, lk: Look = DEFAULT, width: int = 1000
) -> Text:
    """The host panel, one screen line per line (the panel cuts the others; the CPU line is fitted to
    ``width``)."""
    t = Text()
    if h is None:
        return Text(f"host: waiting{lk.glyphs.ellipsis}", style="dim")
    t.append_text(cpu_line(h, width, lk))
    t.append("\n")
    t.append(
        f"mem {h.mem_used / 2**30:.1f}/{h.mem_total / 2**30:.1f}G  swap {h.swap_used / 2**30:.1f}/"
        f"{h.swap_total / 2**30:.1f}G\n"
    )
    if len(h.numa) > 1:
        for n in h.numa:
            t.append(
                f"node{n.node} cpus {clean(n.cpus, 40)} free {n.mem_free / 2**30:.0f}G "
                f"miss/s {n.miss_rate:.0f} other/s {n.other_node_rate:.0f}\n"
            )
        arrow = lk.glyphs.arrow
        gnodes = ", ".join(
            f"GPU{i}{arrow}node{n}" if n >= 0 else f"GPU{i}{arrow}?" for i, n in enumerate(h.gpu_nodes)
        )
        t.append(f"{gnodes}\n", style="dim")
    else:
        t.append(f"NUMA: {len(h.numa)} node {lk.glyphs.dash} placement n/a\n", style="dim")
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


def top_frame(s: StackSample | None, width: int, ellipsis: str = "…") -> str:
    """The main thread's top user frame as `function file:line`, fitted to `width` (the file name
    keeps its line number; a long function name is cut first)."""
    if s is None:
        return ""
    if s.main is None or not s.main.frames:
        return clean(f"stacks: {s.error}", width) if s.error else ""
    fr = user_frame(s.main.frames) or s.main.frames[0]
    func = clean(fr.name)
    loc = clean(f"{fr.file.rsplit('/', 1)[-1]}:{fr.line}")
    text = f"{func} {loc}"
    if len(text) <= width:
        return text
    room = width - len(loc) - 1
    if room >= len(ellipsis) + 3:
        return func[: room - len(ellipsis)] + ellipsis + " " + loc
    return text[: max(width - len(ellipsis), 0)] + ellipsis


# the process table's orders (`o` cycles them): "" is the collector's (each process, then its workers)
PROC_ORDERS = ("", "GPU memory", "CPU", "phase", "PID", "GPU SM")


def proc_sm(f: Frame) -> dict[int, float]:
    """pid -> the share of time its kernels ran (the driver's per-process SM %), summed over its GPUs;
    a process the driver gave no figure for is absent."""
    out: dict[int, float] = {}
    for g in f.gpus:
        for u in g.proc_util:
            if u.sm is not None:
                out[u.pid] = out.get(u.pid, 0.0) + u.sm
    return out


def proc_labels(v: View, p: ProcSample) -> tuple[Label, ...] | None:
    """A GPU process's labels: its job's own where its GPU is shared by jobs (memtop.analysis.jobshare), else
    its (first) GPU's."""
    if not p.gpus:
        return None
    key = job_of_pid(v.jobs, p.pid)
    for g in p.gpus:
        if key is not None and key in v.job_labels.get(g, {}):
            return v.job_labels[g][key]
    return v.labels.get(p.gpus[0])


def job_lines(v: View, gpu: int) -> list[str]:
    """The jobs sharing a GPU, each with its own phase now and its SM share (memtop.analysis.jobshare): the GPU
    detail's "jobs" lines; none where one job (or none) holds the GPU."""
    g = v.frame.gpu(gpu) if v.frame is not None else None
    out = []
    for key, labs in v.job_labels.get(gpu, {}).items():
        job = v.jobs[key]
        name, settling = now_label(labs)
        sm = sum((u.sm or 0.0) for u in g.proc_util if u.pid in job.pids) if g is not None else None
        share = f", SM {sm:.0f} %" if sm is not None and g is not None and g.proc_util else ""
        out.append(f"{clean(job.title, 80)}: {name}{'?' if settling else ''}{share}")
    return out


def _phase_of(v: View, p: ProcSample) -> str:
    labs = proc_labels(v, p)
    return now_label(labs)[0] if labs else ""


def gpu_proc_text(g: GpuSample, pid: int) -> str:
    """A GPU's process with its share of the GPU: "1234 (SM 62%, mem 31%)", the encoder and decoder
    only when they worked."""
    u = g.util_of(pid)
    parts = (
        [
            f"{name} {v:.0f}%"
            for name, v in (("SM", u.sm), ("mem", u.mem), ("enc", u.enc), ("dec", u.dec))
            if v is not None and (v > 0 or name in ("SM", "mem"))
        ]
        if u
        else []
    )
    return f"{pid} ({', '.join(parts)})" if parts else str(pid)


def shown_procs(v: View, order: str = "", match: str = "", reverse: bool = False) -> list[ProcSample]:
    """The frame's processes in ``order`` (PROC_ORDERS; the largest first, PID and phase A-Z;
    ``reverse`` turns it round), those whose PID, user, name, command line or phase hold ``match``."""
    f = v.frame
    if f is None or f.host is None:
        return []
    procs = list(f.host.procs)
    if match:
        m = match.lower()
        procs = [
            p
            for p in procs
            if m
            in f"{p.pid} {p.user} {p.name} {p.cmdline} {_phase_of(v, p)} {job_short(f.job_of(p.pid))}".lower()
        ]
    if order == "GPU memory":
        mem = {p.pid: p.used_memory or 0 for g in f.gpus for p in g.processes}
        procs.sort(key=lambda p: (-mem.get(p.pid, 0), p.pid))
    elif order == "CPU":
        procs.sort(key=lambda p: (-p.cpu_pct, p.pid))
    elif order == "phase":
        procs.sort(key=lambda p: (_phase_of(v, p) or "~", p.pid))  # (no phase: last)
    elif order == "PID":
        procs.sort(key=lambda p: p.pid)
    elif order == "GPU SM":
        sm = proc_sm(f)
        procs.sort(key=lambda p: (-sm.get(p.pid, -1.0), p.pid))
    return procs[::-1] if reverse else procs


def proc_rows(
    v: View,
    lk: Look = DEFAULT,
    top_w: int = TOP_FRAME[1],
    order: str = "",
    match: str = "",
    reverse: bool = False,
) -> list[tuple[str, tuple]]:
    f = v.frame
    if f is None or f.host is None:
        return []
    gpu_mem = {p.pid: p.used_memory for g in f.gpus for p in g.processes}
    sm = proc_sm(f)
    stacks = v.stacks
    rows = []
    for p in shown_procs(v, order, match, reverse):
        mem = gpu_mem.get(p.pid)
        p_sm = sm.get(p.pid)
        labs = proc_labels(v, p)
        rows.append(
            (
                str(p.pid),
                (
                    str(p.pid),
                    clean(p.user, 8),
                    ",".join(map(str, p.gpus)) or "-",
                    "-" if mem is None else f"{mem / 2**30:.1f}G",
                    "-" if p_sm is None else f"{p_sm:.0f}",
                    f"{p.cpu_pct:.0f}",
                    phase_cell(labs, lk) if labs else Text("-"),
                    top_frame(stacks.get(p.pid), top_w, lk.glyphs.ellipsis),
                    str(p.threads),
                    clean(p.state, 2),
                    "worker" if p.worker_of else "main",
                    clean(p.placement, 5),
                    job_short(f.job_of(p.worker_of or p.pid)),
                ),
            )
        )
    return rows


def window_text(ev: Evidence | None, lk: Look = DEFAULT) -> Text:
    """The classifier's sliding-window view of the main thread: class shares, GIL share."""
    t = Text()
    if not ev or not ev.stack_shares:
        return t
    # shares in steps of 10 %: a steadier line repaints (and costs bytes) less often
    t.append(f"last {STACK_WINDOW_S:.0f} s: ", style="dim")
    for k, share in sorted(ev.stack_shares, key=lambda kv: -kv[1]):
        if round(10 * share):  # (not "idle 0%")
            t.append(f"{clean(k, 12)} {10 * round(10 * share)}% ", style=lk.stack_class(k))
    t.append(f"{lk.glyphs.sep} GIL held {10 * round(10 * ev.gil)}%\n", style="dim")
    return t


def stacks_text(
    s: StackSample | None,
    caps: tuple[Capability, ...],
    pid: int | None,
    window: Evidence | None = None,
    lk: Look = DEFAULT,
    any_procs: bool = True,
    now: float | None = None,
    depth: int = 4,
    live: bool = True,
    failed: bool = False,
) -> Text:
    """The selected process's threads; `now` (the frame's time) dates an older stack: one the pipeline
    holds for a moment when the frame's read failed (``failed``), or one of a process dumped less often
    (a saturated GPU's, a settled sync's); ``live``: not a recording (whose processes no
    flag can pick)."""
    if pid is None or not any_procs:  # (a process selected before it exited is not one to show)
        if not any_procs:
            return Text(
                "no watched process: stacks show here once a GPU process runs, or pick one with "
                "`memtop --pid PID`"
                if live
                else "no GPU process at this point of the recording: stacks show here while one runs",
                style="dim",
            )
        return Text("select a process to see its Python stacks", style="dim")
    if s is None or not s.threads:
        cap = next((c for c in caps if c.source == "stacks" and c.name == f"pid {pid}" and not c.ok), None)
        if cap is not None:
            return Text(
                f"stacks of {pid} unavailable: {clean(cap.detail)}"
                + (f"\nfix: {clean(cap.fix)}" if cap.fix else ""),
                style="yellow",
            )
        return Text(f"no stack sample for {pid} yet", style="dim")
    t = window_text(window, lk)
    if now is not None and now - s.t >= 1.0:  # a stack dumped every 2 s (saturated GPU) is this old too
        t.append(
            f"stack from {now - s.t:.1f} s ago{': the newest read failed' if failed else ''}\n", style="dim"
        )
    if s.native:
        t.append("native dump (on request)\n", style="bold")
    _threads(t, s, lk, depth)
    return t


def native_text(s: StackSample, lk: Look, ascii_only: bool = False) -> Text:
    """A --native dump whole (every thread, every frame), for its own scrolling screen."""
    arrows = "up/down" if ascii_only else "↑/↓"
    t = Text(f"Native stack dump of {s.pid}", style="bold")
    t.append(
        f"  ({counted(len(s.threads), 'thread')}, leaf first; {arrows} scroll, esc closes)\n\n", style="dim"
    )
    _threads(t, s, lk, NATIVE_DEPTH)
    return t


def _threads(t: Text, s: StackSample, lk: Look, depth: int) -> None:
    """Each thread of ``s``, the main one first, its ``depth`` innermost frames."""
    for th in sorted(s.threads, key=lambda th: (th.tid != s.pid, not th.active)):
        color = lk.stack_class(th.klass)
        t.append(f"{clean(th.name, 60)} ({th.tid}) ", style="bold")
        t.append(clean(th.klass, 12), style=color + _BOLD)
        # (a thread of class idle is idle: "idle idle" said it twice)
        state = " active" if th.active else ("" if th.klass == "idle" else " idle")
        t.append(f"{state}{' GIL' if th.owns_gil else ''}\n", style="dim")
        for fr in th.frames[:depth]:
            t.append(
                f"  {clean(fr.name, 80)} {clean(fr.file.rsplit('/', 1)[-1], 60)}:{fr.line}",
                style=color if fr is th.frames[0] else "",
            )
            if fr.code and fr is th.frames[0]:
                t.append(f"  {clean(fr.code, 60)}", style="italic")
            t.append("\n")


def unheld(caps: tuple[Capability, ...], stacks: Mapping[int, StackSample]) -> tuple[Capability, ...]:
    """The capabilities to list: a failed stack read is left out while a good stack of that process
    stands in for it (the pipeline holds one for STACK_HOLD_S). Stack capabilities are named
    "pid N", as stacks_text looks them up."""
    held = {f"pid {pid}" for pid, s in stacks.items() if s.threads}
    return tuple(c for c in caps if not (c.source == "stacks" and c.name in held))


def caps_text(
    caps: tuple[Capability, ...], notes: tuple[str, ...] = (), lk: Look = DEFAULT, missing: str = ""
) -> Text:
    """Faults seen during the run, the evidence the selected GPU's labels lack and what it costs,
    then what is unavailable (with the fix)."""
    t = Text()
    for n in notes[-5:]:
        t.append(f"fault: {clean(n, 300)}\n", style="bold red")
    if missing:
        t.append(f"{clean(missing, 300)}\n", style="bold yellow")
    for c in caps:
        if c.ok:
            continue
        t.append(f"{clean(c.source, 20)} {clean(c.name, 40)}: {clean(c.detail, 300)}", style="yellow")
        if c.fix:
            t.append(f" {lk.glyphs.dash} {clean(c.fix, 300)}", style="dim")
        t.append("\n")
    return t
