"""The cluster view: one row per GPU across nodes, with its phase band; the straggler candidate
flagged with its evidence; stale nodes grey with the reason; Enter opens a node's snapshot.

Everything shown came from other machines: it passes through memtop.core.sanitize.clean into Rich Text
objects and is never parsed as markup. The poller runs in a thread; the UI paints from its state.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache
from itertools import compress, count
from operator import attrgetter, is_not, itemgetter

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widgets import Footer

from memtop.analysis.phases import TITLES
from memtop.core.errors import UserError
from memtop.core.metrics import METRICS, fmt
from memtop.core.sanitize import clean
from memtop.core.wording import counted
from memtop.fleet.sources import HttpPoller, SshStreams, node_list
from memtop.fleet.view import PHASE_OF, STALE_INTERVALS, NodeState, Row, rows
from memtop.fleet.wire import COMPACT_BAND

from .palette import AsciiFilter, phase_colors
from .table import GAP, Cell, RowTable
from .tiles import NULL, TextPanel

PHASE_COLORS = phase_colors(None)  # the cluster view's dark palette

BAND_W = COMPACT_BAND  # the band's widest (two minutes at the snapshot's 2 s steps)
MIN_BAND, MIN_NOTE = 10, 24  # under these the column says too little to keep
# (title, the narrowest, the widest): columns take the width of their content inside these bounds
COLUMNS = (("node", 4, 32), ("GPU", 3, 4), ("!", 1, 1), ("job", 3, 16), ("recent", 5, 9), ("SM", 4, 4))
NOTE, BAND = len(COLUMNS) + 1, len(COLUMNS)  # then the phase band, then the verdict or the reason
DIM = Style.parse("dim")
_OK_AT, _VERSION, _KEY = attrgetter("ok_at"), attrgetter("version"), attrgetter("key")
_TARGET, _STALE, _STRAGGLER, _GPU = (
    attrgetter("target"),
    attrgetter("stale"),
    attrgetter("straggler"),
    attrgetter("gpu"),
)
_LENS = itemgetter(2)  # of what ClusterApp._made gives a row: its cells' widths
_TEXT = itemgetter(1)  # of a (style, text) pair
FLAG = Style.parse("bold red")


class BandTable(RowTable):
    """A RowTable whose Text cells keep their spans (the band has one colour per step), and which
    renders only the rows on screen (a cluster has hundreds)."""

    # a thousand rows: their ends a key away (the cursor stops at the first and the last row)
    BINDINGS = [
        Binding("home", "move(-1_000_000)", show=False),
        Binding("end", "move(1_000_000)", show=False),
    ]

    def __init__(self, columns: Sequence[tuple[str, int]], **kw) -> None:
        super().__init__(columns, **kw)
        self.set_plan(self._tiles_for(self.columns))
        self._strips: dict[str, tuple[tuple, Style, tuple, Strip]] = {}

    @staticmethod
    def _tiles_for(columns: Sequence[tuple[str, int]]) -> list[int]:
        """The tiles' widths: one per column but for the band and the verdict, whose split moves
        with the rows (a straggler's evidence takes the band's cells, and gives them back when no
        row is flagged): two tiles of fixed widths over both, so that a new split redraws lines
        and lays nothing out (a layout of the screen cost as much as styling every row shown)."""
        cells = [w + GAP if w else 0 for _, w in columns]
        rest = sum(cells[BAND:])
        return [*cells[:BAND], rest // 2, rest - rest // 2]

    def set_rows(
        self, rows: list[tuple[str, tuple[Cell, ...]]], widths: Sequence[tuple[str, int]] = ()
    ) -> None:
        """As RowTable's, but nothing is compared off screen: a cluster has a thousand rows, and
        _redraw keeps the strips of the rows on screen whose cells did not change. `widths`: every
        column's, set first; the tiles are laid out again only when theirs changed (_tiles_for);
        the rows are drawn once."""
        if widths and tuple(widths) != self.columns:
            self.columns = tuple(widths)
            self.set_plan(self._tiles_for(self.columns))
        key = self.cursor_key
        self._rows = rows
        if not (self.cursor < len(rows) and rows[self.cursor][0] == key):
            keys = [k for k, _ in rows]
            self.cursor = keys.index(key) if key in keys else min(self.cursor, max(0, len(rows) - 1))
        self._redraw()
        if rows and key != self.cursor_key:
            self.post_message(self.Highlighted(self, rows[self.cursor][0]))

    def _redraw(self, changed: list[tuple[int, int]] | None = None) -> None:  # (RowTable's signature)
        if not self.is_mounted:
            return
        top = max(min(self._top, self.cursor), self.cursor - self._visible() + 1, 0)
        self._top = top
        header = self._strip([n for n, _ in self.columns], self.get_component_rich_style("rowtable--header"))
        cursor = self.get_component_rich_style("rowtable--cursor")
        end = (
            len(self._rows)
            if self.size.height <= 1
            else min(len(self._rows), self._top + self.size.height - 1)
        )
        # key -> (cells, style, columns, strip): a row is styled again only when one of them changed
        kept, self._strips = self._strips, {}
        lines = [header]
        for i in range(self._top, end):
            key, cells = self._rows[i]
            base = cursor if i == self.cursor else NULL  # (one Style for every row: made once)
            got = kept.get(key)
            if got is None or got[0] != cells or got[1] != base or got[2] is not self.columns:
                got = (cells, base, self.columns, self._strip([self._cell(c) for c in cells], base))
            self._strips[key] = got
            lines.append(got[3])
        self.set_lines(lines)  # (it sends only the lines that differ from those shown)

    ascii_only = False
    _cells: dict[tuple[str, str], Cell] | None = None

    def _cell(self, pair: tuple[str, str] | Cell) -> Cell:
        """A (style, text) pair as a cell; "band" is the coloured phase band. Cached: rows repeat."""
        if not isinstance(pair, tuple):
            return pair
        if self._cells is None or len(self._cells) > 4096:
            self._cells = {}
        got = self._cells.get(pair)
        if got is None:
            style, text = pair
            got = (
                band_text(text, self.ascii_only) if style == "band" else Text(text, style) if style else text
            )
            self._cells[pair] = got
        return got

    def _strip(self, cells: Sequence[Cell], base: Style) -> Strip:
        segs: list[Segment] = []
        for (_, w), cell in zip(self.columns, cells):
            if isinstance(cell, Text):
                t = cell.copy()
                t.truncate(w, pad=True)
                segs += [
                    Segment(s.text, base + s.style if s.style else base)
                    for s in t.render(self.app.console, "")
                ]
            else:
                segs.append(Segment(cell[:w].ljust(w), base))
            segs.append(Segment(" " * GAP, base))
        return Strip(segs)


def band_text(band: str, ascii_only: bool, width: int = BAND_W) -> Text:
    """The band with one colour per phase: one span per run (a cluster paints hundreds of bands)."""
    chars = [c if c in PHASE_OF else " " for c in band[-width:]]  # unknown characters: missing
    plain, spans, i = [], [], 0
    while i < len(chars):
        j = i
        while j < len(chars) and chars[j] == chars[i]:
            j += 1
        plain.append((chars[i] if ascii_only or chars[i] == " " else "█") * (j - i))
        spans.append(Span(i, j, PHASE_COLORS.get(PHASE_OF[chars[i]], "white")))
        i = j
    return Text("".join(plain), spans=spans)


def row_cells(r: Row, interval: float, ascii_only: bool, band_w: int = BAND_W) -> tuple[tuple[str, str], ...]:
    """A row as (style, text) pairs, one per column: cheap to build and compare for hundreds of rows;
    BandTable turns only the rows on screen into styled cells ("band" marks the phase band). The
    band is cut to its newest `band_w` steps; the last cell names the moment it speaks for."""
    g = r.gpu
    node = _node_name(r.target)  # what is unique (replays and demo nodes on one machine share a hostname)
    if not g:
        return (("dim", node), ("", "-"), ("", ""), ("", ""), ("", ""), ("", ""), ("", ""),
                ("dim", f"no data: {clean(r.stale or '?', 80)}"))  # fmt: skip
    job = g.get("job") or {}
    jid = job.get("slurm_job_id") or job.get("pod") or job.get("container") or ""
    jid = clean(jid, 10) if jid else ""  # (most rows: no job id, and no call)
    if job.get("rank"):
        jid += f" r{clean(job['rank'], 4)}"
    phase = r.phase[:9]  # (phase, band and label: of fixed alphabets, which wire checked; no clean)
    sm = (g.get("gauges") or {}).get("sm", (g.get("gauges") or {}).get("util"))
    sm_s = f"{sm:3.0f}%" if isinstance(sm, (int, float)) else " n/a"
    band = g.get("band", "")[-band_w:]
    index = str(g.get("index", ""))
    if r.stale:
        return tuple(("dim", x) for x in (node, index, "", jid, phase, sm_s, band,
                                          f"stale: {clean(r.stale, 80)}"))  # fmt: skip
    v = g.get("verdict") or {}
    if r.straggler:
        note = ("bold red", f"straggler? {clean(r.straggler, 200)}")
    elif v.get("label"):  # the window's verdict, in the phase column's words, named as such
        share = v.get("share")
        pct = f" {100 * share:.0f} %" if isinstance(share, (int, float)) else ""
        note = ("", f"last {v.get('window_s', 60):.0f} s: {v['label'][:16]}{pct}")
    else:
        note = ("", "")
    return (
        ("", node), ("", index), ("bold red", "!" if r.straggler else ""), ("", jid),
        (PHASE_COLORS.get(phase, ""), phase), ("", sm_s), ("band", band), note,
    )  # fmt: skip


@lru_cache(maxsize=1 << 14)
def _node_name(target: str) -> str:
    """A node's name in its row: a thousand rows are made again after each round, their targets never."""
    return clean(target, 32)


