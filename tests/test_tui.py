"""The Textual app: Pilot tests and snapshots, on real H100 recordings."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import REC
from memtop.tui.app import GpuDetail, HelpScreen, MemtopApp
from memtop.tui.tiles import TextPanel
from memtop.tui.timeline import Timeline
from multigpu import multi_gpu_of
from pilots import refreshed, until
from rich.text import Text
from textual import events
from textual.app import App
from textual.widget import Widget

from memtop.live.pipeline import Pipeline, ReplaySource, Status
from memtop.storage.store import Recording

_FRAMES: dict = {}


def _frames(seed: int = 0):
    if seed not in _FRAMES:
        _FRAMES[seed] = list(Recording(REC[seed]).frames())
    return _FRAMES[seed]


def _pipeline(n_gpus: int = 1, upto: int = 900) -> Pipeline:
    rec = Recording(REC[0])
    frames = _frames()
    if n_gpus > 1:
        frames = multi_gpu_of(frames, n_gpus)
    p = Pipeline(
        Status("replay", position=frames[upto].t - rec.t0, duration=rec.duration, paused=True), meta=rec.meta
    )
    for f in frames[:upto]:
        p.on_frame(f, tick=False)
    return p


def _app(n_gpus: int = 1, **kw) -> MemtopApp:
    return MemtopApp(_pipeline(n_gpus), hangup_guard=False, **kw)


@pytest.mark.parametrize(("size", "gpus"), [((80, 24), 1), ((200, 50), 1), ((80, 24), 8), ((200, 50), 8)])
def test_snapshot(snap_compare, size, gpus):
    assert snap_compare(_app(gpus), terminal_size=size)


def test_snapshot_ascii(snap_compare):
    assert snap_compare(_app(1, ascii_only=True), terminal_size=(120, 30))


async def test_help_gpu_switch_zoom_and_quit():
    app = _app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        # (a key reaches the app a loop turn after press() returns on a loaded machine: each is waited on)
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        assert app.gpu == 0
        await pilot.press("g", "g")
        assert await until(pilot, lambda: app.gpu == 2)
        await pilot.press("G")
        assert await until(pilot, lambda: app.gpu == 1)
        tl = app.query_one(Timeline)
        await pilot.press("z")
        assert await until(pilot, lambda: tl.span_s == 60)
        await pilot.press("Z", "Z")
        assert await until(pilot, lambda: tl.span_s == 240)
        await pilot.press("q")
    assert app.return_code == 0


async def test_keys_still_queued_when_the_app_ends_are_dropped():
    """Keys read as the app ends (typed right after q, or still bubbling up from a widget when q ended
    it) reached Textual's binding check after the exit had emptied the screen stack: ScreenStackError
    (a flake of the test above under load, after its q)."""
    app = _app(1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for key in ("q", "g"):  # queued; leaving the block ends the app before it takes them
            event = events.Key(key, key)
            event.set_sender(app)
            app._driver.send_message(event)
    # (run_test raises what the app raised)


async def test_gpu_detail_screen():
    app = _app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        table = app.query_one("#gpus")
        assert await until(pilot, lambda: len(table.keys) == 8)  # the first paint: rows to move over
        table.focus()
        await pilot.press("down")
        assert await until(pilot, lambda: table.cursor_key == "1")
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, GpuDetail))
        assert app.screen.gpu == 1
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, GpuDetail))


async def test_process_selection_drives_the_stacks_panel():
    app = _app(1)
    async with app.run_test(size=(160, 50)) as pilot:
        stacks = app.query_one("#stacks", TextPanel)
        assert await until(pilot, lambda: app.selected_pid is not None and "MainThread" in stacks.text.plain)


async def test_resize_degrades_without_crashing():
    app = _app(8)
    async with app.run_test(size=(200, 50)) as pilot:
        for w, h in ((80, 24), (40, 12), (300, 80), (120, 40)):
            await pilot.resize_terminal(w, h)
            await pilot.pause()
            app._paint()
        assert app.is_running


async def test_replay_controls_pause_seek_speed_next_phase():
    """The keys reach the replay; its pace at a speed is test_replay_paces_... (a virtual clock)."""
    from memtop.analysis.colscan import phase_runs

    rec = Recording(REC[0])
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    src = ReplaySource(rec, pipe, speed=16.0, fast_runs=phase_runs)  # (as the CLI makes it)
    step = max(b.t - a.t for a, b in zip(_frames(), _frames()[1:50]))  # the recording's frame interval
    app = MemtopApp(pipe, src, hangup_guard=False, paint_rate=4)
    async with app.run_test(size=(160, 45)) as pilot:
        assert await until(pilot, lambda: pipe.status.position > 8)
        await pilot.press("space")
        assert await until(pilot, lambda: pipe.status.paused)
        p0 = src.position
        await pilot.pause(0.5)
        # paused really stops: at most the Frame already being waited for when space came
        assert p0 <= src.position <= p0 + step + 1e-6
        p0 = src.position
        await pilot.press("right")  # seek while paused (it steps from where the replay is)
        assert await until(pilot, lambda: src.position >= p0 + 9)
        before = src.position
        await pilot.press("n")
        assert await until(pilot, lambda: src.position > before)
        await pilot.press("home")
        assert await until(pilot, lambda: src.position < before)
        await pilot.press("plus")
        assert await until(pilot, lambda: src.speed == 32)
        await pilot.press("minus", "minus")
        assert await until(pilot, lambda: src.speed == 8)
        await pilot.press("space")
        assert await until(pilot, lambda: not pipe.status.paused)
        await pilot.press("q")


class _VirtualWake:
    """The replay's wake-up event on a virtual clock: a wait moves the clock on by its whole timeout
    at once; ``on_wait`` may pause, play or stop the replay at a virtual instant."""

    def __init__(self, on_wait: Callable[[float], None]) -> None:
        self.now = 0.0
        self._on_wait = on_wait

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def wait(self, timeout: float) -> bool:
        self.now += timeout
        self._on_wait(self.now)
        return False


def test_replay_paces_frames_by_their_recorded_gaps_over_speed():
    """At speed s a Frame t seconds after the last is shown t/s (virtual) seconds after it; a speed
    change holds from the next Frame; a pause shows nothing until play, then paces from there."""
    rec = Recording(REC[0])
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    shown: list[tuple[float, float, float]] = []  # (virtual time, frame time, speed)
    played_at: list[float] = []

    def on_wait(now: float) -> None:
        if src.paused and now >= 50.0 and not played_at:
            src.toggle_pause()
            played_at.append(now)
        if now > 60.0:
            src.stop()

    wake = _VirtualWake(on_wait)
    src = ReplaySource(rec, pipe, speed=16.0, clock=lambda: wake.now)
    src._wake = wake  # (the event's timeouts are the pace's waits)
    real = pipe.on_frame

    def on_frame(f, tick: bool = True) -> None:
        shown.append((wake.now, f.t, src.speed))
        real(f, tick)
        if len(shown) == 10:
            src.set_speed(4.0)
        elif len(shown) == 20:
            src.toggle_pause()

    pipe.on_frame = on_frame
    src._run()
    assert len(shown) > 25 and shown[0][0] == 0.0
    assert [s for _, _, s in shown[:10]] == [16.0] * 10 and shown[10][2] == 4.0
    for (w0, t0, _), (w1, t1, speed) in zip(shown[:19], shown[1:20]):
        assert w1 - w0 == pytest.approx((t1 - t0) / speed)
    (play,) = played_at
    assert shown[20][0] == pytest.approx(play + (shown[20][1] - shown[19][1]) / 4.0)
    assert pipe.status.paused is False and pipe.status.speed == 4.0


async def test_no_gpu_live_view_says_so():
    from memtop.core.model import Capability, CapState, Frame

    p = Pipeline(Status("live"), meta={"host": "test"})
    cap = Capability("nvml", "driver", CapState.UNSUPPORTED, "NVIDIA driver not found (libnvidia-ml.so.1)")
    host = _frames()[100].host
    p.on_frame(Frame(t=1.0, host=host, caps=(cap,)), tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:

        def shown() -> str:
            return (
                app.query_one("#verdict", TextPanel).text.plain
                + app.query_one("#header", TextPanel).text.plain
            )

        assert await until(pilot, lambda: "no GPU found" in shown()), shown()  # the first paint
        text = shown()
        assert "--demo" in text
        assert "--pid" not in text  # the recording's host has its processes: they are shown


async def test_no_gpu_and_no_process_says_how_to_pick_one():
    """Without NVML no process is known to use a GPU: the screen names --pid, where it once showed
    an empty process table and nothing more."""
    from dataclasses import replace

    from memtop.core.model import Capability, CapState, Frame

    p = Pipeline(Status("live"), meta={"host": "test"})
    cap = Capability("nvml", "driver", CapState.UNSUPPORTED, "NVIDIA driver not found (libnvidia-ml.so.1)")
    host = replace(_frames()[100].host, procs=())
    p.on_frame(Frame(t=1.0, host=host, caps=(cap,)), tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:

        def screen() -> list[str]:
            return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]

        assert await until(pilot, lambda: any("--pid" in r for r in screen()))  # the first paint
        rows = screen()
        assert any(r.strip().startswith("`memtop --pid PID` watches a process you pick") for r in rows)
        assert "memtop --pid PID" in app.query_one("#stacks", TextPanel).text.plain


async def test_faults_during_a_run_show_and_the_app_goes_on():
    from dataclasses import replace

    p = _pipeline(1, upto=300)
    f = _frames()[300]
    p.on_frame(replace(f, notes=("host collector failed: OSError: boom",)), tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(160, 45)) as pilot:
        caps = app.query_one("#caps", TextPanel)
        assert await until(pilot, lambda: "boom" in caps.text.plain), caps.text.plain  # the first paint
        assert app.is_running


async def test_sampling_that_cannot_start_shows_in_the_header():
    import argparse

    from memtop.commands.local import LiveController

    p = Pipeline(Status("live"), meta={"host": "test"})
    app = MemtopApp(p, LiveController(argparse.Namespace(), p), hangup_guard=False)  # no options: it fails
    async with app.run_test(size=(160, 45)) as pilot:
        header = app.query_one("#header", TextPanel)
        assert await until(pilot, lambda: "sampling could not start" in header.text.plain), header.text.plain
        assert "sampling could not start: AttributeError" in header.text.plain
        assert app.is_running


def test_an_unknown_theme_is_a_one_line_error_naming_the_themes():
    from memtop.core.errors import UserError

    with pytest.raises(UserError, match="unknown theme 'nope'; themes: .*nord"):
        MemtopApp(_pipeline(), theme="nope")
    assert MemtopApp(_pipeline(), theme="nord").theme == "nord"


def _app_of(make: Callable[[], Widget]) -> App:
    """An app that shows one widget, made by ``make``."""

    class One(App):
        def compose(self):
            yield make()

    return One()


async def test_kept_renders_follow_updates_and_theme_changes():
    """Tiles keep their last render (tiles.KeepsRender): what changes must still reach the screen."""
    app = _app_of(lambda: TextPanel(tiles=3))
    async with app.run_test(size=(60, 6)) as pilot:
        panel = app.query_one(TextPanel)
        panel.update(Text("alpha " * 8))
        assert await until(pilot, lambda: "alpha" in app.export_screenshot())
        panel.update(Text("beta " * 8))
        assert await until(pilot, lambda: "alpha" not in app.export_screenshot())
        shot = app.export_screenshot()
        assert "beta" in shot
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        # the theme's colours reached every tile
        assert await until(pilot, lambda: App.export_screenshot(app) != shot)
        # and the tiles went back to keeping their render
        assert await until(pilot, lambda: panel._tiles[-1]._drawn is not None)


async def test_a_panel_keeps_its_height_until_its_width_changes():
    """Fewer lines leave blank ones (no re-layout of the screen); a resize lets it shrink."""
    app = _app_of(lambda: TextPanel(tiles=2))
    async with app.run_test(size=(60, 10)) as pilot:
        panel = app.query_one(TextPanel)
        panel.update(Text("one\ntwo\nthree"))
        assert await until(pilot, lambda: panel.size.height == 3)
        panel.update(Text("four"))
        assert await until(pilot, lambda: "four" in app.export_screenshot())
        assert await refreshed(pilot)  # (a shrink would be laid out by now)
        assert panel.line_count == 3 and panel.size.height == 3
        assert "three" not in app.export_screenshot()
        width = panel.size.width
        await pilot.resize_terminal(50, 10)
        assert await until(pilot, lambda: panel.size.width != width)
        panel.update(Text("five"))
        assert await until(pilot, lambda: panel.line_count == 1 and panel.size.height == 1)


async def test_timeline_updated_second_by_second_matches_a_fresh_one():
    """The timeline refreshes only the tiles whose columns changed (signatures, timeline.py):
    after many small updates the screen must equal a timeline drawn once from the same view."""
    rec = Recording(REC[0])
    frames = _frames()
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    fed = 0

    def feed(upto: int) -> None:
        nonlocal fed
        for f in frames[fed:upto]:
            pipe.on_frame(f, tick=False)
        fed = upto

    grown = _app_of(Timeline)
    async with grown.run_test(size=(120, 10)) as pilot:
        timeline = grown.query_one(Timeline)
        for upto in range(300, 700, 10):  # one second at a time
            feed(upto)
            timeline.show(pipe.view(), 0)
            await pilot.pause(0.01)
        assert await refreshed(pilot)
        shot = grown.export_screenshot()
        end = timeline._end
    fresh = _app_of(Timeline)
    async with fresh.run_test(size=(120, 10)) as pilot:
        once = fresh.query_one(Timeline)
        once._end = end  # the same window (it moves in jumps)
        once.show(pipe.view(), 0)
        assert await until(pilot, lambda: fresh.export_screenshot() == shot)


async def test_a_table_grows_when_a_row_comes_before_the_cursor():
    """Found live on two H100s: rank 1 was listed first, then rank 0 sorted in above it. The cursor
    stays on its key (row 2 now), and a table scrolled to keep it in view at its one-row height never
    grew: rank 0 stayed hidden with room to spare below."""
    from memtop.tui.table import RowTable

    cols = (("pid", 6), ("gpu", 4))
    app = _app_of(lambda: RowTable(cols, id="t"))
    app.CSS = "#t { height: auto; max-height: 20; }"
    async with app.run_test(size=(40, 12)) as pilot:
        t = app.query_one(RowTable)
        t.set_rows([("736", ("736", "1"))])
        assert await until(pilot, lambda: t.size.height == 2)
        t.set_rows([("735", ("735", "0")), ("736", ("736", "1"))])
        assert await until(pilot, lambda: t.size.height == 3)
        shot = app.export_screenshot()
        assert t.cursor_key == "736"
        assert "735" in shot and "736" in shot


async def test_another_gpu_brings_its_own_process_into_the_stacks_panel():
    """A real two-rank DDP recording: `g` to GPU 1 selects the rank on GPU 1 (the stacks then
    explain the verdict shown), and `G` back to rank 0."""
    from pathlib import Path

    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s11.memtop")
    frames = list(rec.frames())[:400]
    p = Pipeline(
        Status("replay", position=frames[-1].t - rec.t0, duration=rec.duration, paused=True), meta=rec.meta
    )
    for f in frames:
        p.on_frame(f, tick=False)
    ranks = {g: pr.pid for pr in frames[-1].host.procs for g in pr.gpus or ()}
    assert set(ranks) == {0, 1} and ranks[0] != ranks[1]
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(160, 50)) as pilot:
        procs = app.query_one("#procs")
        assert await until(pilot, lambda: str(ranks[0]) in procs.keys)  # the first paint
        procs.move_cursor(procs.keys.index(str(ranks[0])))
        assert await until(pilot, lambda: app.selected_pid == ranks[0])
        await pilot.press("g")
        assert await until(pilot, lambda: app.gpu == 1 and app.selected_pid == ranks[1])
        stacks = app.query_one("#stacks", TextPanel)
        assert await until(pilot, lambda: f"({ranks[1]})" in stacks.text.plain), stacks.text.plain
        await pilot.press("G")
        assert await until(pilot, lambda: app.gpu == 0 and app.selected_pid == ranks[0])
