"""Panels drawn as vertical tiles, so an update re-sends only the cells that changed.

Textual sends every cell of a dirty line from the *left edge of its widget* to the end of the
refreshed region (it crops a partial refresh at the right only: Textualize/textual#5625).
One wide widget therefore re-sends most of a line for a one-digit change. Here a panel is a
row of narrow tile widgets that each show a slice of the panel's lines: after an update only
the tiles whose slice changed are refreshed, which is close to the cell diff curses does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.containers import ScrollableContainer
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from typing_extensions import Self

TILE_CELLS = 32  # default tile width: smaller sends fewer bytes, larger costs less CPU (fewer widgets)
NULL = Style()  # every segment gets a style: NO_COLOR's monochrome filter cannot take None


def styled(strip: Strip) -> Strip:
    """The strip with a null style where a segment has none."""
    if all(seg.style is not None for seg in strip):
        return strip
    return Strip([Segment(t, NULL if st is None else st, c) for t, st, c in strip], strip.cell_length)


class KeepsRender(Widget):
    """Keeps what it last rendered until it is refreshed (Textual refreshes on restyle and resize).

    Textual renders every widget under the bounding box of all of a frame's dirty regions: with
    the verdict and the timeline both changing, that is the whole screen, and styling the lines
    of widgets that did not change (Textual's line cache sits under that pass) was a third of
    the UI's CPU.
    """

    _drawn: tuple[tuple[Region, Size], list[Strip]] | None = None

    def refresh(self, *regions: Region, **kw) -> Self:
        self._drawn = None
        return super().refresh(*regions, **kw)

    def render_lines(self, crop: Region) -> list[Strip]:
        # outer_size: `size` is a compositor lookup that walks the DOM, per tile per frame
        key = (crop, self.outer_size)
        if self._drawn is None or self._drawn[0] != key:
            self._drawn = (key, self._render_afresh(crop))
        return self._drawn[1]

    def _render_afresh(self, crop: Region) -> list[Strip]:
        return super().render_lines(crop)


class _Tile(KeepsRender):
    DEFAULT_CSS = "_Tile { height: auto; }"

    def __init__(self, panel: TiledLines, width: int | None) -> None:
        super().__init__()
        self.panel = panel
        if width is not None:
            self.styles.width = width
        else:
            self.styles.width = "1fr"

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.panel.line_count

    def on_resize(self) -> None:
        self.panel.forget_geometry()  # a tile's width moves the tiles right of it

    def _render_afresh(self, crop: Region) -> list[Strip]:
        # the offset is checked per fresh render (not per line, nor per kept render: Textual asks
        # every tile under a frame's dirty box for its lines, and `Widget.region` walks the DOM
        # up to the screen, which was a tenth of the UI's CPU at 1 Hz): a tile that moved without
        # changing size (the panel re-laid out) must not cut its lines at the old offset
        self.panel.check_geometry(self)
        return super()._render_afresh(crop)

    def render_line(self, y: int) -> Strip:
        return self.panel.piece(y, self)


class TiledLines(KeepsRender):
    """Lines (Strips) shown through tiles. Subclasses build lines and call ``set_lines``.

    ``widths``: fixed tile widths (e.g. one per table column); otherwise equal tiles of about
    TILE_CELLS cells across the panel's width.
    """

    DEFAULT_CSS = "TiledLines { layout: horizontal; height: auto; }"

    def __init__(self, widths: Sequence[int] | None = None, tiles: int = 200 // TILE_CELLS, **kw) -> None:
        super().__init__(**kw)
        self._plan: list[int | None] = list(widths) if widths else [None] * tiles
        # one tile draws the first frame; the others are mounted after it (each widget costs start-up time)
        self._tiles = [_Tile(self, sum(widths) if widths else None)]
        self._lines: list[Strip] = []
        self._floor = (0, 0)  # (width, line count) under which the panel does not shrink
        # each tile's (x offset in the panel, width): Widget.region is a compositor lookup per
        # call, too slow for every rendered line; a tile's resize clears it
        self._geom: dict[_Tile, tuple[int, int]] = {}
        # line -> tile offset -> that tile's cells, as segments: a Strip is made only for a tile that
        # draws the line (each Strip makes seven caches; most pieces only serve the diff)
        self._pieces: dict[int, dict[int, list[Segment]]] = {}
        self._resized = False  # set by a resize: the next update redraws every tile

    def compose(self):
        yield from self._tiles

    def on_mount(self) -> None:
        if len(self._plan) > 1:
            self.call_after_refresh(self._split)

    def _split(self) -> None:
        first, self._tiles = self._tiles[0], [_Tile(self, w) for w in self._plan]
        self.mount_all(self._tiles)
        first.remove()
        self.forget_geometry()

    def set_plan(self, widths: Sequence[int]) -> None:
        """Other fixed widths for the tiles (as many as before): only a change lays them out again."""
        if list(widths) == self._plan:
            return
        self._plan = list(widths)
        if len(self._tiles) == len(self._plan):
            for tile, w in zip(self._tiles, widths):
                tile.styles.width = w
        else:  # not split into its tiles yet: one tile as wide as the panel
            self._tiles[0].styles.width = sum(widths)
        self.forget_geometry()

    def forget_geometry(self) -> None:
        """After a resize every cut and kept render is stale: cut again and redraw every tile (only on
        a resize, so it costs nothing in steady state); again after the layout has settled."""
        self._geom = {}
        self._pieces = {}
        self._resized = True
        for t in self._tiles:
            t.refresh()

    def on_resize(self) -> None:
        self.forget_geometry()
        self.call_after_refresh(self.forget_geometry)

    def check_geometry(self, tile: _Tile) -> None:
        now = (tile.region.x - self.content_region.x, tile.size.width)
        if self._geom.get(tile, now) != now:
            self._geom = {}
            self._pieces = {}

    def geometry(self, tile: _Tile) -> tuple[int, int]:
        if tile not in self._geom:
            x = self.content_region.x
            self._geom = {t: (t.region.x - x, t.size.width) for t in (*self._tiles, tile)}
        return self._geom[tile]

    def _cut(self, line: Strip) -> dict[int, list[Segment]]:
        """One pass over a line gives every tile its cells (cheaper than a crop per tile)."""
        if not self._geom:
            self.geometry(self._tiles[0])
        n = line.cell_length
        edges = sorted({e for x0, w in self._geom.values() for e in (x0, x0 + w) if 0 < e <= n})
        return dict(zip([0, *edges], Segment.divide(line, edges)))

    def piece(self, y: int, tile: _Tile) -> Strip:
        x0, w = self.geometry(tile)
        if y >= len(self._lines):
            return Strip.blank(w, NULL)
        if y not in self._pieces:
            self._pieces[y] = self._cut(self._lines[y])
        got = self._pieces[y].get(x0)
        return (Strip(got) if got is not None else self._lines[y].crop(x0, x0 + w)).adjust_cell_length(
            w, NULL
        )

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def fit(self) -> None:
        """Drop the blank lines kept from taller texts: after a jump the screen shows another instant,
        laid out as a fresh start there would be."""
        self._floor = (0, 0)
        lines = self._lines
        while lines and lines[-1].cell_length == 0:  # padding is empty; a text's blank line is not
            lines = lines[:-1]
        if len(lines) != len(self._lines):
            self.set_lines(lines)

    def _room(self) -> int:
        """The most lines the kept height may pad to: in a scrolling container (the stacks and caps
        panels), no more than its visible rows leave beside the other panels there. Padding past them
        made the container scroll through blank lines: a scrollbar (its thumb's end a block character
        beside blank rows) and the panels below pushed out of sight."""
        box = self.parent
        if not isinstance(box, ScrollableContainer):
            return self._floor[1]
        others = sum(w.outer_size.height for w in box.children if w is not self and w.display)
        return box.scrollable_content_region.height - others

    def set_lines(self, lines: list[Strip], changed: list[tuple[int, int]] | None = None) -> None:
        """Show ``lines``; ``changed`` (line, tile) pairs, when the caller knows them, spare the diff.

        A panel keeps its height (blank lines at the end) until its width changes: a shorter one
        re-lays out and repaints the whole screen (~20 ms on the VM), and the rows below stay put.
        """
        lines = [styled(line) for line in lines]
        width, floor = self._floor
        floor = min(floor, self._room())
        if width == self.size.width and len(lines) < floor:
            lines = lines + [Strip([])] * (floor - len(lines))
        self._floor = (self.size.width, len(lines))
        old, self._lines = self._lines, lines
        old_pieces, self._pieces = self._pieces, {}
        if len(old) != len(lines) or self._resized:
            self._resized = False
            for t in self._tiles:
                t.refresh(layout=len(old) != len(lines))
            if len(old) != len(lines):
                # an explicit height: with `height: auto` a panel in a scrolling container kept the
                # height of its first, pre-layout render (wrapped at width 1) at a fresh start
                self.styles.height = len(lines)
            return
        if changed is not None and len(self._tiles) == len(self._plan):  # (line, tile) of the split tiles
            for y, k in changed:
                self._tiles[k].refresh(Region(0, y, self.geometry(self._tiles[k])[1], 1))
            return
        for y, (a, b) in enumerate(zip(old, lines)):
            if a == b:
                if y in old_pieces:
                    self._pieces[y] = old_pieces[y]
                continue
            before = old_pieces.get(y)
            if before is None:
                before = old_pieces[y] = self._cut(a)
            after = self._pieces[y] = self._cut(b)
            for t in self._tiles:
                x0, w = self.geometry(t)
                if before.get(x0) != after.get(x0):
                    t.refresh(Region(0, y, w, 1))


class TextPanel(TiledLines):
    """A Rich Text shown as tiled lines, wrapped to the panel's width; or, with ``ellipsis``, one
    screen line per text line, a longer one cut with that ellipsis (`...` under --ascii)."""

    def __init__(self, ellipsis: str | None = None, hang: bool = False, **kw) -> None:
        """``hang``: a wrapped line's continuation rows start under its text, two cells further in
        (a detail's "  evidence: ..." wrapped to column 0, where it read as a line of its own)."""
        super().__init__(**kw)
        self.ellipsis = ellipsis
        self.hang = hang
        self._src: Text | None = None  # as given, to compare with the next update
        self._text: Text | None = None

    @property
    def text(self) -> Text:
        return self._text or Text()

    def update(self, text: Text) -> None:
        if text == self._src:
            return
        self._src = text
        self._text = text.copy()
        self._text.rstrip()  # a trailing newline is not a blank line
        self._render_text()

    def on_resize(self) -> None:
        if self._text is not None:
            self._render_text()

    def _render_text(self) -> None:
        console: Console = self.app.console
        width = self.content_region.width
        if width <= 0:
            return  # not laid out yet: on_resize renders it
        lines: Iterable[Text]
        if self._text is None:
            lines = []
        elif self.ellipsis is not None:
            lines = [self._ellipsize(line, width, self.ellipsis) for line in self._text.split("\n")]
        elif self.hang:
            lines = [row for line in self._text.split("\n") for row in self._hanging(line, console, width)]
        else:
            lines = self._text.wrap(console, width, overflow="crop")
        self.set_lines([Strip(line.render(console)).adjust_cell_length(width) for line in lines])

    @staticmethod
    def _hanging(line: Text, console: Console, width: int) -> list[Text]:
        rows = line.wrap(console, width, overflow="crop")
        if len(rows) < 2:
            return list(rows)
        indent = min(width // 2, len(line.plain) - len(line.plain.lstrip(" ")) + 2)
        rest = line[len(rows[0].plain) :]
        rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]
        return [
            rows[0],
            *(Text(" " * indent).append_text(r) for r in rest.wrap(console, width - indent, overflow="crop")),
        ]

    @staticmethod
    def _ellipsize(line: Text, width: int, ellipsis: str) -> Text:
        if line.cell_len <= width:
            return line
        line = line.copy()
        line.truncate(max(width - len(ellipsis), 0))
        line.append(ellipsis, style="dim")
        return line
