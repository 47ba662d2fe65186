"""The Textual app. It renders Views from a Pipeline; it never calls NVML, psutil or py-spy.

Keys are one table (KEYS): the footer, the help screen and check_action all read it, so a mode
shows only the keys that do something there. Replay drives a Playback; live has its own pause
(the Pipeline freezes the view while sampling and recording go on).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual.filter import Monochrome, NoColor
from textual.message import Message
from textual.notifications import Notification, Notify
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from memtop.analysis.phases import MEANINGS
from memtop.core.errors import UserError
from memtop.core.metrics import METRICS
from memtop.core.metrics import fmt as metric_fmt
from memtop.core.sanitize import clean
from memtop.core.timefmt import clock, parse_clock
from memtop.live.pipeline import Pipeline, View
from memtop.live.playback import Playback

from . import format as fmt
from .hardware import hardware_text
from .overview import Overview
from .palette import AsciiFilter, Look, look
from .table import RowTable
from .tiles import TextPanel, TiledLines
from .timeline import ROWS, Timeline

if TYPE_CHECKING:
    from memtop.commands.local import LiveController

SEEK_S = 10.0  # ←/→ in replay, and scrolling a paused live view
NATIVE_WAIT_S = 10.0  # `s`: a dump not back by then is given up on (py-spy's own limit is 2 s)
HOST_MAX = 8  # host lines at most (CPU, memory, NUMA, one perf line per process)
BOTTOM_MIN = 14  # rows kept for the host, processes and stacks before the timeline grows
MAX_SERIES_H = 4
LOOP_END_S = 1.0  # End in a looping replay: this much before its end, paused
VERDICT_H = 5  # now and the window, the verdict, its evidence, advice and command


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names, comma-separated
    action: str
    label: str  # footer
    help: str  # help screen
    modes: frozenset[str]  # live / replay (demo plays like replay)
    footer: bool = True
    priority: bool = False  # before a focused table (arrows, space, pages)
    shown: str = ""  # how the help spells the keys, when not the key names


LIVE, REPLAY = frozenset({"live"}), frozenset({"replay"})
BOTH = LIVE | REPLAY
KEYS = (
    Key("q", "quit", "quit", "quit (exit code 0)", BOTH),
    Key("ctrl+c", "quit", "quit", "quit", BOTH, footer=False, priority=True, shown="ctrl+c"),
    Key("question_mark", "help", "help", "this help (esc closes)", BOTH, shown="?"),
    Key("space", "pause", "pause", "pause / resume playback", REPLAY, priority=True),
    Key("space", "pause", "pause", "freeze the view (sampling and recording go on)", LIVE, priority=True),
    Key("left", "seek(-1)", "-10s", "seek 10 s back", REPLAY, footer=False, priority=True, shown="←"),
    Key("right", "seek(1)", "+10s", "seek 10 s forward", REPLAY, footer=False, priority=True, shown="→"),
    Key(
        "left", "seek(-1)", "back", "paused: 10 s further back", LIVE, footer=False, priority=True, shown="←"
    ),
    Key("right", "seek(1)", "fwd", "paused: 10 s nearer now", LIVE, footer=False, priority=True, shown="→"),
    Key("pageup", "page(-1)", "-1/10", "back a tenth of the run", REPLAY, footer=False, priority=True),
    Key("pagedown", "page(1)", "+1/10", "forward a tenth of the run", REPLAY, footer=False, priority=True),
    Key("home", "to_end(0)", "start", "to the start", REPLAY, footer=False, priority=True),
    Key("end", "to_end(1)", "end", "to the end", REPLAY, footer=False, priority=True),
    Key("t,colon", "jump", "go to", "go to a time (1:02:03, 62m, 3723)", REPLAY, shown="t / :"),
    Key("n", "change(1)", "phase", "next phase change", REPLAY),
    Key("N", "change(-1)", "prev phase", "previous phase change", REPLAY, footer=False),
    Key("plus,equals_sign", "speed(2)", "faster", "play faster", REPLAY, footer=False, shown="+"),
    Key("minus", "speed(0.5)", "slower", "play slower", REPLAY, footer=False, shown="-"),
    Key("g", "gpu(1)", "GPU", "next GPU", BOTH),
    Key("G", "gpu(-1)", "prev GPU", "previous GPU", BOTH, footer=False),
    Key("z", "zoom(0.5)", "zoom in", "zoom the timeline in", BOTH, footer=False),
    Key("Z", "zoom(2)", "zoom out", "zoom the timeline out", BOTH, footer=False),
    Key(
        "s",
        "native",
        "native stack",
        "one native (C/C++) stack dump of the selected process, shown whole when it comes (pauses it up to ~1 s)",
        LIVE,
        footer=False,
    ),
    Key(
        "o",
        "sort(1)",
        "sort",
        "sort the processes: GPU memory, CPU, phase, PID, GPU SM, as found",
        BOTH,
        footer=False,
    ),
    Key("O", "sort(-1)", "reverse", "reverse the processes' order", BOTH, footer=False),
    Key(
        "slash",
        "filter",
        "filter",
        "show only the processes whose PID, user, command or phase contain what you type",
        BOTH,
        footer=False,
        shown="/",
    ),
    Key(
        "k",
        "signal",
        "signal",
        "SIGTERM or SIGINT to the selected process (asks first; if you may)",
        LIVE,
        footer=False,
    ),
    Key(
        "c",
        "copy_command",
        "copy cmd",
        "copy the verdict's command (the $ line) whole (OSC 52) and show it",
        BOTH,
    ),
    Key("l", "letters", "letters", "phase letters in the timeline band on/off", BOTH, footer=False),
    Key(
        "x",
        "trace",
        "trace",
        "capture the framework's trace of the selected process (all ranks of its job) with memtop's"
        " tracks into one Perfetto file (a job started with `memtop run`)",
        LIVE,
    ),
)
_ACTIONS = {k.action.split("(")[0] for k in KEYS}

# the help box's text width in an 80-column terminal (border, padding and scrollbar take 6)
HELP_WIDTH = 74


PHASES_HELP = "\n".join(
    [
        "[b]Phases[/b] (timeline band, per GPU, 0.5 s bins)",
        *(
            escape(row)
            for name, text in [
                *MEANINGS.items(),
                # (format.now_label's "settling")
                ("phase?", "settling: the newest bins say another phase, shown once it has held"),
            ]
            for row in textwrap.wrap(f"  {name:<10} {text}", HELP_WIDTH, subsequent_indent=" " * 13)
        ),
        "",
        *textwrap.wrap(
            "Evidence for each label is the numbers that fired the rule plus the top Python stack.",
            HELP_WIDTH,
        ),
    ]
)


def _key_name(k: Key) -> str:
    return k.shown or " / ".join(x.replace("_", " ") for x in k.keys.split(","))


_ASCII = str.maketrans({"←": "left", "→": "right", "—": "-"})


def help_text(mode: str, enabled: Iterable[Key], ascii_only: bool = False) -> str:
    """The help of one mode: only its keys, then the phases."""
    text = _help_text(mode, enabled, ascii_only)
    return text.translate(_ASCII) if ascii_only else text


def _help_text(mode: str, enabled: Iterable[Key], ascii_only: bool) -> str:
    lines = [
        f"[b]memtop[/b] — is the GPU busy, and if not, what is it waiting for?  ({mode})",
        "",
        "[b]Keys[/b]",
    ]
    seen: set[tuple[str, str]] = set()
    for k in enabled:
        if (k.action, k.help) in seen:
            continue
        seen.add((k.action, k.help))
        name = _key_name(k).translate(_ASCII) if ascii_only else _key_name(k)  # padded as shown
        lines += _help_row(name, k.help)
    lines += [
        *_help_row("tab", "move focus (GPUs, processes); enter on a GPU: its detail"),
        *_help_row("ctrl+p", "command palette (themes, screenshot)"),
        "",
        "(arrows / page up / page down scroll this help; esc closes it)",
        "",
        PHASES_HELP,
    ]
    return "\n".join(lines)


def _help_row(name: str, text: str) -> list[str]:
    """A key and its text, wrapped under the text's column (a wrapped line at column 0 reads as a key)."""
    rows = textwrap.wrap(
        f"  {name:<12} {text}", HELP_WIDTH, subsequent_indent=" " * 15, break_on_hyphens=False
    )
    return [escape(r) for r in rows]


