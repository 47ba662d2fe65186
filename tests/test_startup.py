"""Numbers on screen early: live starts NVML before Textual is imported (so the driver's start-up
overlaps Textual's), and a GPU reading that arrives before the app is up is in its first paint."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace

from conftest import REC
from memtop.tui.app import MemtopApp
from memtop.tui.table import RowTable

from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording


# live() in a fresh process with a stand-in for the TUI: what had started, and what was loaded,
# when the app would have been built; and whether the sampler was stopped after it
def _text(cells) -> str:
    return " ".join(c.plain if hasattr(c, "plain") else str(c) for c in cells)


_PROBE = textwrap.dedent(
    """
    import sys
    from memtop.cli import build_parser
    from memtop.commands import local

    seen = {}
    local._need_tty = lambda: None

    def run_app(pipeline, controller, args):
        seen["started"] = controller._thread.ident is not None
        seen["textual"] = any(m == "textual" or m.startswith("textual.") for m in sys.modules)
        seen["ssl"] = sys.modules.get("ssl", "absent")
        controller._thread.join(60)  # (a bound for a loaded machine)
        seen["sampler"] = controller.sampler is not None
        seen["controller"] = controller
        return 0

    local._run_app = run_app
    rc = local.live(build_parser().parse_args(["--no-stacks", "--no-perf"]))
    s, trim = seen["controller"].sampler, seen["controller"]._trim
    trim.join(60)  # stop() cancelled the start-up trim (it was due 3 s after the start): no thread left
    print(rc, seen["started"], seen["textual"], seen["ssl"], seen["sampler"], s._stop.is_set(), trim.is_alive())
    # (resident memory, #39) what the live view never uses is never imported: the server, whose port
    # the argument parser shows, and py-spy's collector under --no-stacks
    print(*(m in sys.modules for m in ("memtop.commands.serve", "memtop.collectors.stacks")))
    """
)


def test_live_starts_sampling_before_textual_is_imported_and_stops_it_after():
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # exit 0; sampling started; Textual not yet loaded; ssl kept out; the sampler built, then stopped;
    # the start-up trim's timer gone with it; neither the server nor the stacks collector loaded
    assert r.stdout.split() == ["0", "True", "False", "None", "True", "True", "False", "False", "False"], (
        r.stdout + r.stderr
    )


def test_release_free_memory_keeps_what_is_in_use():
    """gc.collect and malloc_trim: live objects and the interpreter are untouched (a crash here would
    kill a live view 3 s in)."""
    from memtop.commands.local import release_free_memory

    kept = [bytes(1 << 20) for _ in range(4)]
    del kept[::2]  # half freed: glibc has free pages between the live blocks
    release_free_memory()
    assert [len(b) for b in kept] == [1 << 20, 1 << 20] and not any(kept[0])


async def test_a_reading_that_came_before_the_app_is_in_its_first_paint():
    frames = list(Recording(REC[2]).frames())[:3]
    pipe = Pipeline(Status("live"), meta={"host": "test"})
    pipe.on_frame(replace(frames[0], gpus=()))  # the sampler's first frame: NVML not answered yet
    pipe.on_frame(frames[1])  # the first reading: the app is not up, nobody is told
    app = MemtopApp(pipe, hangup_guard=False)
    async with app.run_test(size=(200, 50)) as pilot:
        assert app._paints >= 1  # on_mount paints before the first pause
        power = frames[1].gpus[0].power_w
        assert power is not None
        await pilot.pause()
        table = app.query_one("#gpus", RowTable)
        assert table.keys == [str(g.index) for g in frames[1].gpus]
        assert f"{power:.0f}W" in _text(table._rows[0][1])


async def test_rows_updated_before_the_table_is_split_into_column_tiles():
    """The first paint now holds a reading, so a second one can come before the table's column
    tiles are mounted: its changed cells name tiles that do not exist yet (an IndexError once)."""
    from textual.app import App

    cols = (("a", 4), ("b", 4), ("c", 4))

    class One(App):
        def compose(self):
            yield RowTable(cols, id="t")

        def on_mount(self) -> None:
            t = self.query_one(RowTable)
            t.set_rows([("0", ("1", "2", "3"))])
            t.set_rows([("0", ("1", "5", "6"))])  # same key, other cells: the known-cells path

    app = One()
    async with app.run_test(size=(40, 5)) as pilot:
        await pilot.pause()
        t = app.query_one(RowTable)
        assert len(t._tiles) == len(cols)  # split after the first frame
        assert app.return_code is None and t._rows == [("0", ("1", "5", "6"))]
        text = "".join(seg.text for strip in t._lines for seg in strip)
        assert "5" in text and "6" in text


# live() in a fresh process with the driver stood in for: what was imported when nvmlInit began
_EARLY = textwrap.dedent(
    """
    import sys, time
    from memtop.cli import build_parser
    from memtop.collectors import nvml_calls
    from memtop.commands import local

    seen = {}

    class Driver(nvml_calls.RealNvml):
        calls = 0

        def init(self):
            if self._system is None:
                Driver.calls += 1
                seen.setdefault("loaded", [m for m in ("memtop.live.pipeline", "memtop.collectors.host") if m in sys.modules])
                time.sleep(0.2)  # nvmlInit's own time, the GIL released
                self._system = {"driver": "x", "nvml_version": "x", "cuda_driver": 0, "count": 0}
            return self._system

        def shutdown(self):
            self._system = None

    nvml_calls.RealNvml = Driver
    local._need_tty = lambda: None

    def run_app(pipeline, controller, args):
        controller._thread.join(60)
        seen["caps"] = [c.detail for c in controller.sampler.capabilities() if c.source == "nvml"]
        return 0

    local._run_app = run_app
    rc = local.live(build_parser().parse_args(["--no-stacks", "--no-perf"]))
    print(rc, seen["loaded"], Driver.calls, seen["caps"])
    """
)


def test_live_starts_the_driver_before_it_imports_the_pipeline_and_the_collectors():
    """nvmlInit (0.1-0.3 s on the H100) overlaps every import after the flags are read, and the
    sampler uses the driver so started: one nvmlInit, not two."""
    r = subprocess.run([sys.executable, "-c", _EARLY], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(" ", 3) == [
        "0",
        "[]",
        "1",
        "['driver x, NVML x', 'the driver reports no GPUs']\n",
    ], r.stdout + r.stderr


async def test_the_app_turns_the_garbage_collector_back_on_after_its_first_paint():
    """The TUI commands start without the cyclic collector (commands/local.py): the app's first
    paint ends that, whatever started it."""
    import gc

    gc.disable()
    try:
        app = MemtopApp(Pipeline(Status("live"), meta={"host": "test"}), hangup_guard=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert gc.isenabled() and app._paints >= 1
    finally:
        gc.enable()
