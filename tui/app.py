"""The Textual app. It renders Views from a Pipeline; it never calls NVML, psutil or py-spy."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from memtop.errors import UserError
from memtop.pipeline import Pipeline, View

from . import format as fmt
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
        g = self.view.frame.gpu(self.gpu) if self.view.frame else None
        lines = [f"GPU {self.gpu}"]
        if g is not None:
            for k in (
                "name",
                "uuid",
                "mode",
                "util",
                "mem_util",
                "graphics",
                "sm",
                "occupancy",
                "tensor",
                "dram",
                "pcie_rx",
                "pcie_tx",
                "nvlink_rx",
                "nvlink_tx",
                "power_w",
                "temp_c",
                "sm_clock",
                "mem_clock",
                "mem_used",
                "mem_total",
            ):
                lines.append(f"  {k:<10} {getattr(g, k)}")
            if g.link:
                lines.append(
                    f"  link       Gen{g.link.gen} x{g.link.width} (max Gen{g.link.max_gen} "
                    f"x{g.link.max_width}) {g.link.bytes_per_s / 1e9:.1f} GB/s"
                    + ("  DOWN-TRAINED" if g.link.downtrained else "")
                )
            lines.append(f"  throttle   {', '.join(g.throttle_reasons) or 'none'}")
            lines.append(f"  processes  {', '.join(str(p.pid) for p in g.processes) or 'none'}")
        vd = self.view.verdicts.get(self.gpu)
        if vd:
            lines += ["", vd.headline, vd.evidence, *("→ " + a for a in vd.advice), "$ " + vd.command]
        gaps = [gp for gp in self.view.gaps if gp["gpu"] == self.gpu][-5:]
        for gp in gaps:
            st = gp.get("stack") or {}
            lines.append(f"  gap {gp['duration_s']} s: {st.get('class', '?')} at {st.get('where', '?')}")
        self.query_one("#detail", Static).update("\n".join(lines))


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
    ]

    def __init__(
        self,
        pipeline: Pipeline,
        controller: Any = None,
        paint_rate: float = 1.0,
        ascii_only: bool = False,
        theme: str | None = None,
        hangup_guard: bool = True,
    ) -> None:
        super().__init__()
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
        yield TextPanel(tiles=4, id="header")
        yield TextPanel(tiles=6, id="verdict")
        yield RowTable(fmt.GPU_COLUMNS, id="gpus")
        yield Timeline(self.ascii_only, id="timeline")
        with Horizontal(id="bottom"):
            with Vertical(id="left"):
                yield TextPanel(tiles=4, id="host")
                yield RowTable(fmt.PROC_COLUMNS, id="procs")
            with VerticalScroll(id="right"):
                yield TextPanel(tiles=3, id="stacks")
                yield TextPanel(tiles=1, id="caps")
        yield Footer()

    def on_mount(self) -> None:
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
        with self.batch_update():
            self._set("#header", fmt.header(v))
            self._set("#verdict", fmt.verdict_text(v, self.gpu))
            self._update_gpus(v)
            if not slow:
                return
            self.query_one(Timeline).show(v, self.gpu)
            f = v.frame
            self._set(
                "#host",
                fmt.host_text(
                    f.host if f else None, f.caps if f else (), f.perf if f else (), self.ascii_only
                ),
            )
            self._update_procs(v)
            self._update_stacks(v)
            self._set("#caps", fmt.caps_text(f.caps if f else (), f.notes if f else ()))

    def _update_gpus(self, v: View) -> None:
        f = v.frame
        rows = []
        for g in f.gpus if f else ():
            labs = v.labels.get(g.index)
            rows.append((str(g.index), fmt.gpu_row(g, labs[-1].label if labs else "warmup")))
        self.query_one("#gpus", RowTable).set_rows(rows)

    def _update_procs(self, v: View) -> None:
        rows = fmt.proc_rows(v)
        self.query_one("#procs", RowTable).set_rows(rows)
        if self.selected_pid is None and rows:
            self.selected_pid = int(rows[0][0])

    def _update_stacks(self, v: View) -> None:
        f = v.frame
        s = next((s for s in f.stacks if s.pid == self.selected_pid), None) if f else None
        labs = None
        if f is not None and f.host is not None:
            gpus = next((p.gpus or () for p in f.host.procs if p.pid == self.selected_pid), ())
            labs = v.labels.get(gpus[0]) if gpus else None
        window = labs[-1].evidence if labs else None
        self._set("#stacks", fmt.stacks_text(s, f.caps if f else (), self.selected_pid, window))

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
