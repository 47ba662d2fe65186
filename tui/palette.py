"""Presentation constants in one place: phase colours per theme, ramps, glyphs (Unicode and ASCII).

Phase colours come from Okabe & Ito's colour-blind-safe set, not from ANSI names: Textual's themes
remap the 16 ANSI colours, and in 11 dark themes magenta and red (transfer and sync) became one pink.
Each theme gets its own palette (dark or light base, idle blended from the theme's own colours);
`tests/test_tui_view.py` checks that the eight stay apart under deuteranopia and protanopia.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rich.cells import cell_len
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.color import Color as TColor
from textual.filter import LineFilter
from textual.theme import Theme

from memtop.analysis.phases import CHARS

PHASES = ("compute", "memory", "transfer", "sync", "input", "cpu", "comm", "idle")

# Okabe-Ito: bluish green, sky blue, reddish purple, vermillion, yellow, blue, orange; idle is grey
_DARK = {
    "compute": "#00B386",  # Okabe-Ito bluish green #009E73 lifted (apart from grey under deuteranopia)
    "memory": "#56B4E9",
    "transfer": "#CC79A7",
    "sync": "#D55E00",
    "input": "#F0E442",
    "cpu": "#3C8DFF",  # Okabe-Ito blue lifted: #0072B2 is too dark on a dark background
    "comm": "#E69F00",
}
_LIGHT = {
    "compute": "#007A59",
    "memory": "#3A9AD9",
    "transfer": "#B9508F",
    "sync": "#B84A00",
    "input": "#C8B400",  # yellow darkened: #F0E442 vanishes on white
    "cpu": "#0050A0",
    # not orange: on white any orange dark enough to read meets sync's vermillion under deuteranopia
    "comm": "#8B5CF6",
}
# what a name in the default palette means when a theme is not known (e.g. the ansi themes' "default")
_DARK_BG, _DARK_FG, _LIGHT_BG, _LIGHT_FG = "#101010", "#e0e0e0", "#f5f5f5", "#202020"

# stack classes (the stacks panel): reuse the phase each class explains
CLASS_PHASE = {
    "sync": "sync",
    "copy": "transfer",
    "data": "input",
    "comm": "comm",
    "other": "cpu",
    "idle": "idle",
}

BLOCKS = " ▁▂▃▄▅▆▇█"
ASCII_BLOCKS = " .:-=+*#@"


class Glyphs:
    """Every non-ASCII character the TUI draws, with its ASCII stand-in (`--ascii`)."""

    def __init__(self, ascii_only: bool) -> None:
        a = ascii_only
        self.ascii = a
        self.blocks = ASCII_BLOCKS if a else BLOCKS
        self.full = "#" if a else "█"
        self.cursor = "|" if a else "▏"
        self.times = "x" if a else "×"
        self.arrow = "->" if a else "→"
        self.dash = "-" if a else "—"
        self.dot = "*" if a else "●"
        self.play = ">" if a else "▶"
        self.pause = "||" if a else "⏸"
        self.ellipsis = "..." if a else "…"
        self.sep = "|" if a else "·"
        self.gap = "v" if a else "▼"


def _hex(c: str | None, fallback: str) -> str:
    if not c or not c.startswith("#"):
        return fallback
    return c[:7]


def _blend(a: str, b: str, f: float) -> str:
    ca, cb = Color.parse(a).get_truecolor(), Color.parse(b).get_truecolor()
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(ca, cb))


def _grey(c: str) -> str:
    v = round(sum(Color.parse(c).get_truecolor()) / 3)
    return f"#{v:02x}{v:02x}{v:02x}"


@lru_cache(64)
def _colors(dark: bool, background: str | None, foreground: str | None) -> dict[str, str]:
    bg = _hex(background, _DARK_BG if dark else _LIGHT_BG)
    fg = _hex(foreground, _DARK_FG if dark else _LIGHT_FG)
    out = dict(_DARK if dark else _LIGHT)
    out["idle"] = _grey(_blend(bg, fg, 0.38))  # visible, quieter than any phase, and hue-free
    out["other"] = _blend(bg, fg, 0.75)
    out["warmup"] = _blend(bg, fg, 0.25)
    return out


def phase_colors(theme: Theme | None) -> dict[str, str]:
    """The phase palette of a theme (phase -> #rrggbb), idle/other/warmup included."""
    if theme is None:
        return _colors(True, None, None)
    return _colors(theme.dark, theme.background, theme.foreground)


@lru_cache(64)
def _styles(dark: bool, background: str | None, foreground: str | None) -> dict[str, Style]:
    return {k: Style(color=v) for k, v in _colors(dark, background, foreground).items()}


def phase_styles(theme: Theme | None) -> dict[str, Style]:
    if theme is None:
        return _styles(True, None, None)
    return _styles(theme.dark, theme.background, theme.foreground)


def letter_style(color: str) -> Style:
    """A phase letter on its colour (letters on request, any mode): dark or light ink by luminance."""
    r, g, b = Color.parse(color).get_truecolor()
    ink = "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 110 else "#ffffff"
    return Style(color=ink, bgcolor=color, bold=True)


@dataclass(frozen=True)
class Look:
    """What a frame is drawn with: the theme's phase colours, the glyph set, phase letters on or off."""

    colors: dict[str, str]
    glyphs: Glyphs
    styles: dict[str, Style]
    letters: bool = False

    def phase(self, name: str) -> Style:
        return self.styles.get(name) or self.styles["other"]

    def mark(self, name: str) -> tuple[str, Style]:
        """One cell of a phase as the band, the overview strip and the legend draw it: its letter on its
        colour (letters on: NO_COLOR's default, `l`), its letter in its colour (--ascii), else a block."""
        if self.letters:
            return CHARS.get(name, "?"), letter_style(self.colors.get(name, self.colors["other"]))
        return (CHARS.get(name, "?") if self.glyphs.ascii else self.glyphs.full), self.phase(name)

    def stack_class(self, klass: str) -> Style:
        return self.phase(CLASS_PHASE.get(klass, "other"))


_GLYPHS = {a: Glyphs(a) for a in (False, True)}


def look(theme: Theme | None, ascii_only: bool = False, letters: bool = False) -> Look:
    return Look(phase_colors(theme), _GLYPHS[ascii_only], phase_styles(theme), letters)


# -- --ascii: a line filter over everything drawn (Textual's own widgets too: borders, footer,
# toasts, the command palette), one printable ASCII character per cell
_ASCII = {
    **{c: "-" for c in "─━┄┅┈┉╌╍═╴╶╸╺▔▁"},
    **{c: "|" for c in "│┃┆┇┊┋╎╏║╵╷╹╻▏▎▍▌▐▕"},
    **{c: "+" for c in "┌┐└┘├┤┬┴┼╭╮╯╰╔╗╚╝╠╣╦╩╬┏┓┗┛┣┫┳┻╋"},
    **{c: "#" for c in "█▇▆▅▄▃▂▀▉▊▋▓▒░■"},
    "…": ".",
    "·": ".",
    "×": "x",
    "→": ">",
    "←": "<",
    "↑": "^",
    "↓": "v",
    "—": "-",
    "–": "-",
    "▶": ">",
    "▼": "v",
    "▲": "^",
    "⏸": "=",
    "●": "*",
    "°": "o",
}


def to_ascii(text: str) -> str:
    """Printable ASCII of the same cell width (a wide character becomes two cells of `?`)."""
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if " " <= ch <= "~":
            out.append(ch)
        elif ch in _ASCII:
            out.append(_ASCII[ch])
        else:
            out.append("?" * max(cell_len(ch), 0))
    return "".join(out)


class AsciiFilter(LineFilter):
    def apply(self, segments: list[Segment], background: TColor) -> list[Segment]:
        return [Segment(to_ascii(t), st, c) for t, st, c in segments]