class Refresh(Message):
    """Posted from the pipeline's thread at the paint rate; only the newest matters."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Refresh)


class TraceNote(Message):
    """A capture's stage or outcome, posted from the tracer's thread (memtop.agent.tracer)."""

    def __init__(self, stage: str, line: str) -> None:
        super().__init__()
        self.stage = stage  # progress / warning / done / failed
        self.line = line


class LeftColumn(Vertical):
    """The host and process panels. The process table's top-frame column takes this column's width,
    known only once the screen is laid out: the app's own Resize comes before that."""

    class Resized(Message):
        def __init__(self, column: LeftColumn) -> None:
            super().__init__()
            self.column = column

    def on_resize(self) -> None:
        self.post_message(self.Resized(self))


class HelpScreen(ModalScreen[None]):
    """Scrolls (arrows, pages) and fits 80x24; esc, q or ? closes it."""

    DEFAULT_CSS = (
        "HelpScreen { align: center middle; } HelpScreen > VerticalScroll { width: 84; max-width: 100%; "
        "height: auto; max-height: 100%; border: round $accent; padding: 0 1; background: $surface; }"
        " HelpScreen Static { height: auto; }"
        " HelpScreen.-ascii > VerticalScroll { border: ascii $accent; scrollbar-size-vertical: 0; }"
    )
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "close"),
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "scroll(-10)", show=False),
        Binding("pagedown", "scroll(10)", show=False),
    ]

    def __init__(self, text: str | Text, ascii_only: bool = False) -> None:
        """``text``: the help's own markup, or a Rich Text where it shows strings from a process."""
        super().__init__(classes="-ascii" if ascii_only else "")
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text)

    def action_scroll(self, lines: int) -> None:
        box = self.query_one(VerticalScroll)
        box.scroll_to(y=box.scroll_y + lines, animate=False)


class JumpScreen(ModalScreen[float | None]):
    """Asks for a time in the run; returns seconds, or None (esc)."""

    DEFAULT_CSS = (
        "JumpScreen { align: center middle; } JumpScreen > Vertical { width: 50; max-width: 100%; "
        "height: auto; border: round $accent; background: $surface; padding: 0 1; }"
        " JumpScreen Static { height: auto; }"
        " JumpScreen.-ascii > Vertical, JumpScreen.-ascii Input { border: ascii $accent; }"
    )
    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, position: float, duration: float, ascii_only: bool = False) -> None:
        super().__init__(classes="-ascii" if ascii_only else "")
        self.position, self.duration = position, duration

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Go to (now {clock(self.position)} of {clock(self.duration)}):")
            yield Input(placeholder="1:02:03, 62m or 3723", id="when")
            yield Static("", id="why")

    @on(Input.Submitted)
    def _submit(self, ev: Input.Submitted) -> None:
        try:
            t = parse_clock(ev.value)
        except ValueError as e:
            self.query_one("#why", Static).update(escape(str(e)))
            return
        if t > self.duration:
            self.query_one("#why", Static).update(
                f"past the end: the recording is {clock(self.duration)} long"
            )
            return
        self.dismiss(t)