def cell_lens(cells: tuple[tuple[str, str], ...]) -> tuple[int, ...]:
    """The width of each of a row's cells (``row_cells``)."""
    texts = tuple(map(_TEXT, cells))
    if "".join(texts).isascii():  # (most rows: the lengths in C)
        return tuple(map(len, texts))
    return tuple(len(t) if t.isascii() else cell_len(t) for t in texts)  # (cleaned: no controls)


def column_widths(lens: list[tuple[int, ...]], width: int, keep: Sequence[int] = ()) -> list[tuple[str, int]]:
    """Each column as wide as its content (``cell_lens`` of each row, within its bounds); the verdict
    column gets what its content needs before the band grows past MIN_BAND, then the band up to
    BAND_W, then the verdict. `keep`: the columns before the band at least as wide as these (the
    last paint's at this screen width: a column that narrowed when the longest phase name shown
    changed moved the tiles right of it, and Textual laid the screen out again)."""
    cols = list(zip(*lens)) or [()] * (NOTE + 1)  # (a thousand rows: one pass in C per column)
    out = []
    for i, (name, lo, hi) in enumerate(COLUMNS):
        w = max(lo, len(name), min(hi, max(cols[i], default=0)))
        out.append((name, max(w, keep[i]) if i < len(keep) else w))
    note_need = max(cols[NOTE], default=0)
    left = width - sum(w for _, w in out) - GAP * (len(out) + 2) - 1  # the last cell: no wrap
    band = max(MIN_BAND, min(BAND_W, left - max(MIN_NOTE, note_need)))
    note = max(0, left - band)  # never wider than the screen (a wider table left stray cells)
    return [*out, ("phase band", band), ("", note)]


