"""RowTable: a keyed table whose tiles are its columns, so a changed value re-sends one cell.

DataTable dirties the whole table on any cell update: with 8 GPUs changing every second that
was 5.8 of 9.8 KiB/s and over half the CPU of a replay (VM, 200x50). See tiles.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.css.scalar import Unit
from textual.message import Message
from textual.strip import Strip

from .tiles import TiledLines

Cell = str | Text
GAP = 1  # blank cells after each column


class RowTable(TiledLines, can_focus=True):
    """Rows are (key, cells); the cursor row is highlighted; rows scroll with the cursor."""

    DEFAULT_CSS = """
    RowTable { width: auto; }
    RowTable > .rowtable--header { text-style: bold; }
    RowTable > .rowtable--cursor { text-style: reverse; }
    RowTable:focus > .rowtable--cursor { text-style: reverse bold; }
    """
    COMPONENT_CLASSES = {"rowtable--header", "rowtable--cursor"}
    BINDINGS = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "move(-10)", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("enter", "select", show=False),
    ]

    class Highlighted(Message):
        def __init__(self, table: RowTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> RowTable:
            return self.table

    class Selected(Highlighted):
        pass

    def __init__(self, columns: Sequence[tuple[str, int]], **kw) -> None:
        self.columns = tuple(columns)
        super().__init__(widths=_cells(self.columns), **kw)
        self._rows: list[tuple[str, tuple[Cell, ...]]] = []
        self.cursor = 0
        self._top = 0  # first row shown

    def set_width(self, column: int, width: int) -> None:
        """Give one column another width (the process table's top frame takes what the screen has); 0
        hides it, gap and all."""
        name, w = self.columns[column]
        if w == width:
            return
        self.columns = (*self.columns[:column], (name, width), *self.columns[column + 1 :])
        self.set_plan(_cells(self.columns))  # a tile per column
        self._redraw()

    def set_titles(self, titles: list[str]) -> None:
        """Other column titles, same widths (NVML-only: what the SM column holds is NVML util)."""
        if titles == [name for name, _ in self.columns]:
            return
        self.columns = tuple((t, w) for t, (_, w) in zip(titles, self.columns, strict=True))
        self._redraw()

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self._rows]

    @property
    def cursor_key(self) -> str | None:
        return self._rows[self.cursor][0] if self._rows else None

    def set_rows(self, rows: list[tuple[str, tuple[Cell, ...]]]) -> None:
        key = self.cursor_key
        old, self._rows = self._rows, rows
        keys = self.keys
        self.cursor = keys.index(key) if key in keys else min(self.cursor, max(0, len(rows) - 1))
        if [k for k, _ in old] == keys and key == self.cursor_key:
            # same rows, same cursor: the changed cells are known without comparing strips
            changed = [
                (1 + i - self._top, c)
                for i, ((_, a), (_, b)) in enumerate(zip(old, rows))
                if i >= self._top and a != b
                for c, (x, y) in enumerate(zip(a, b))
                if x != y
            ]
            self._redraw(changed)
        else:
            self._redraw()
        if rows and key != self.cursor_key:
            self.post_message(self.Highlighted(self, rows[self.cursor][0]))

    # -- drawing ---------------------------------------------------------------------------
    def _visible(self) -> int:
        """Data rows that fit (the header takes one line); all of them before the first layout. A
        table whose height follows its rows may grow to its max-height: taking its height now, a new
        row above the cursor scrolled the cursor's row into the one line there and the table, its
        line count unchanged, never grew (live on two GPUs, rank 0 stayed hidden)."""
        h = self.size.height
        cap = self.styles.max_height
        if cap is not None and cap.unit == Unit.CELLS:
            h = max(h, int(cap.value))
        return len(self._rows) if h <= 1 else min(len(self._rows), h - 1)

    def _redraw(self, changed: list[tuple[int, int]] | None = None) -> None:
        if not self.is_mounted:  # component styles exist from mount on
            return
        top = min(self._top, self.cursor)
        top = max(top, self.cursor - self._visible() + 1, 0)
        if top != self._top:
            self._top, changed = top, None
        header = self._strip(
            [name for name, _ in self.columns], self.get_component_rich_style("rowtable--header")
        )
        cursor = self.get_component_rich_style("rowtable--cursor")
        lines = [header]
        for i in range(self._top, len(self._rows)):
            lines.append(self._strip(self._rows[i][1], cursor if i == self.cursor else Style()))
        self.set_lines(lines, changed)

    def _strip(self, cells: Sequence[Cell], base: Style) -> Strip:
        segs = []
        for (_, w), cell in zip(self.columns, cells):
            if not w:
                continue  # hidden (a narrow screen)
            if isinstance(cell, Text):
                st = cell.style if isinstance(cell.style, Style) else Style.parse(cell.style or "")
                segs.append(Segment(_fit(cell.plain, w), base + st))
            else:
                segs.append(Segment(_fit(cell, w), base))
            segs.append(Segment(" " * GAP, base))
        return Strip(segs)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._redraw()

    def on_mount(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    # -- cursor ----------------------------------------------------------------------------
    def move_cursor(self, row: int) -> None:
        if not self._rows:
            return
        row = max(0, min(len(self._rows) - 1, row))
        if row != self.cursor:
            self.cursor = row
            self._redraw()
            self.post_message(self.Highlighted(self, self._rows[row][0]))

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor + step)

    def action_select(self) -> None:
        if self._rows:
            self.post_message(self.Selected(self, self._rows[self.cursor][0]))

    def on_focus(self) -> None:
        self._redraw()  # the cursor style differs with focus

    def on_blur(self) -> None:
        self._redraw()

    def on_click(self, event: events.Click) -> None:
        i = self._top + event.y - 1
        if event.y >= 1 and i < len(self._rows):
            if i == self.cursor:
                self.action_select()
            self.move_cursor(i)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.move_cursor(self.cursor + 1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.move_cursor(self.cursor - 1)


def _cells(columns: Sequence[tuple[str, int]]) -> list[int]:
    """Each column's cells on screen: its width and the gap after it, none for a hidden one."""
    return [w + GAP if w else 0 for _, w in columns]


def _fit(s: str, w: int) -> str:
    """Exactly w cells (wide characters counted as two)."""
    return set_cell_size(s, w)