class FilterScreen(ModalScreen[str | None]):
    """Asks for the processes' filter; returns it ("" clears it), or None (esc)."""

    DEFAULT_CSS = JumpScreen.DEFAULT_CSS.replace("JumpScreen", "FilterScreen")
    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, current: str, ascii_only: bool = False) -> None:
        super().__init__(classes="-ascii" if ascii_only else "")
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Show the processes whose PID, user, command or phase hold (empty: all):")
            yield Input(value=self.current, placeholder="python, 1234, input", id="match")

    @on(Input.Submitted)
    def _submit(self, ev: Input.Submitted) -> None:
        self.dismiss(ev.value.strip())


class SignalScreen(ModalScreen[str | None]):
    """Confirms a signal to one process: t SIGTERM, i SIGINT, esc (or n) sends nothing."""

    DEFAULT_CSS = JumpScreen.DEFAULT_CSS.replace("JumpScreen", "SignalScreen")
    BINDINGS = [
        Binding("t", "dismiss('SIGTERM')", "SIGTERM"),
        Binding("i", "dismiss('SIGINT')", "SIGINT"),
        Binding("escape,n", "dismiss(None)", "cancel"),
    ]

    def __init__(self, what: Text, ascii_only: bool = False) -> None:
        super().__init__(classes="-ascii" if ascii_only else "")
        self.what = what  # a Rich Text: the command line comes from the process

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.what)
            yield Static("t: SIGTERM (ask it to stop)   i: SIGINT (as Ctrl-C)   esc: nothing")


class GpuDetail(ModalScreen[None]):
    """Scrolls (arrows, pages): the metrics, health, roofline, verdict and timeline overflow 80x24 and even 120x40."""

    DEFAULT_CSS = (
        "GpuDetail { align: center middle; } GpuDetail > VerticalScroll { width: 100%; height: 100%; "
        "border: round $accent; background: $surface; } GpuDetail Static { height: auto; }"
        " GpuDetail Timeline { height: 8; }"
        " GpuDetail.-ascii > VerticalScroll { scrollbar-size-vertical: 0; }"
    )
    BINDINGS = [
        Binding("escape,q,enter", "dismiss", "back"),
        *HelpScreen.BINDINGS[1:],
    ]

    def __init__(self, view: View, gpu: int, ascii_only: bool) -> None:
        super().__init__(classes="-ascii" if ascii_only else "")
        self.view, self.gpu, self.ascii_only = view, gpu, ascii_only

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="detail")
            tl = Timeline(self.ascii_only, id="detail-timeline")
            yield self.app._timeline(tl) if isinstance(self.app, MemtopApp) else tl

    action_scroll = HelpScreen.action_scroll

    def on_mount(self) -> None:
        self.query_one(Timeline).show(self.view, self.gpu)
        lk = look(self.app.current_theme, self.ascii_only)
        # a Rich Text, never a markup string: names and stacks come from recordings and processes
        self.query_one("#detail", Static).update(detail_text(self.view, self.gpu, lk))


def detail_text(view: View, gpu: int, lk: Look) -> Text:
    """Every metric of the table with its unit (memtop.core.metrics), the link, the verdict, recent gaps."""
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
    pids = ", ".join(fmt.gpu_proc_text(g, p.pid) for p in g.processes) or "none"
    t.append(f"  {'processes':<14}{pids}\n")
    for k, line in enumerate(fmt.job_lines(view, gpu)):
        t.append(f"  {'jobs' if k == 0 else '':<14}{line}\n")
    t.append_text(hardware_text(view, g, lk.glyphs.ascii))
    vd = view.verdicts.get(gpu)
    if vd:
        t.append("\n")
        t.append_text(fmt.headline(view, gpu, lk))
        t.append("\nverdict: ", style="bold")
        t.append(clean(vd.about or vd.headline), style=lk.phase(vd.label) + Style(bold=True))
        t.append("\n" + clean(vd.evidence) + "\n", style="dim")
        for a in vd.advice:
            t.append(f"{lk.glyphs.arrow} {clean(a)}\n")
        if vd.command:
            t.append(f"$ {clean(vd.command)}\n", style="italic")
    for gp in [gp for gp in view.gaps if gp.gpu == gpu][-5:]:
        st = gp.stack
        t.append(
            f"  gap {gp.duration_s} s: {clean(st.klass if st else '?', 12)} at {clean(st.where if st else '?', 80)}\n"
        )
    return t