def stale_line(stale: list[str], width: int) -> str:
    """The stale nodes in one line of `width` cells: as many names as fit, then how many more."""
    line = f"no fresh snapshot (> {STALE_INTERVALS} intervals):"  # (never seen, or gone quiet)
    for i, name in enumerate(stale):
        item = f"{',' if i else ''} {clean(name, 40)}"
        if cell_len(line + item) + len(f" +{len(stale)}") > width - 1:
            return line + f" +{len(stale) - i}"
        line += item
    return line


def packed(head: str, items: list[str], width: int, indent: str = "  ") -> str:
    """`head`, then the items comma-separated, in lines of at most `width` cells broken only between
    items (continuation lines under `indent`): a value stays beside its unit, where Rich's wrap,
    breaking at any space, left "NVLink RX 0.0" at a line's end and "MB/s" on the next."""
    lines = [head]
    for i, item in enumerate(items):
        piece = item + ("," if i + 1 < len(items) else "")
        if cell_len(lines[-1]) + 1 + cell_len(piece) > width:
            lines.append(indent + piece)
        else:
            lines[-1] += " " + piece
    return "\n".join(lines) + "\n"


def node_text(target: str, snap: dict | None, error: str | None, width: int = 80) -> Text:
    """One node's snapshot for people, in lines of `width` cells: every string cleaned, nothing
    parsed as markup."""
    t = Text()
    t.append(clean(target, 80), "bold")
    if error:
        t.append(f"  last poll: {clean(error, 100)}", "red")
    if not snap:
        return t.append("\nno snapshot yet")
    t.append(f"\n{clean(snap.get('hostname', ''), 80)} ({clean(snap.get('mode', ''), 10)}), "
             f"memtop {clean(snap.get('memtop_version', ''), 20)}\n")  # fmt: skip
    for g in snap.get("gpus", []):
        v = g.get("verdict") or {}
        t.append(f"\nGPU {clean(g.get('index', ''), 4)} {clean(g.get('name', ''), 40)}  ", "bold")
        # "now:" as in the pane and the live headline: the verdict under it may be the last minute's
        t.append("now: " + clean(TITLES.get(g.get("phase", ""), g.get("phase", "")), 30) + "\n")
        if v:
            t.append(f"  {clean(v.get('headline', ''), 200)}\n", "bold")
            t.append(f"  evidence: {clean(v.get('evidence', ''), 400)}\n")
            for a in v.get("advice", [])[:3]:
                t.append(f"  - {clean(a, 300)}\n")
            if v.get("command"):
                t.append(f"  next: {clean(v['command'], 400)}\n", "dim")
        shares = [f"{clean(k, 10)} {100 * s:.0f} %" for k, s in (g.get("shares") or {}).items()
                  if isinstance(s, (int, float))]  # fmt: skip
        t.append(packed("  shares (last minute):", shares, width, "    "))
        t.append("  ").append(band_text(str(g.get("band", "")), True)).append("\n")
        job = g.get("job") or {}
        if job:
            t.append("  job: " + ", ".join(f"{clean(k, 20)}={clean(v, 64)}" for k, v in job.items()) + "\n")
    procs = snap.get("processes") or []
    if procs:
        t.append("\nprocesses\n", "bold")
        for p in procs[:20]:
            t.append(f"  {clean(p.get('pid', ''), 8)} {clean(p.get('name', ''), 30)} "
                     f"GPUs {clean(p.get('gpus', ''), 20)} CPU {clean(p.get('cpu_pct', ''), 8)} %\n")  # fmt: skip
    return t


