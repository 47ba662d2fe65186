"""The Textual app. It renders Views from a Pipeline; it never calls NVML, psutil or py-spy."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual.filter import Monochrome, NoColor
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from memtop.errors import UserError
from memtop.metrics import METRICS
from memtop.metrics import fmt as metric_fmt
from memtop.pipeline import Pipeline, View
from memtop.sanitize import clean

from . import format as fmt
from .palette import AsciiFilter, Look, look
from .table import RowTable
from .tiles import TextPanel
from .timeline import Timeline

HELP = """\
[b]memtop[/b] — is the GPU busy, and if not, what is it waiting for?

[b]Keys[/b]
  q          quit                      ?        this help
  g / G      next / previous GPU       enter    GPU detail
  z / Z      zoom timeline in / out    tab      move focus (GPUs, processes)
  ctrl+p     command palette (themes)
[b]Replay[/b]
  N          one native (C/C++) stack dump of the selected process (live; pauses it ~45 ms)
  space      pause / resume            ← / →    seek 10 s back / forward
  n          next phase change         + / -    faster / slower
  home       back to the start

[b]Phases[/b] (timeline band, per GPU, 0.5 s bins)
  compute  GPU busy with real kernels (healthy)     memory   DRAM-bandwidth bound kernels
  transfer PCIe copies dominate (DMA or pageable)   sync     CPU and GPU take turns at a sync
  input    waiting on the DataLoader                cpu      launch/Python overhead starves the GPU
  idle     nothing running on the GPU

Evidence for each label is the numbers that fired the rule plus the top Python stack.
Press any key to close."""


class Refresh(Message):
    """Posted from the pipeline's thread at the paint rate; only the newest matters."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Refresh)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = (
        "HelpScreen { align: center middle; } HelpScreen > Static { width: 90; max-width: 100%; "
        "height: auto; max-height: 100%; border: round $accent; padding: 1 2; background: $surface; }"
    )

    def compose(self) -> ComposeResult:
        yield Static(HELP)

    def on_key(self) -> None:
        self.dismiss()


class GpuDetail(ModalScreen[None]):
    DEFAULT_CSS = (
        "GpuDetail { align: center middle; } GpuDetail > Vertical { width: 100%; height: 100%; "
        "border: round $accent; background: $surface; } GpuDetail Timeline { height: 8; }"
    )
    BINDINGS = [Binding("escape,q,enter", "dismiss", "back")]

    def __init__(self, view: View, gpu: int, ascii_only: bool) -> None:
        super().__init__()
        self.view, self.gpu, self.ascii_only = view, gpu, ascii_only

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(id="detail")
            yield Timeline(self.ascii_only, id="detail-timeline")

    def on_mount(self) -> None:
        self.query_one(Timeline).show(self.view, self.gpu)
        lk = look(self.app.current_theme, self.ascii_only)
        # a Rich Text, never a markup string: names and stacks come from recordings and processes
        self.query_one("#detail", Static).update(detail_text(self.view, self.gpu, lk))


def detail_text(view: View, gpu: int, lk: Look) -> Text:
    """Every metric of the table with its unit (memtop.metrics), the link, the verdict, recent gaps."""
    g = view.frame.gpu(gpu) if view.frame else None
    t = Text()
    t.append(f"GPU {gpu}", style="bold")
    if g is None:
        t.append("  no sample yet", style="dim")
        return t
    t.append(f"  {clean(g.name, 60)}  uuid {clean(g.uuid, 60)}  mode {clean(g.mode, 10)}\n", style="dim")
    for m in METRICS:
        if m.kind == "bitmask":
            continue  # clock events: shown as throttle reasons below
        t.append(f"  {m.title:<14}", style="bold")
        t.append(f"{metric_fmt(m, getattr(g, m.name)):>12}")
        t.append(f"  {m.help}\n", style="dim")
    if g.link:
        t.append(
            f"  {'PCIe link':<14}Gen{g.link.gen} x{g.link.width} (max Gen{g.link.max_gen} "
            f"x{g.link.max_width}) {g.link.bytes_per_s / 1e9:.1f} GB/s"
        )
        t.append("  DOWN-TRAINED" if g.link.downtrained else "", style="bold red")
        t.append("\n")
    t.append(f"  {'throttle':<14}{', '.join(g.throttle_reasons) or 'none'}\n")
    pids = ", ".join(str(p.pid) for p in g.processes) or "none"
    t.append(f"  {'processes':<14}{pids}\n")
    vd = view.verdicts.get(gpu)
    if vd:
        t.append("\n")
        t.append_text(fmt.headline(view, gpu, lk))
        t.append("\n" + clean(vd.evidence) + "\n", style="dim")
        for a in vd.advice:
            t.append(f"{lk.glyphs.arrow} {clean(a)}\n")
        if vd.command:
            t.append(f"$ {clean(vd.command)}\n", style="italic")
    for gp in [gp for gp in view.gaps if gp["gpu"] == gpu][-5:]:
        st = gp.get("stack") or {}
        t.append(
            f"  gap {gp['duration_s']} s: {clean(st.get('class', '?'), 12)} at {clean(st.get('where', '?'), 80)}\n"
        )
    return t