class MemtopApp(App[int]):
    CSS_PATH = "memtop.tcss"
    TITLE = "memtop"
    BINDINGS = [
        Binding(k.keys, k.action, k.label, show=k.footer, priority=k.priority)
        for k in {(k.keys, k.action): k for k in KEYS}.values()
    ]

    def __init__(
        self,
        pipeline: Pipeline,
        controller: Playback | LiveController | None = None,
        paint_rate: float = 1.0,
        ascii_only: bool = False,
        theme: str | None = None,
        hangup_guard: bool = True,
        save_config: bool = False,
        no_color: bool = False,
        letters: bool = False,
        timeline_s: float | None = None,
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
        self.controller = controller  # starts the frames: a Playback (replay, demo) or live's sampler
        self.playback: Playback | None = controller if isinstance(controller, Playback) else None
        self.mode = "replay" if self.playback is not None or pipeline.status.mode != "live" else "live"
        self.paint_rate = paint_rate
        self.ascii_only = ascii_only
        self.hangup_guard = hangup_guard
        self.save_config = save_config  # only the real CLI writes the user's config
        name = theme or "ansi-dark"
        if name not in self.available_themes:
            raise UserError(f"unknown theme {name!r}; themes: {', '.join(sorted(self.available_themes))}")
        # before the first CSS pass: setting it in on_mount re-applies all CSS (~0.1 s of start-up)
        self.theme = name
        self.gpu = 0
        self.view: View | None = None
        self.selected_pid: int | None = None
        self.stack_depth = 4  # frames shown per thread (set by _layout)
        self._paints = 0
        self._painted_at = 0.0  # when the last View was built (monotonic)
        self._header: Widget | None = None  # found once: a DOM query each paint was 5 % of the UI's CPU
        self._trace_step: Notification | None = None  # a capture's stage on screen (the next replaces it)
        self._bindings_key: tuple | None = None
        self.crashed: BaseException | None = None  # what ended the app, for the exit code and log
        # phase letters in the bands and the strip (`l`): without colour, only letters tell them apart
        self._letters = letters or self.no_color
        self._timeline_s = timeline_s  # the timeline's span (`z`, `Z`); None: the timeline's own
        self._laid_out: tuple | None = (
            None  # (GPUs, screen size, processes, MIG rows) the layout was made for
        )
        self._native_asked: tuple[int, float] | None = None  # (pid, frame time) of the `s` awaited
        self.proc_order = ""  # fmt.PROC_ORDERS (`o`), reversed with `O`, filtered with `/`
        self.proc_reverse = False
        self.proc_match = ""

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
        yield TextPanel(tiles=6, id="verdict", ellipsis=ellipsis)  # one line each: now to command
        yield RowTable(fmt.GPU_COLUMNS, id="gpus")
        yield self._timeline(Timeline(self.ascii_only, id="timeline"))
        with Horizontal(id="bottom"):
            with LeftColumn(id="left"):
                yield TextPanel(tiles=4, id="host", ellipsis=ellipsis)  # the CPU line fitted, the others cut
                yield Static(id="procs-note")  # the processes' order and filter, when not the default
                yield RowTable((*fmt.PROC_COLUMNS, fmt.TOP_FRAME, *fmt.PROC_TAIL), id="procs")
            with VerticalScroll(id="right"):
                yield TextPanel(tiles=3, id="stacks")
                yield TextPanel(tiles=1, id="caps")
        yield Footer()

    def _timeline(self, tl: Timeline) -> Timeline:
        """A timeline with the letters and span chosen (in this run or a saved one)."""
        tl.letters = self._letters
        if self._timeline_s is not None:
            tl.span_s = self._timeline_s
        return tl

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._new_theme)  # phase colours are per theme
        self.pipeline.paint_interval = 1.0 / self.paint_rate
        self.pipeline.on_tick = self._post_refresh
        if self.playback is not None:
            self.mount(
                Overview(self.playback, lambda: self.gpu, lambda: self.look, id="overview"), after="#timeline"
            )
        if self.controller is not None:  # after the first paint: the first frame shows at once
            self.call_after_refresh(self.controller.start)
        self.call_after_refresh(gc.enable)  # the CLI starts the app without it (commands/local.py)
        self.set_interval(1.0 / self.paint_rate, self._paint_if_idle)  # (the footer's keys follow it too)
        if self.hangup_guard:
            self.set_interval(2.0, self._check_terminal)
            try:
                import asyncio

                loop = asyncio.get_running_loop()
                loop.add_signal_handler(signal.SIGHUP, self._hangup)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                    loop.add_signal_handler(sig, self._signalled, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if self.save_config:
            self.theme_changed_signal.subscribe(self, self._theme_changed)
        listen = getattr(self.controller, "listen_traces", None)
        if listen is not None:  # (post_message is safe from any thread)
            listen(lambda stage, line: self.post_message(TraceNote(stage, line)))
        self._paint()
        self.call_after_refresh(self._relayout)

    def _post_refresh(self) -> None:  # from the pipeline's thread
        self.post_message(Refresh())

    def on_unmount(self) -> None:
        if self.controller is not None:
            self.controller.stop()

    def _check_terminal(self) -> None:
        """After an SSH hang-up some TUIs spin; leave instead."""
        try:
            stdin = sys.__stdin__
            alive = stdin is not None and os.isatty(stdin.fileno()) and os.getppid() != 1
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

    def _signalled(self, sig: int) -> None:
        """SIGTERM, SIGINT, SIGQUIT: leave as q does (terminal restored, recording closed), with
        the shell's code for a signal; the same 3 s bound as a hang-up."""
        timer = threading.Timer(3.0, os._exit, args=(128 + sig,))
        timer.daemon = True
        timer.start()
        self.exit(return_code=128 + sig)

    def crash(self, error: BaseException) -> None:
        """An exception in a thread of ours: end the app as one in the app would."""
        if isinstance(error, Exception):
            self._handle_exception(error)

    def _handle_exception(self, error: Exception) -> None:
        self.crashed = self.crashed or error
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        """No Rich traceback (with locals) on the terminal: _run_app logs it and prints one line."""
        self._close_messages_no_wait()

    @on(Refresh)
    def _on_refresh(self) -> None:
        if self.is_running:  # a Refresh queued while the app shuts down finds no screen
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
        # a resize under a modal screen (help, go to, a dialog) lays out when the panels show again:
        # the paint after it finds the size changed
        if self.view is not None and self.screen is self.screen_stack[0]:
            self._layout(self.view)
            # the command is fitted to the width (a paused view paints no more)
            self._set("#verdict", fmt.verdict_text(self.view, self.gpu, self.look, self.size.width))
            self._update_stacks(self.view)  # the depth follows the height: a paused view paints no more

    @on(LeftColumn.Resized)
    def _left_resized(self, ev: LeftColumn.Resized) -> None:
        # the column itself, not the active screen (a modal one has no table), and not while its
        # children are mounted or removed (at the start and the end)
        if self.view is None:
            return
        if ev.column.query("#procs"):
            self._update_procs(self.view, column=ev.column)
        if ev.column.query("#host"):  # (mounted after the table and removed before it)
            self._update_host(self.view, ev.column)  # its CPU line is fitted to the column

    def _layout(self, v: View) -> None:
        """Where the screen has room (32 rows and more), the timeline gets one phase band per GPU
        and the GPU table all its rows; on smaller screens one band and a scrolling table. Rows left
        over beyond BOTTOM_MIN for the processes and stacks make the series taller (up to
        MAX_SERIES_H rows each: 8 steps a row), and a tall stacks panel shows deeper stacks, so a tall
        terminal with few GPUs is not half empty."""
        self._laid_out = self._layout_key(v)
        n = max(1, len(v.history))
        h = self.size.height
        roomy = h >= 32 and n > 1
        tl = self.query_one(Timeline)
        tl.set_all_bands(roomy)
        # below 32 rows the legend's row goes to the processes: the window line above names the phases
        # in their colours, and `?` lists them
        tl.set_legend(h >= 32)
        rows = n + self._layout_key(v)[3]  # a MIG instance has its row under its GPU
        gpus_h = rows + 1 if h >= 32 else max(2, min(rows + 1, h // 5))
        strip = 1 if self.playback is not None else 0  # the overview strip under the timeline
        top = 1 + VERDICT_H + gpus_h + strip + tl.rows_wanted(v, roomy)  # header, verdict, GPUs, timeline
        tl.set_series_height(1 + max(0, min(MAX_SERIES_H - 1, (h - top - BOTTOM_MIN) // len(ROWS))))
        self.stack_depth = 4 if h - top < 24 else 8  # frames per thread: deeper where the panel is tall
        tl_h = tl.rows_wanted(v, roomy, tl.series_h)
        tl.styles.height = tl_h
        # the host lines give way to the process table's header and its rows, down to the CPU line
        # (at 80x24 with two GPUs, wrapped CPU and perf lines took every row and no process showed;
        # then 2 of 4 processes)
        bottom = h - 1 - (top + tl_h - tl.rows_wanted(v, roomy))  # less the footer
        procs = self._layout_key(v)[2] + self.query_one("#procs-note").display
        self.query_one("#host", TextPanel).styles.max_height = max(
            1, min(HOST_MAX, bottom - 1 - max(2, procs))
        )
        self.query_one("#gpus", RowTable).styles.max_height = gpus_h

    def _layout_key(self, v: View) -> tuple:
        f = v.frame
        n = len(fmt.shown_procs(v, match=self.proc_match)) if f is not None and f.host is not None else 0
        migs = sum(len(g.mig_instances) for g in f.gpus) if f is not None else 0
        return (len(v.history), self.size, n, migs)

    def _set(self, selector: str, content) -> None:
        """A panel re-sends only the tiles of its lines whose cells changed (tiles.py). The panels live
        on the first screen: a modal one pushed meanwhile (a native dump arriving mid-paint) has none;
        at the exit there is none (a table's Highlighted message queued before it still comes)."""
        if self.screen_stack:
            self.screen_stack[0].query_one(selector, TextPanel).update(content)

    def _paint_if_idle(self) -> None:
        """The timer's paint, for when no frames come (a stalled sampler, a status change): while
        they come, the pipeline's Refresh paints at the paint rate, and the timer, out of phase with
        it, found a new version too and built a second View each interval (1.8 paints a second at
        the default 10 Hz sampling instead of 1). The footer's keys follow on this timer: one of
        their own at 0.5 s woke the UI twice more a second."""
        self._refresh_keys()
        if time.monotonic() - self._painted_at >= 1.5 / self.paint_rate:
            self._paint()

    def _panels_shown(self) -> bool:
        """The panels are mounted (on the default screen, which App.query searches) and not removed."""
        if self._header is None:
            found = self.query("#header")
            if not found:
                return False
            self._header = found.first()
        return self._header.is_attached

    def _paint(self) -> None:
        try:  # a timer or a Refresh racing the app's start or shutdown finds no widgets to paint
            if not (self.is_running and self._panels_shown()):
                return
        except ScreenStackError:
            return
        p = self.pipeline
        # the paint timer and a frame's Refresh often both come in one interval: building a View
        # (copies of the history, a verdict per GPU) only to find it unchanged was half the UI's cost
        if self.view is not None and p.version == self.view.version and p.status == self.view.status:
            return
        v = p.view()
        self._painted_at = time.monotonic()
        full = self.view is None  # forced (GPU switch, first paint): everything now
        self.view = v
        self._show_native(v)
        self._paints += 1
        # Verdict, header and GPU rows follow every paint; the wide, slow-moving panels every
        # second paint. Textual re-sends whole widget lines, so this halves their bytes. A paused or
        # frozen view paints only when the user moves it (a seek): then everything, at once.
        still = v.status.paused or v.status.frozen_at is not None
        slow = full or still or self._paints % 2 == 0
        gpus = sorted(v.history) or [0]
        if self.gpu not in gpus:
            self.gpu = gpus[0]
        lk = self.look
        with self.batch_update():
            self._set("#header", fmt.header(v, lk))
            self._set("#verdict", fmt.verdict_text(v, self.gpu, lk, self.size.width))
            self._update_gpus(v, lk)
            # the row's phase, the headline's "now" and the band's newest cell name one label: the
            # band follows every paint too (its tiles send only the cells that changed)
            if self._layout_key(v) != self._laid_out:
                self._layout(v)
            self.query_one(Timeline).show(v, self.gpu, bands_only=not slow)
            if not slow:
                return
            f = v.frame
            self._update_host(v)
            self._update_procs(v, lk)
            if not self.query_one("#procs", RowTable).has_focus:
                # the stacks beside a verdict are its GPU's, unless the user picks another process (at
                # start rank 1's stacks stood beside GPU 0's straggler verdict: it came first)
                self._select_on(self.gpu)
            self._update_stacks(v, lk)
            vd = v.verdicts.get(self.gpu)
            missing = vd.missing if vd is not None else ""
            caps = fmt.unheld(f.caps, v.stacks) if f else ()
            self._set("#caps", fmt.caps_text(caps, f.notes if f else (), lk, missing))
            self._refresh_keys()  # a process just selected, a GPU found: at --paint-rate 0.1 the timer is 10 s

    def _update_gpus(self, v: View, lk: Look) -> None:
        f = v.frame
        late = {i for i, vd in v.verdicts.items() if vd.straggler}
        rows = [
            row
            for g in (f.gpus if f else ())
            for row in [(str(g.index), fmt.gpu_row(g, v.labels.get(g.index), lk, g.index in late))]
            + fmt.mig_rows(g, lk)
        ]
        table = self.query_one("#gpus", RowTable)
        if self.size.width:  # the table spans the screen (it is as wide as its columns)
            for column, width in fmt.gpu_widths(self.size.width).items():
                table.set_width(column, width)
        table.set_titles(fmt.gpu_titles(f.gpus if f else (), table.columns[-1][1]))
        table.set_rows(rows)

    def _update_host(self, v: View, column: LeftColumn | None = None) -> None:
        left = column or self.screen_stack[0].query_one("#left", LeftColumn)
        panel = left.query_one("#host", TextPanel)
        f = v.frame
        text = fmt.host_text(
            f.host if f else None,
            f.caps if f else (),
            f.perf if f else (),
            self.look,
            # (known once the screen is laid out: until then the panel cuts the line)
            left.size.width - panel.styles.gutter.width or 1000,
        )
        panel.update(text)

    def _update_procs(self, v: View, lk: Look | None = None, column: LeftColumn | None = None) -> None:
        left = column or self.query_one("#left", LeftColumn)
        table = left.query_one("#procs", RowTable)
        # the top frame takes the width the left column has (at least 24 cells; columns after the
        # table's edge are cut, the least useful last), but never runs past that edge itself: cut there,
        # `workload.py:198` read `workload.py:19`
        head = sum(w + 1 for _, w in fmt.PROC_COLUMNS) + 1
        fixed = head + sum(w + 1 for _, w in fmt.PROC_TAIL)
        top_w = min(max(fmt.TOP_FRAME[1], left.size.width - fixed), max(left.size.width - head, 12))
        table.set_width(len(fmt.PROC_COLUMNS), top_w)
        rows = fmt.proc_rows(v, lk or self.look, top_w, self.proc_order, self.proc_match, self.proc_reverse)
        table.set_rows(rows)
        if self.selected_pid is None and rows:
            self.selected_pid = int(rows[0][0])

    def _update_stacks(self, v: View, lk: Look | None = None) -> None:
        f = v.frame
        s = v.stacks.get(self.selected_pid) if self.selected_pid is not None else None
        labs = None
        if f is not None and f.host is not None:
            proc = next((p for p in f.host.procs if p.pid == self.selected_pid), None)
            labs = fmt.proc_labels(v, proc) if proc is not None else None
        window = labs[-1].evidence if labs else None
        procs = bool(f is not None and f.host is not None and f.host.procs)
        self._set(
            "#stacks",
            fmt.stacks_text(
                s,
                f.caps if f else (),
                self.selected_pid,
                window,
                lk or self.look,
                procs,
                f.t if f else None,
                self.stack_depth,
                live=v.status.mode == "live",
                failed=f is not None and any(x.pid == self.selected_pid and not x.threads for x in f.stacks),
            ),
        )

    @on(RowTable.Highlighted, "#procs")
    def _proc_selected(self, ev: RowTable.Highlighted) -> None:
        self.selected_pid = int(ev.key)
        if self.view is not None:
            self._update_stacks(self.view)

    @on(RowTable.Highlighted, "#gpus")
    def _gpu_highlighted(self, ev: RowTable.Highlighted) -> None:
        if fmt.row_gpu(ev.key) != self.gpu:
            self._to_gpu(fmt.row_gpu(ev.key))

    def _to_gpu(self, gpu: int) -> None:
        """Everything repainted for ``gpu``, and its first process selected where the selected one
        is not on it, so the stacks panel explains the verdict above it (two ranks: `g` showed GPU
        1's verdict beside rank 0's stacks)."""
        self.gpu = gpu
        self.view = None
        self._paint()
        self._select_on(gpu)

    def _select_on(self, gpu: int) -> None:
        f = self.view.frame if self.view is not None else None
        procs = f.host.procs if f is not None and f.host is not None else ()
        on = [p.pid for p in procs if gpu in (p.gpus or ())]
        if not on or self.selected_pid in on:
            return
        table = self.query_one("#procs", RowTable)
        keys = table.keys
        pid = next((p for p in on if str(p) in keys), None)
        if pid is not None:
            table.move_cursor(keys.index(str(pid)))

    @on(RowTable.Selected, "#gpus")
    def _gpu_selected(self, ev: RowTable.Selected) -> None:
        if self.view is not None:
            self.push_screen(GpuDetail(self.view, self.gpu, self.ascii_only))

    # -- keys ------------------------------------------------------------------------------
    async def on_event(self, event: events.Event) -> None:
        # a key typed right after q (or still bubbling up from a widget) comes after the exit emptied
        # the screen stack: Textual's binding check would raise ScreenStackError on it
        if isinstance(event, events.Key) and not self.screen_stack:
            return
        await super().on_event(event)

    def _gpus(self) -> list[int]:
        f = self.view.frame if self.view else None
        return sorted(g.index for g in f.gpus) if f else []

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False hides a key that does nothing in this mode (footer, help); None shows it dimmed."""
        if action not in _ACTIONS:
            return True
        if action != "quit" and isinstance(self.screen, ModalScreen):
            return False  # a modal's own keys (typing a time, scrolling help) come first
        if not any(k.action.split("(")[0] == action and self.mode in k.modes for k in KEYS):
            return False
        if action == "gpu":
            return len(self._gpus()) > 1
        if action == "native":
            return self.selected_pid is not None and bool(self._gpus())
        if action == "copy_command":
            return bool(self._gpus())  # no GPU, no verdict: nothing to copy
        if action == "signal":
            return self.selected_pid is not None and hasattr(self.controller, "send_signal")
        if action == "trace":
            return self.selected_pid is not None and hasattr(self.controller, "capture_trace")
        if self.mode == "live" and action == "seek":
            return True if self.pipeline.frozen or parameters == (-1,) else None
        return True

    def _refresh_keys(self) -> None:
        """The footer follows what changes which keys apply (GPUs found, a process, a freeze)."""
        key = (len(self._gpus()), self.selected_pid is not None, self.pipeline.frozen)
        if key != self._bindings_key:
            self._bindings_key = key
            # an empty table takes no focus: tab offers no selection that selects nothing
            for sel, has in (("#gpus", key[0] > 0), ("#procs", key[1])):
                for table in self.query(sel):
                    table.can_focus = has
            self.refresh_bindings()

    def enabled_keys(self) -> list[Key]:
        return [
            k
            for k in KEYS
            if self.mode in k.modes
            and self.check_action(k.action.split("(")[0], _params(k.action)) is not False
        ]

    def action_copy_command(self) -> None:
        """The next profiler command, whole: to the clipboard (OSC 52) and in a notification."""
        cmd = fmt.command(self.view, self.gpu)
        if cmd is None:
            self.notify("no profiler command for this GPU: its verdict needs none, or none yet", markup=False)
            return
        self.copy_to_clipboard(cmd)
        self.notify(cmd, title="copied (OSC 52)", timeout=15, markup=False)

    def action_sort(self, step: int) -> None:
        """`o`: the next order; `O`: the same order turned round."""
        if step > 0:
            orders = fmt.PROC_ORDERS
            self.proc_order = orders[(orders.index(self.proc_order) + 1) % len(orders)]
        else:
            self.proc_reverse = not self.proc_reverse
        self._procs_changed()

    def action_filter(self) -> None:
        def done(match: str | None) -> None:
            if match is not None:
                self.proc_match = match
                self._procs_changed()

        self.push_screen(FilterScreen(self.proc_match, self.ascii_only), done)

    def _procs_changed(self) -> None:
        note = self.query_one("#procs-note", Static)
        parts = []
        if self.proc_order or self.proc_reverse:
            order = self.proc_order or "as found"
            parts.append(f"sorted by {order}{' (reversed)' if self.proc_reverse else ''} (o, O)")
        if self.proc_match:
            parts.append(f"only {self.proc_match!r} (/ changes it)")
        # (a Text: the filter is the user's typing, never markup)
        note.update(Text(" " + f" {self.look.glyphs.sep} ".join(parts), style="dim"))
        note.display = bool(parts)
        if self.view is not None:
            self._layout(self.view)
            self._update_procs(self.view)

    def action_signal(self) -> None:
        """`k`: a signal to the selected process, after a confirmation. The controller checks and sends
        it (live only: the app itself signals nothing)."""
        pid, ctl = self.selected_pid, self.controller
        may, send = getattr(ctl, "may_signal", None), getattr(ctl, "send_signal", None)
        if pid is None or may is None or send is None:
            return
        why = may(pid)
        if why:
            self.notify(why, severity="warning", markup=False)
            return
        f = self.view.frame if self.view is not None else None
        p = next(
            (p for p in (f.host.procs if f is not None and f.host is not None else ()) if p.pid == pid), None
        )
        what = Text(f"Send a signal to {pid}", style="bold")
        if p is not None:
            what.append(f" ({clean(p.user, 32)}): {clean(p.cmdline, 200)}")

        def done(name: str | None) -> None:
            if name is not None:
                self.notify(send(pid, signal.Signals[name]), markup=False)

        self.push_screen(SignalScreen(what, self.ascii_only), done)

    def action_trace(self) -> None:
        """`x`: a capture of the selected process and its job's ranks, in a worker thread (it blocks for
        the window, the profiler's export and the merge); its stages and outcome come as TraceNotes."""
        capture, pid = getattr(self.controller, "capture_trace", None), self.selected_pid
        if capture is None or pid is None:
            return
        self._trace_say(TraceNote("progress", f"trace: asking the agent of {pid}..."))
        threading.Thread(target=capture, args=(pid,), name="memtop-trace-key", daemon=True).start()

    @on(TraceNote)
    def _trace_note(self, note: TraceNote) -> None:
        self._trace_say(note)

    def _trace_say(self, note: TraceNote) -> None:
        """One notice for a capture's stages: each replaces the stage shown before it (a process with
        no agent showed "asking the agent" and the failure together); an outcome or a warning stays."""
        old, self._trace_step = self._trace_step, None
        if old is not None:  # after its own Notify, which may still be queued behind this note (stages
            self.call_later(self._drop_notice, old)  # come fast from the tracer's thread): it then stayed
        if note.stage == "progress":
            shown = self._trace_step = Notification(note.line, "", "information", 8, markup=False)
        elif note.stage == "done":
            shown = Notification(note.line, "trace written", "information", 30, markup=False)
        else:  # failed, or a warning on the way
            shown = Notification(note.line, "", "warning", 20, markup=False)
        self.post_message(Notify(shown))

    def _drop_notice(self, notice: Notification) -> None:
        if notice in self._notifications:
            self._unnotify(notice)

    def action_letters(self) -> None:
        self._letters = not self._letters
        self.query_one(Timeline).set_letters(self._letters)
        for strip in self.query(Overview):
            strip.update()
        self._save(letters=self._letters)

    def action_help(self) -> None:
        self.push_screen(
            HelpScreen(help_text(self.mode, self.enabled_keys(), self.ascii_only), self.ascii_only)
        )

    def action_gpu(self, step: int) -> None:
        gpus = sorted(self.view.history) if self.view else []
        if gpus:
            gpu = gpus[(gpus.index(self.gpu) + step) % len(gpus)] if self.gpu in gpus else gpus[0]
            self._to_gpu(gpu)
            table = self.query_one("#gpus", RowTable)
            if str(gpu) in table.keys:
                table.move_cursor(table.keys.index(str(gpu)))

    def action_zoom(self, factor: float) -> None:
        tl = self.query_one(Timeline)
        before = tl.span_s
        tl.zoom(factor)
        self._timeline_s = tl.span_s
        if tl.span_s != before:
            self._save(timeline_s=tl.span_s)

    def _seek(self, offset: float) -> None:
        assert self.playback is not None
        self.playback.seek(offset)
        self.query_one(Overview).update()
        for panel in self.query(TiledLines):
            panel.fit()

    def action_pause(self) -> None:
        if self.playback is not None:
            self.playback.toggle_pause()
        else:
            self.pipeline.freeze(None if self.pipeline.frozen else 0.0)
            self.view = None
            self._paint()
        self._refresh_keys()

    def action_seek(self, direction: int) -> None:
        if self.playback is not None:
            self._seek(self.playback.position + direction * SEEK_S)
            return
        self.pipeline.scroll(direction * SEEK_S)
        self.view = None
        self._paint()
        self._refresh_keys()

    def action_page(self, direction: int) -> None:
        if self.playback is not None:
            self._seek(self.playback.position + direction * self.playback.duration / 10)

    def action_to_end(self, end: int) -> None:
        pb = self.playback
        if pb is None:
            return
        if end and pb.loop:
            # a looping replay (the demo) played on from its end is its start: End pauses on its
            # last second instead (space plays on, from the start)
            if not pb.paused:
                pb.toggle_pause()
            self._seek(max(0.0, pb.duration - LOOP_END_S))
            return
        self._seek(pb.duration if end else 0.0)

    def action_jump(self) -> None:
        pb = self.playback
        if pb is not None:

            def done(t: float | None) -> None:
                if t is not None:
                    self._seek(t)

            self.push_screen(JumpScreen(pb.position, pb.duration, self.ascii_only), done)

    def action_change(self, direction: int) -> None:
        pb = self.playback
        if pb is None:
            return
        t = pb.next_change(self.gpu) if direction > 0 else pb.prev_change(self.gpu)
        if t is not None:
            self._seek(t)
        else:
            where = "later" if direction > 0 else "earlier"
            more = "" if pb.scanned else " (still reading the recording)"
            self.notify(f"no {where} phase change on GPU {self.gpu}{more}")

    def action_speed(self, factor: float) -> None:
        if self.playback is not None:
            self.playback.set_speed(self.playback.speed * factor)

    def action_native(self) -> None:
        """A one-off py-spy --native dump of the selected process (live only; done by the sampler)."""
        ask = getattr(self.controller, "request_native", None)
        if self.selected_pid is None or ask is None or not ask(self.selected_pid):
            self.notify("native stacks: live runs with stack sampling only")
        else:
            f = self.view.frame if self.view is not None else None
            self._native_asked = (self.selected_pid, f.t if f is not None else 0.0)
            self.notify(f"native dump of {self.selected_pid} requested (pauses it up to ~1 s)")

    def _show_native(self, v: View) -> None:
        """The dump `s` asked for, once a frame brings it, on a screen of its own: in the stacks
        panel the next sample (half a second later) replaced it before it could be read."""
        if self._native_asked is None:
            return
        pid, asked = self._native_asked
        s = v.natives.get(pid)
        if s is None or s.t <= asked:  # a dump taken after the ask is newer than the frame shown then
            if v.frame is not None and v.frame.t - asked > NATIVE_WAIT_S:  # the process left, or py-spy hung
                self._native_asked = None  # (a later dump of the sampler's own opens nothing)
                self.notify(f"no native dump of {pid} came in {NATIVE_WAIT_S:.0f} s", severity="warning")
            return
        self._native_asked = None
        if not s.threads:
            self.notify(
                f"native dump of {pid}: {clean(s.error or 'no stacks')}", severity="warning", markup=False
            )
            return
        self.push_screen(HelpScreen(fmt.native_text(s, self.look, self.ascii_only), self.ascii_only))

    # -- palette, config -------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for cmd in super().get_system_commands(screen):
            if cmd.title == "Screenshot":  # Textual's goes to ~/Downloads, which servers lack
                yield SystemCommand(
                    "Screenshot",
                    "Save an SVG of the screen in the working directory",
                    lambda: self.set_timer(0.1, self.save_svg),
                )
            else:
                yield cmd

    def save_svg(self) -> Path | None:
        """The screen as SVG in the working directory (0600, a new file), the path shown."""
        name = f"memtop-{time.strftime('%Y%m%d-%H%M%S')}"
        for i in range(100):
            path = Path.cwd() / f"{name}{'-' + str(i) if i else ''}.svg"
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            except OSError as e:
                self.notify(f"screenshot not saved: {e.strerror}", severity="error", markup=False)
                return None
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.export_screenshot())
            self.notify(f"saved {path}", title="Screenshot", markup=False)
            return path
        return None

    def _theme_changed(self, theme: object) -> None:
        self._save(theme=self.theme)

    def _save(self, **choice: object) -> None:
        """A choice made in the app (theme, letters, zoom) outlives the run: the config file."""
        if not self.save_config:
            return
        from memtop import config

        if config.save(**choice) is None:
            what = ", ".join(choice)
            self.notify(f"{what} not saved: cannot write {config.path()}", severity="warning", markup=False)


def _params(action: str) -> tuple[object, ...]:
    if "(" not in action:
        return ()
    return tuple(
        int(x) if x.lstrip("-").isdigit() else float(x) for x in action[action.index("(") + 1 : -1].split(",")
    )