FETCHING = "\n(the node's full snapshot is being fetched)"


class NodeScreen(ModalScreen[None]):
    DEFAULT_CSS = (
        "NodeScreen { align: center middle; } NodeScreen > VerticalScroll { width: 100%; height: 100%; "
        "border: round $accent; background: $surface; padding: 0 1; }"
    )
    # alt+q: Escape and q read together by a busy app are one key (the screen stayed open, and the
    # q meant to close it was lost)
    BINDINGS = [Binding("escape,q,enter,alt+q", "dismiss", "back")]

    def __init__(self, node: NodeState, width: int) -> None:
        super().__init__()
        self.node, self.width = node, width
        self._shown = -1  # the node's version shown

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield TextPanel(tiles=1, hang=True)

    def on_mount(self) -> None:
        self._show()
        self.set_interval(0.5, self._show)  # the full snapshot comes in after the screen opens

    def _show(self) -> None:
        """The node's newest snapshot, made again when a poll of it ended."""
        n = self.node
        with n.lock:
            version, snap, err, compact = n.version, n.snapshot, n.error, n.compact
        if version != self._shown:
            self._shown = version
            text = node_text(n.target, snap, err, self.width)
            self.query_one(TextPanel).update(text.append(FETCHING, "dim") if compact else text)