class MemtopApp(App[int]):
    CSS_PATH = "memtop.tcss"
    TITLE = "memtop"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("g", "gpu(1)", "next GPU"),
        Binding("G", "gpu(-1)", "prev GPU", show=False),
        Binding("z", "zoom(0.5)", "zoom in"),
        Binding("Z", "zoom(2)", "zoom out", show=False),
        Binding("space", "pause", "pause", show=False, priority=True),
        Binding("left", "seek(-10)", "-10s", show=False, priority=True),
        Binding("right", "seek(10)", "+10s", show=False, priority=True),
        Binding("n", "next_phase", "next phase", show=False),
        Binding("plus,equals_sign", "speed(2)", "faster", show=False),
        Binding("minus", "speed(0.5)", "slower", show=False),
        Binding("home", "restart", "start", show=False, priority=True),
        Binding("N", "native", "native stack", show=False),
        Binding("c", "copy_command", "copy command"),
        Binding("l", "letters", "phase letters", show=False),
    ]

    def __init__(
        self,
        pipeline: Pipeline,
        controller: Any = None,
        paint_rate: float = 1.0,
        ascii_only: bool = False,
        theme: str | None = None,
        hangup_guard: bool = True,
        no_color: bool = False,
    ) -> None:
        super().__init__()
        # no-color.org: NO_COLOR set and non-empty means no colour (Textual also takes an empty one as
        # set); --no-color the same. The environment is left as it is: children inherit it unchanged.
        want = no_color or bool(os.environ.get("NO_COLOR"))
        if want != self.no_color and isinstance(getattr(self, "_filters", None), list):
            self.no_color = want
            self._filters[:] = [f for f in self._filters if not isinstance(f, (Monochrome, NoColor))]
            if want:
                self._filters.append(NoColor() if self.native_ansi_color else Monochrome())
        # --ascii: everything drawn, Textual's own widgets included, one ASCII character a cell; the
        # filter list is a private Textual name (without it only memtop's own glyphs are ASCII)
        if ascii_only and isinstance(getattr(self, "_filters", None), list):
            self._filters.append(AsciiFilter())
        self.pipeline = pipeline
        self.controller = controller  # a ReplaySource (replay/demo) or None (live)
        self.paint_rate = paint_rate
        self.ascii_only = ascii_only
        self.hangup_guard = hangup_guard
        name = theme or "ansi-dark"
        if name not in self.available_themes:
            raise UserError(f"unknown theme {name!r}; themes: {', '.join(sorted(self.available_themes))}")
        # before the first CSS pass: setting it in on_mount re-applies all CSS (~0.1 s of start-up)
        self.theme = name
        self.gpu = 0
        self.view: View | None = None
        self.selected_pid: int | None = None
        self._paints = 0
        self._letters = False  # phase letters in the bands (`l`)
        self._laid_out: tuple | None = None  # (GPU count, screen size) the layout was made for

    def get_driver_class(self) -> type[Driver]:
        """Textual's terminal driver, but with an input thread that sleeps until a key comes."""
        cls = super().get_driver_class()
        if cls.__name__ != "LinuxDriver":  # TEXTUAL_DRIVER set, or Windows
            return cls
        try:
            from .driver import QuietLinuxDriver
        except ImportError:  # it uses private Textual names; a Textual without them gets its own driver
            return cls
        return QuietLinuxDriver

    def compose(self) -> ComposeResult:
        # tiles where values change every second; a panel that rarely changes needs one
        ellipsis = "..." if self.ascii_only else "…"
        yield TextPanel(tiles=4, id="header", ellipsis=ellipsis)
        yield TextPanel(tiles=6, id="verdict", ellipsis=ellipsis)  # one line each: headline to command
        yield RowTable(fmt.GPU_COLUMNS, id="gpus")
        yield Timeline(self.ascii_only, id="timeline")
        with Horizontal(id="bottom"):
            with Vertical(id="left"):
                yield TextPanel(tiles=4, id="host")
                yield RowTable((*fmt.PROC_COLUMNS, fmt.TOP_FRAME, *fmt.PROC_TAIL), id="procs")
            with VerticalScroll(id="right"):
                yield TextPanel(tiles=3, id="stacks")
                yield TextPanel(tiles=1, id="caps")
        yield Footer()

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._new_theme)  # phase colours are per theme
        self.pipeline.paint_interval = 1.0 / self.paint_rate
        self.pipeline.on_tick = lambda: self.post_message(Refresh())
        if self.controller is not None:  # after the first paint: the first frame shows at once
            self.call_after_refresh(self.controller.start)
        self.set_interval(1.0 / self.paint_rate, self._paint)  # also paints when no frames come
        if self.hangup_guard:
            self.set_interval(2.0, self._check_terminal)
            try:
                import asyncio

                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._hangup)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        self._paint()
        self.call_after_refresh(self._relayout)

    def on_unmount(self) -> None:
        if self.controller is not None:
            self.controller.stop()

    def _check_terminal(self) -> None:
        """After an SSH hang-up some TUIs spin; leave instead."""
        try:
            alive = os.isatty(sys.__stdin__.fileno()) and os.getppid() != 1
        except (ValueError, OSError, AttributeError):
            alive = False
        if not alive:
            self._hangup()

    def _hangup(self) -> None:
        """The terminal is gone: leave cleanly, but never later than 3 s (restoring a dead
        terminal or joining busy threads must not keep memtop alive; a recording loses at
        most its last second, as after a kill)."""
        timer = threading.Timer(3.0, os._exit, args=(0,))
        timer.daemon = True
        timer.start()
        self.exit(0)

    @on(Refresh)
    def _on_refresh(self) -> None:
        self._paint()

    def _new_theme(self, _theme: object) -> None:
        self.view = None
        self._paint()

    @property
    def look(self) -> Look:
        return look(self.current_theme, self.ascii_only, self._letters)

    def on_resize(self) -> None:
        self.call_after_refresh(self._relayout)  # after the layout: the panels' new widths are known

    def _relayout(self) -> None:
        if self.view is not None:
            self._layout(self.view)
            self._update_procs(self.view)

    def _layout(self, v: View) -> None:
        """Where the screen has room (40 rows and more), the timeline gets one phase band per GPU
        and the GPU table all its rows; on smaller screens one band and a scrolling table."""
        self._laid_out = (len(v.history), self.size)
        n = max(1, len(v.history))
        h = self.size.height
        roomy = h >= 32 and n > 1
        tl = self.query_one(Timeline)
        tl.set_all_bands(roomy)
        tl.styles.height = tl.rows_wanted(v, roomy)
        self.query_one("#gpus", RowTable).styles.max_height = n + 1 if h >= 32 else max(2, min(n + 1, h // 5))

    def _set(self, selector: str, content) -> None:
        """A panel re-sends only the tiles of its lines whose cells changed (tiles.py)."""
        self.query_one(selector, TextPanel).update(content)

    def _paint(self) -> None:
        p = self.pipeline
        # the paint timer and a frame's Refresh often both come in one interval: building a View
        # (copies of the history, a verdict per GPU) only to find it unchanged was half the UI's cost
        if self.view is not None and p.version == self.view.version and p.status == self.view.status:
            return
        v = p.view()
        full = self.view is None  # forced (GPU switch, first paint): everything now
        self.view = v
        self._paints += 1
        # Verdict, header and GPU rows follow every paint; the wide, slow-moving panels every
        # second paint. Textual re-sends whole widget lines, so this halves their bytes.
        slow = full or self._paints % 2 == 0
        gpus = sorted(v.history) or [0]
        if self.gpu not in gpus:
            self.gpu = gpus[0]
        lk = self.look
        with self.batch_update():
            self._set("#header", fmt.header(v, lk))
            self._set("#verdict", fmt.verdict_text(v, self.gpu, lk))
            self._update_gpus(v, lk)
            # the row's phase, the headline's "now" and the band's newest cell name one label: the
            # band follows every paint too (its tiles send only the cells that changed)
            if (len(v.history), self.size) != self._laid_out:
                self._layout(v)
            self.query_one(Timeline).show(v, self.gpu, bands_only=not slow)
            if not slow:
                return
            f = v.frame
            self._set(
                "#host",
                fmt.host_text(f.host if f else None, f.caps if f else (), f.perf if f else (), lk),
            )
            self._update_procs(v, lk)
            self._update_stacks(v, lk)
            self._set("#caps", fmt.caps_text(f.caps if f else (), f.notes if f else (), lk))

    def _update_gpus(self, v: View, lk: Look) -> None:
        f = v.frame
        rows = [(str(g.index), fmt.gpu_row(g, v.labels.get(g.index), lk)) for g in (f.gpus if f else ())]
        self.query_one("#gpus", RowTable).set_rows(rows)

    def _update_procs(self, v: View, lk: Look | None = None) -> None:
        table = self.query_one("#procs", RowTable)
        # the top frame takes the width the left column has (at least 24 cells; columns after the
        # table's edge are cut, the least useful last)
        fixed = sum(w + 1 for _, w in (*fmt.PROC_COLUMNS, *fmt.PROC_TAIL)) + 1
        top_w = max(fmt.TOP_FRAME[1], self.query_one("#left").size.width - fixed)
        table.set_width(len(fmt.PROC_COLUMNS), top_w)
        rows = fmt.proc_rows(v, lk or self.look, top_w)
        table.set_rows(rows)
        if self.selected_pid is None and rows:
            self.selected_pid = int(rows[0][0])

    def _update_stacks(self, v: View, lk: Look | None = None) -> None:
        f = v.frame
        s = next((s for s in f.stacks if s.pid == self.selected_pid), None) if f else None
        labs = None
        if f is not None and f.host is not None:
            gpus = next((p.gpus or () for p in f.host.procs if p.pid == self.selected_pid), ())
            labs = v.labels.get(gpus[0]) if gpus else None
        window = labs[-1].evidence if labs else None
        procs = bool(f is not None and f.host is not None and f.host.procs)
        self._set(
            "#stacks",
            fmt.stacks_text(s, f.caps if f else (), self.selected_pid, window, lk or self.look, procs),
        )

    @on(RowTable.Highlighted, "#procs")
    def _proc_selected(self, ev: RowTable.Highlighted) -> None:
        self.selected_pid = int(ev.key)
        if self.view is not None:
            self._update_stacks(self.view)

    @on(RowTable.Highlighted, "#gpus")
    def _gpu_highlighted(self, ev: RowTable.Highlighted) -> None:
        if int(ev.key) != self.gpu:
            self.gpu = int(ev.key)
            self.view = None
            self._paint()

    @on(RowTable.Selected, "#gpus")
    def _gpu_selected(self, ev: RowTable.Selected) -> None:
        if self.view is not None:
            self.push_screen(GpuDetail(self.view, self.gpu, self.ascii_only))

    def action_copy_command(self) -> None:
        """The next profiler command, whole: to the clipboard (OSC 52) and in a notification."""
        cmd = fmt.command(self.view, self.gpu)
        if cmd is None:
            self.notify("no profiler command for this GPU yet", markup=False)
            return
        self.copy_to_clipboard(cmd)
        self.notify(cmd, title="copied (OSC 52)", timeout=15, markup=False)

    def action_letters(self) -> None:
        self._letters = not self._letters
        self.query_one(Timeline).set_letters(self._letters)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_gpu(self, step: int) -> None:
        gpus = sorted(self.view.history) if self.view else []
        if gpus:
            self.gpu = gpus[(gpus.index(self.gpu) + step) % len(gpus)] if self.gpu in gpus else gpus[0]
            table = self.query_one("#gpus", RowTable)
            if str(self.gpu) in table.keys:
                table.move_cursor(table.keys.index(str(self.gpu)))
            self.view = None
            self._paint()

    def action_zoom(self, factor: float) -> None:
        self.query_one(Timeline).zoom(factor)

    def action_pause(self) -> None:
        if self.controller is not None:
            self.controller.toggle_pause()

    def action_seek(self, delta: float) -> None:
        if self.controller is not None:
            self.controller.seek(self.controller.position + delta)

    def action_restart(self) -> None:
        if self.controller is not None:
            self.controller.seek(0.0)

    def action_next_phase(self) -> None:
        if self.controller is not None:
            t = self.controller.next_change()
            if t is not None:
                self.controller.seek(t)
            else:
                self.notify("no later phase change in what has been read")

    def action_native(self) -> None:
        """A one-off py-spy --native dump of the selected process (live only; done by the sampler)."""
        ask = getattr(self.controller, "request_native", None)
        if self.selected_pid is None or ask is None or not ask(self.selected_pid):
            self.notify("native stacks: live runs with stack sampling only")
        else:
            self.notify(f"native dump of {self.selected_pid} requested (pauses it ~45 ms)")

    def action_speed(self, factor: float) -> None:
        if self.controller is not None:
            self.controller.set_speed(self.controller.speed * factor)
