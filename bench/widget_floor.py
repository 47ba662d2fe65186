"""What Textual alone costs for memtop's live screen (issue #39, RSS): a bare app with the live view's
widget tree (the same classes and counts: memtop's TextPanel, RowTable and tiles, Textual's Horizontal,
Vertical, VerticalScroll, Static and Footer with the same keys, memtop's stylesheet) showing the text a
live memtop showed (bench/data/live_screen_200x50.json, written by bench/live_parts.py), with no memtop
logic behind it: no collectors, pipeline, classifier or history. The timeline is a plain TiledLines
with the Timeline's tiles (Timeline itself needs the pipeline).

usage: python bench/widget_floor.py {still,tick} [INTERVAL] [--lean] [--fake-nvml] [--one-tile[=ID,...]] [SCREEN.json]
  still: drawn once; tick: every INTERVAL s (default 1) every panel's Strips made afresh and redrawn
  --one-tile: each panel one tile (memtop tiles its panels so a changed cell redraws one tile: the
              CPU's trade; this says what the tiles' widgets cost in memory); =ID,...: those panels only
              (e.g. =gpus,procs: the tables' tile per column)
  --lean, --fake-nvml: as bench/textual_floor.py (memtop's process-wide trims; NVML faked on the VM)
Run it under bench/pty_bench.py beside bench/textual_floor.py and memtop (200x50, as the screen was
recorded). `q` quits.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

from textual_floor import start

from memtop.commands.local import TRIM_AFTER_S, release_free_memory

HERE = Path(__file__).resolve().parent
SCREEN = HERE / "data" / "live_screen_200x50.json"
CSS = HERE.parent / "tui" / "memtop.tcss"


def run(screen: dict, tick: float | None, lean: bool, one_tile: set[str]) -> None:
    # Textual's modules memtop's app imports (its modal screens, filters, notifications) are loaded too
    import textual.filter  # noqa: F401
    import textual.notifications  # noqa: F401
    from memtop.tui.table import RowTable
    from memtop.tui.tiles import TextPanel, TiledLines
    from rich.segment import Segment
    from rich.style import Style
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import Horizontal, Vertical, VerticalScroll
    from textual.screen import ModalScreen  # noqa: F401
    from textual.strip import Strip
    from textual.widgets import Footer, Input, Static  # noqa: F401

    panels = screen["panels"]

    def strips(name: str) -> list[Strip]:
        return [
            Strip([Segment(t, Style.parse(s) if s else None) for t, s in line])
            for line in panels[name]["lines"]
        ]

    def panel(name: str) -> TiledLines:
        p = panels[name]
        if name in one_tile:
            return TiledLines(tiles=1, id=name)
        if p["class"] == "RowTable":
            return RowTable([(str(i), w) for i, w in enumerate(p["plan"])], id=name)
        if p["class"] == "TextPanel":
            return TextPanel(tiles=len(p["plan"]), id=name, ellipsis="…")
        return TiledLines(tiles=len(p["plan"]), id=name)

    class WidgetFloor(App):
        CSS_PATH = str(CSS)
        BINDINGS = [Binding("q", "quit", "quit")] + [
            Binding(k, "bell", d) for k, d in screen["footer"] if k != "q"
        ]

        def compose(self) -> ComposeResult:
            yield panel("header")
            yield panel("verdict")
            yield panel("gpus")
            yield panel("timeline")
            with Horizontal(id="bottom"), Vertical(id="left"):
                yield panel("host")
                yield Static(id="procs-note")
                yield panel("procs")
            with VerticalScroll(id="right"):
                yield panel("stacks")
                yield panel("caps")
            yield Footer()

        def on_mount(self) -> None:
            self.call_after_refresh(self._draw)
            if tick:
                self.set_interval(tick, self._draw)
            if lean:
                gc.enable()  # (memtop's app enables it at its first paint)
                self.set_timer(TRIM_AFTER_S, release_free_memory)

        def _draw(self) -> None:
            for name in panels:
                self.query_one(f"#{name}", TiledLines).set_lines(strips(name))

    WidgetFloor().run()


def main(argv: list[str]) -> int:
    lean = "--lean" in argv
    tiles = [
        a.partition("=")[2] or "header,verdict,gpus,timeline,host,procs,stacks,caps"
        for a in argv
        if a.startswith("--one-tile")
    ]
    one_tile = set(",".join(tiles).split(",")) - {""}
    argv = [a for a in argv if not a.startswith("--one-tile")]
    if not argv or argv[0] not in ("still", "tick"):
        print(__doc__, file=sys.stderr)
        return 2
    argv = start(argv)
    files = [a for a in argv[1:] if a.endswith(".json")]
    numbers = [a for a in argv[1:] if not a.endswith(".json")]
    screen = json.loads(Path(files[0] if files else SCREEN).read_text())["screen"]
    tick = float(numbers[0]) if numbers else 1.0 if argv[0] == "tick" else None
    run(screen, tick, lean, one_tile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