class ClusterApp(App):
    # the table as tall as its rows (up to most of the screen), the detail pane right under it
    CSS = (
        "Screen { overflow: hidden; } #header { height: 2; } #table { height: auto; max-height: 70%; overflow: hidden; } "
        "#detail { height: 1fr; min-height: 2; border-top: solid $accent; }"
    )
    BINDINGS = [Binding("q", "quit", "quit")]

    def __init__(self, source, interval: float, ascii_only: bool = False, theme: str | None = None,
                 paint_rate: float = 1.0) -> None:  # fmt: skip
        super().__init__()
        self.source, self.interval, self.ascii_only = source, interval, ascii_only
        self.paint_rate = paint_rate
        # --ascii: everything drawn (Textual's borders and footer too) through the TUI's ASCII filter,
        # as MemtopApp does (the filter list is a private Textual name)
        if ascii_only and isinstance(getattr(self, "_filters", None), list):
            self._filters.append(AsciiFilter())
        if theme:
            if theme not in self.available_themes:
                raise UserError(
                    f"unknown theme {theme!r}; themes: {', '.join(sorted(self.available_themes))}"
                )
            self.theme = theme
        self._stop = threading.Event()
        self._fault: str | None = None  # why the poll loop's last round failed: shown as the source's error
        self._rows: dict[str, Row] = {}
        self._painted: tuple | None = None
        self._round_at = 0.0  # when the poll loop's newest round began (monotonic)
        self._held = False  # the last tick was skipped (the next one paints)
        self._row_cells: dict[str, list] = {}  # row key -> what _made made
        # the last paint's rows, what _made gave each, and the table's (key, cells) of each: a paint
        # redoes only the positions whose Row is another object (the nodes polled since)
        self._last: tuple[list[Row], list[list], list[tuple[str, tuple]], int] = ([], [], [], -1)
        self._detail_of: tuple[Row | None, int] | None = None  # what the detail pane shows
        self._keep: tuple[int, list[int]] = (0, [])  # (screen width, the widths column_widths keeps)

    @property
    def letters(self) -> bool:
        """A phase band of letters, not colour blocks: --ascii, and NO_COLOR (blocks of one colour
        say nothing)."""
        return self.ascii_only or self.no_color

    def compose(self) -> ComposeResult:
        yield TextPanel(tiles=4, id="header")
        yield BandTable(column_widths([], 80), id="table")
        yield TextPanel(tiles=4, id="detail", hang=True)
        yield Footer()

    def on_mount(self) -> None:
        if isinstance(self.source, SshStreams):
            self.source.start()
        else:
            threading.Thread(target=self._poll, name="memtop-cluster", daemon=True).start()
        self.set_interval(1 / self.paint_rate, self._tick)
        self.paint()

    def _tick(self) -> None:
        """The paint timer. A round's answers come in over a few hundred ms after it starts: a tick
        among them is skipped, so that the round is painted once, whole, instead of in two paints
        that each cost the table's fixed work (1 024 nodes). Never two ticks in a row: where rounds
        start as often as ticks come (--interval at most the paint period) and a node never answers,
        every tick would fall within a period of a round's start."""
        src = self.source
        held = (
            not self._held
            and time.monotonic() - self._round_at < 1 / self.paint_rate
            and isinstance(src, HttpPoller)
            and src.in_flight() > 0
        )
        self._held = held
        if not held:
            self.paint()

    def _poll(self) -> None:
        while not self._stop.is_set():
            t0 = self._round_at = time.monotonic()
            try:
                self.source.poll_all(wait=False)  # a node still in flight is skipped, never waited for
            except Exception as e:  # a fault of memtop's: said in the header; the view goes on polling
                self._fault = f"polling failed: {type(e).__name__}: {e}"
            else:
                self._fault = None
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def on_resize(self) -> None:
        self.paint()  # the columns follow the width

    def on_unmount(self) -> None:
        self._stop.set()
        # off the event loop, which restores the terminal meanwhile: ending every ssh may wait up to
        # 5 s; not a daemon, so the process reaps them before it exits
        end = self.source.stop if isinstance(self.source, SshStreams) else self.source.close
        threading.Thread(target=end, name="memtop-cluster-stop").start()

    def paint(self) -> None:
        nodes = node_list(self.source)
        # nothing new since the last paint (polls come every few seconds): nothing to do
        # Prometheus unreachable or its answer refused, or this view's own poll failed
        error = getattr(self.source, "error", None) or self._fault
        # (in C: a thousand nodes, a paint a second) each node's outcomes, and how many are stale
        cut = time.monotonic() - STALE_INTERVALS * self.interval
        state = (self.size.width, error, bisect_left(sorted(map(_OK_AT, nodes)), cut),
                 tuple(map(_VERSION, nodes)))  # fmt: skip
        if state == self._painted:
            return
        try:
            header = self.query_one("#header", TextPanel)
        except NoMatches:  # the app is ending: a last tick of the paint timer outlived the widgets
            return
        self._painted = state
        rs = rows(nodes, self.interval)
        made, todo = self._made(rs)
        self._rows = dict(zip(map(_KEY, rs), rs))
        header.update(self._head(nodes, rs, error))
        table = self.query_one(BandTable)
        table.ascii_only = self.letters
        keep = self._keep[1] if self._keep[0] == self.size.width else ()
        widths = column_widths(list(map(_LENS, made)), self.size.width, keep)
        self._keep = (self.size.width, [w for _, w in widths[:BAND]])
        band_w = widths[BAND][1]
        # BandTable holds (style, text) pairs in place of cells: its _redraw styles them through _cell
        shown = self._last[2]
        if todo is None or band_w != self._last[3]:
            todo, shown = range(len(rs)), [("", ())] * len(rs)
        for i in todo:
            m = made[i]
            shown[i] = (rs[i].key, m[4] if m[3] == band_w else self._shown(m, band_w))
        self._last = (rs, made, shown, band_w)
        table.set_rows(list(shown), widths)  # (a copy: the next paint changes this one in place)
        self._detail(table.cursor_key)

    def _head(self, nodes: list, rs: list[Row], error: str | None) -> Text:
        stale = sorted(set(compress(map(_TARGET, rs), map(_STALE, rs))))  # (loops in C: 1 024 rows)
        flagged = sum(map(bool, map(_STRAGGLER, rs)))
        gpus = sum(map(bool, map(_GPU, rs)))
        head = Text(f"memtop cluster: {counted(len(nodes), 'node')}, {counted(gpus, 'GPU')}, every "
                    f"{self.interval:g} s", "bold")  # fmt: skip
        if flagged:
            head.append(f"  ! {counted(flagged, 'straggler candidate')}", FLAG)
        if error:
            head.append(f"\n{clean(error, 300)}", FLAG)
        elif stale:
            head.append("\n" + stale_line(stale, self.size.width), "dim")
        else:
            head.append("\nEnter: the node's snapshot   q: quit", "dim")
        return head

    def _made(self, rs: list[Row]) -> tuple[list[list], Sequence[int] | None]:
        """Each row's [row, cells, their widths, band width, cells shown], and the positions made
        again (None: all). A row is made again only when it changed: a node's rows are the same
        objects until a poll of it ends (a round polls every node at once: the paint after it
        makes most rows again, the others none), and which positions hold another object than the
        last paint's is found in C."""
        last_rs, last_made = self._last[:2]
        todo: Sequence[int] | None = None
        if len(last_rs) == len(rs):
            todo = list(compress(count(), map(is_not, rs, last_rs)))
            made = list(last_made)
        else:
            made = [[]] * len(rs)
        cache = self._row_cells
        for i in range(len(rs)) if todo is None else todo:
            r = rs[i]
            got = cache.get(r.key)
            if got is None or (
                got[0] is not r
                and (got[0].gpu, got[0].stale, got[0].straggler) != (r.gpu, r.stale, r.straggler)
            ):
                cells = row_cells(r, self.interval, self.ascii_only)
                got = cache[r.key] = [r, cells, cell_lens(cells), -1, ()]
            made[i] = got
        if len(cache) > 2 * len(rs):  # rows gone (a node's GPUs changed): let go of theirs
            self._row_cells = {r.key: cache[r.key] for r in rs}
        return made, todo

    @staticmethod
    def _shown(made: list, band_w: int) -> tuple[Cell, ...]:
        """The row's cells with the band cut to `band_w` (kept: the table compares rows on screen)."""
        c = made[1]
        fits = len(c[BAND][1]) <= band_w  # (most rows, most paints: the band is all shown, as made)
        made[3], made[4] = band_w, c if fits else (*c[:BAND], ("band", c[BAND][1][-band_w:]), *c[BAND + 1 :])
        return made[4]

    def _detail(self, key: str | None) -> None:
        """The selected GPU: its phase now; the verdict of its window with that verdict's own
        evidence, advice and command (each line under the label it belongs to); the window's shares,
        the job, and the node's processes on this GPU."""
        r = self._rows.get(key or "")
        # the same row (a node's rows are new objects after each of its polls) at the same width:
        # the pane already shows it
        shown, self._detail_of = self._detail_of, (r, self.size.width)
        if r is not None and shown is not None and shown[0] is r and shown[1] == self.size.width:
            return
        t = Text()
        if r is not None:
            g = r.gpu
            v = g.get("verdict") or {}
            t.append(f"{clean(r.target, 40)} GPU {clean(g.get('index', '-'), 4)}", "bold")
            if g:
                # the newest label, as the verdict below reads "now" (the row's "recent" column is the
                # last band steps' most common, smoothed for comparing nodes: headed so, not "phase",
                # since the two can differ on one screen)
                t.append(f"  now: {clean(g.get('phase', 'gathering'), 12)}")
            t.append("\n")
            if r.straggler:
                t.append(f"straggler candidate: {clean(r.straggler, 600)}\n", FLAG)
            if r.stale or not v:
                t.append(clean(r.stale or "no verdict yet", 200) + "\n", "dim")
            else:
                t.append(f"last {v.get('window_s', 60):.0f} s: {clean(v.get('headline', ''), 200)}\n", "bold")
                if v.get("evidence"):
                    t.append("  evidence: " + clean(v["evidence"], 400) + "\n")
                for a in v.get("advice", []):
                    t.append(f"  - {clean(a, 300)}\n")
                if v.get("command"):
                    t.append(f"  next: {clean(v['command'], 1000)}\n", "dim")
            t.append_text(self._gpu_context(r))
        self.query_one("#detail", TextPanel).update(t)

    def _gpu_context(self, r: Row) -> Text:
        """What else the node said about this GPU: the window's shares, its job, its processes."""
        t = Text()
        width = self.query_one("#detail", TextPanel).size.width or self.size.width
        gauges = r.gpu.get("gauges") or {}
        shown = [f"{m.title} {fmt(m, gauges[m.name])}" for m in METRICS if m.name in gauges]
        if shown:
            t.append(packed("gauges:", shown, width), "dim")
        if r.gpu.get("band"):
            t.append("band, oldest first: ").append(band_text(r.gpu["band"], self.letters, 240)).append("\n")
        shares = sorted((r.gpu.get("shares") or {}).items(), key=lambda kv: -kv[1])
        if shares:
            t.append(
                packed("shares, last minute:", [f"{clean(k, 12)} {100 * v:.0f} %" for k, v in shares], width)
            )
        job = r.gpu.get("job") or {}
        if job:
            t.append("job: " + ", ".join(f"{clean(k, 20)}={clean(v, 64)}" for k, v in job.items()) + "\n")
        node = self._node(r.target)
        snap, compact = None, False
        if node is not None:
            with node.lock:
                snap, compact = node.snapshot, node.compact
        for p in (snap or {}).get("processes", []):
            if r.gpu.get("index") in p.get("gpus", []):
                t.append(f"process {p['pid']} {clean(p['name'], 30)}  CPU {p['cpu_pct']:.0f} %\n")
        return t.append(FETCHING[1:], "dim") if compact else t

    def _node(self, target: str) -> NodeState | None:
        return next((n for n in node_list(self.source) if n.target == target), None)

    @on(RowTable.Highlighted)
    def _highlighted(self, event: RowTable.Highlighted) -> None:
        r = self._rows.get(event.key or "")
        if r is not None and isinstance(self.source, HttpPoller) and self.source.focus != r.target:
            self.source.want_full(r.target)  # the detail and the node screen show its full snapshot
        self._detail(event.key)

    @on(RowTable.Selected)
    def _selected(self, event: RowTable.Selected) -> None:
        r = self._rows.get(event.key)
        if r is None:
            return
        node = self._node(r.target)
        if node is not None:  # (the screen's border and padding take four cells, a scroll bar two)
            self.push_screen(NodeScreen(node, self.size.width - 6))
