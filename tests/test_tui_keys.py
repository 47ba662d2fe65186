"""Every key in every mode: replay keys in live do nothing harmful (they are hidden), live pauses
its own way, replay navigates a run by h:mm:ss, and the help and footer show one mode's keys."""

from __future__ import annotations

import os
import stat

import pytest
from conftest import REC, notified
from memtop.tui.app import KEYS, HelpScreen, JumpScreen, MemtopApp
from memtop.tui.overview import Overview, cells
from memtop.tui.tiles import TextPanel
from pilots import opened, refreshed, until

from memtop.live.pipeline import Pipeline, ReplaySource, Status
from memtop.storage.store import Recording

ALL_KEYS = sorted({key for k in KEYS for key in k.keys.split(",")} - {"q", "ctrl+c"})
_FRAMES: list = []


def _frames():
    if not _FRAMES:
        _FRAMES.extend(Recording(REC[2]).frames())
    return _FRAMES


def _live(upto: int = 600) -> Pipeline:
    p = Pipeline(Status("live"), meta={"host": "test"})
    for f in _frames()[:upto]:
        p.on_frame(f, tick=False)
    return p


def _replay(speed: float = 1.0) -> tuple[Pipeline, ReplaySource]:
    """A replay as `memtop replay` makes one: its phase runs by the column scan (by Frames, the
    background scan of the whole file was most of these tests' time)."""
    from memtop.analysis.colscan import phase_runs

    rec = Recording(REC[2])
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    return pipe, ReplaySource(rec, pipe, speed=speed, fast_runs=phase_runs)


def _app_keys(app: MemtopApp) -> set[str]:
    """Keys the app's own bindings offer now (a focused table's paging is the table's)."""
    return {k for k, b in app.active_bindings.items() if b.node is app and b.enabled}


async def test_every_key_in_live_mode_leaves_the_app_alive():
    app = MemtopApp(_live(), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        base = app.screen_stack[0]
        for key in ALL_KEYS:
            await pilot.press(key)
            assert await refreshed(pilot), key  # what the key opened is on screen (a loaded machine: later)
            if app.screen is not base:  # help: close it the way it says
                await pilot.press("escape")
                assert await until(pilot, lambda: app.screen is base), key
            assert app.is_running, key
        assert app._exception is None
        await pilot.press("q")
    assert app.return_code == 0


async def test_replay_keys_are_hidden_in_live_and_shown_in_replay():
    app = MemtopApp(_live(), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: app.view is not None)  # the first paint: the keys it enables
        assert await until(pilot, lambda: {"space", "left", "q", "question_mark"} <= _app_keys(app))
        live = _app_keys(app)
        assert {"n", "N", "pageup", "pagedown", "home", "end", "t", "plus", "minus"}.isdisjoint(live)
        assert not app.query(Overview)  # the whole-run strip is replay's
        assert "g" not in live  # one GPU: nothing to switch to
    pipe, src = _replay()
    app = MemtopApp(pipe, src, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        want = {"n", "N", "pageup", "pagedown", "home", "end", "t", "space", "left", "right"}
        assert await until(pilot, lambda: app.view is not None and want <= _app_keys(app))
        assert "s" not in _app_keys(app)  # native stacks are live's
        assert app.query_one(Overview)


async def test_live_pause_freezes_the_view_while_frames_go_on_and_scrolls_back():
    pipe = _live(600)
    app = MemtopApp(pipe, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.query_one("#header", TextPanel)
        assert await until(pilot, lambda: app.view is not None)
        await pilot.press("space")
        assert await until(pilot, lambda: pipe.frozen)
        assert pipe.status.frozen_at == 0
        assert await until(pilot, lambda: "paused" in header.text.plain), header.text.plain
        shown = app.view.frame.t
        for f in _frames()[600:700]:  # sampling goes on
            pipe.on_frame(f)
        await pilot.pause(0.2)
        app._paint()
        assert app.view.frame.t == shown and pipe.frame.t > shown + 5
        await pilot.press("left")
        # ten seconds back, to the second kept
        assert await until(pilot, lambda: shown - 11.01 <= app.view.frame.t <= shown - 10), app.view.frame.t
        assert all(p.t <= app.view.frame.t + 1.0 for p in app.view.history[0])
        assert pipe.status.frozen_at == pytest.approx(pipe.frame.t - (shown - 10), abs=0.01)
        await pilot.press("right", "right", "right")  # never past now
        assert await until(pilot, lambda: pipe.status.frozen_at == 0)
        assert pipe.frozen
        await pilot.press("space")  # back to now
        assert await until(pilot, lambda: not pipe.frozen)
        app._paint()
        assert not pipe.frozen and pipe.status.frozen_at is None
        assert app.view.frame.t == pipe.frame.t
        assert "paused" not in app.query_one("#header", TextPanel).text.plain


async def test_ctrl_c_quits_with_0():
    app = MemtopApp(_live(), hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
    assert app.return_code == 0 and app.crashed is None


@pytest.mark.parametrize("mode", ["live", "replay"])
async def test_help_fits_80x24_scrolls_lists_only_this_modes_keys_and_esc_closes(mode):
    if mode == "live":
        app = MemtopApp(_live(), hangup_guard=False)
    else:
        pipe, src = _replay()
        app = MemtopApp(pipe, src, hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        assert await opened(pilot, HelpScreen)
        text = app.screen.text
        assert ("next phase change" in text) == (mode == "replay")
        assert ("freeze the view" in text) == (mode == "live")
        box = app.screen.query_one("VerticalScroll")
        assert await until(pilot, lambda: box.max_scroll_y > 0)  # more than fits: it must scroll (laid out)
        assert box.outer_size.width <= 80 and box.outer_size.height <= 24
        await pilot.press("pagedown")
        assert await until(pilot, lambda: box.scroll_y > 0)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_replay_navigation_pages_ends_jump_and_phase_changes():
    pipe, src = _replay()
    app = MemtopApp(pipe, src, hangup_guard=False)
    d = src.duration
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: src.scanned)
        await pilot.press("space")
        assert await until(pilot, lambda: src.paused)
        # from the start, shown: the replay is parked there (where it was when space came is a race
        # with the Frame it was waiting for)
        await pilot.press("home")
        assert await until(pilot, lambda: pipe.frame is not None and pipe.frame.t - src.rec.t0 < 0.2)
        await pilot.press("pagedown", "pagedown")
        assert await until(pilot, lambda: abs(pipe.status.position - 2 * d / 10) < 0.2)
        await pilot.press("pageup")
        assert await until(pilot, lambda: abs(pipe.status.position - d / 10) < 0.2)
        await pilot.press("end")
        assert await until(pilot, lambda: pipe.status.position > d - 0.2)
        await pilot.press("home")
        assert await until(pilot, lambda: pipe.status.position < 0.2)
        # paused, the seek shows the Frame it landed on (not an empty "waiting for data" screen)
        assert await until(pilot, lambda: pipe.frame is not None and pipe.frame.t - src.rec.t0 < 0.2)
        await pilot.pause(0.5)
        assert src.paused and pipe.status.position < 0.2  # and stays paused there

        def why() -> str:
            return str(app.screen.query_one("#why").render()) if isinstance(app.screen, JumpScreen) else ""

        # (each key typed once the dialog is up: one typed before it went to the app)
        await pilot.press("t")
        assert await opened(pilot, JumpScreen)
        await pilot.press(*"9:00:00", "enter")  # past the end: says so, stays
        assert await until(pilot, lambda: "past the end" in why()), why()
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, JumpScreen))
        await pilot.press("t")
        assert await opened(pilot, JumpScreen)
        await pilot.press("x", "enter")  # not a time: says why, stays
        assert await until(pilot, lambda: "not a time" in why()), why()
        await pilot.press("backspace", *"1:05", "enter")
        assert await until(pilot, lambda: not isinstance(app.screen, JumpScreen))
        assert await until(pilot, lambda: abs(pipe.status.position - 65) < 0.2)
        # n lands where the label flips: the row there shows the new label
        runs = src.phase_runs[0]
        await pilot.press("n")
        nxt = next((t, lab) for t, lab in runs if t > 65.05)
        assert await until(pilot, lambda: abs(pipe.status.position - nxt[0]) < 0.2)
        assert await until(pilot, lambda: pipe.view().labels[0][-1].label == nxt[1])
        await pilot.press("N")
        prev = [t for t, _ in runs[1:] if t < nxt[0] - 0.3][-1]
        assert await until(pilot, lambda: abs(pipe.status.position - prev) < 0.2)
        await pilot.press("escape", "q")
    assert app.return_code == 0


def test_seek_in_a_long_recording_reads_only_around_the_target(tmp_path):
    """A seek reads its 2-minute context and no more: the cost does not grow with the file."""
    rec = Recording(REC[2])
    pipe = Pipeline(Status("replay", duration=rec.duration), meta=rec.meta)
    src = ReplaySource(rec, pipe, prefill_s=30.0)
    n = 0
    real = rec.frames

    def counting(*a, **kw):
        nonlocal n
        for f in real(*a, **kw):
            n += 1
            yield f

    rec.frames = counting  # type: ignore[method-assign]
    src._seek = None
    src._prefill(rec.t0 + 100.0)
    per_s = len(_frames()) / rec.duration
    assert n <= per_s * 31 + 5  # the context only, not 100 s of frames


def test_overview_cells_follow_the_runs():
    runs = ((0.0, "idle"), (50.0, "compute"), (75.0, "sync"))
    assert cells(runs, 100.0, 4) == ["idle", "idle", "compute", "sync"]
    assert cells((), 100.0, 3) == [None, None, None]


async def test_screenshot_saves_in_the_working_directory_0600(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = MemtopApp(_live(), hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        path = app.save_svg()
    assert path is not None and path.parent == tmp_path and path.read_text().startswith("<svg")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_a_crash_in_a_thread_ends_the_app_with_it():
    app = MemtopApp(_live(), hangup_guard=False)
    with pytest.raises(RuntimeError, match="boom"):
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.crash(RuntimeError("boom"))
            await pilot.pause(0.2)
    assert app.crashed is not None and app.return_code != 0


def test_the_first_gpu_reading_is_painted_as_it_arrives():
    """Not at the next paint tick: frames without GPUs tick at the paint rate, the first with one at once."""
    from dataclasses import replace

    f = _frames()
    pipe = Pipeline(Status("live"))
    pipe.paint_interval = 60.0
    ticks: list[float] = []
    pipe.on_tick = lambda: ticks.append(1)
    pipe.on_frame(replace(f[0], gpus=()))  # the sampler's first frame, NVML not read yet
    pipe.on_frame(f[1])
    pipe.on_frame(f[2])
    assert len(ticks) == 2


@pytest.mark.parametrize(("frame_s", "ticks"), [(1.0, 30), (0.1, 31), (0.25, 30)])
def test_paint_ticks_follow_the_paint_rate_when_frames_jitter(monkeypatch, frame_s, ticks):
    """Frames at 1 Hz (--interval 1) a millisecond early or late tick every time (a tick needing a
    full interval since the last skipped every early one: the view moved every 2 s); faster frames
    tick once per interval, not more."""
    from dataclasses import replace

    from memtop.live import pipeline as pl

    f = _frames()
    clock = [1000.0]
    monkeypatch.setattr(pl.time, "monotonic", lambda: clock[0])
    pipe = Pipeline(Status("live"))
    got: list[float] = []
    pipe.on_tick = lambda: got.append(clock[0])
    n = round(30 / frame_s)
    for k in range(n):
        clock[0] = 1000.0 + k * frame_s + (0.001 if k % 2 else -0.001)
        pipe.on_frame(replace(f[1 + k % 3], t=f[1].t + k * frame_s))
    assert len(got) == ticks
    gaps = [b - a for a, b in zip(got, got[1:])]
    assert min(gaps) >= 0.8 - 0.01 and max(gaps) <= 1.0 + frame_s + 0.01


def test_replay_pause_and_speed_tick_at_once():
    """A paused replay sends no frames, and the app's timer paints only after 1.5 quiet intervals: the
    pause and a new speed tick themselves, so the header shows them at the next message."""
    rec = Recording(REC[2])
    pipe = Pipeline(Status("replay"), rec.meta)
    ticks: list[Status] = []
    pipe.on_tick = lambda: ticks.append(pipe.status)
    src = ReplaySource(rec, pipe)
    src.toggle_pause()
    src.set_speed(4.0)
    assert [(t.paused, t.speed) for t in ticks] == [(True, 1.0), (True, 4.0)]


def test_config_file_is_read_flags_win_and_theme_is_saved_0600(tmp_path, monkeypatch, capsys):
    from memtop import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.load() == config.Config()  # no file: defaults
    p = tmp_path / "memtop" / "config.toml"
    p.parent.mkdir()
    p.write_text('theme = "nord"\npaint_rate = 2\nmouse = false\nascii = "yes"\nlayout = "x"\n')
    c = config.load()
    assert (c.theme, c.paint_rate, c.mouse, c.ascii) == ("nord", 2.0, False, False)
    assert "ascii" in capsys.readouterr().err  # a wrong type is named, not fatal
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    p.unlink()
    p.symlink_to(target)
    assert config.save(theme="dracula") == p
    assert target.read_text() == "keep" and not p.is_symlink()  # the link replaced, not written through
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert config.load().theme == "dracula"
    p.write_text("theme = [")
    assert config.load() == config.Config()
    assert "ignoring" in capsys.readouterr().err


async def test_a_theme_chosen_in_the_app_is_saved(tmp_path, monkeypatch):
    from memtop import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    app = MemtopApp(_live(), hangup_guard=False, save_config=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not config.path().exists()  # starting is not choosing
        app.theme = "nord"
        assert await until(pilot, config.path().exists)
    assert config.load().theme == "nord"


def test_flags_win_over_the_config_file():
    from memtop.cli import build_parser
    from memtop.commands.local import display_options
    from memtop.config import Config

    cfg = Config(theme="nord", paint_rate=2.0, mouse=False, ascii=True)
    plain = display_options(build_parser().parse_args([]), cfg)
    assert plain == cfg
    flags = display_options(build_parser().parse_args(["--theme", "dracula", "--paint-rate", "4"]), cfg)
    assert (flags.theme, flags.paint_rate, flags.mouse, flags.ascii) == ("dracula", 4.0, False, True)
    assert display_options(build_parser().parse_args(["--no-mouse"]), Config()).mouse is False


async def test_no_gpu_live_offers_no_gpu_or_process_selection():
    from memtop.core.model import Frame

    p = Pipeline(Status("live"), meta={"host": "test"})
    p.on_frame(Frame(t=1.0, host=_frames()[100].host), tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: app.view is not None)  # the first paint: what it offers
        # the keys offered follow the GPUs found on the app's 0.5 s timer, not at the first paint
        assert await until(pilot, lambda: app._bindings_key is not None)
        assert await refreshed(pilot)
        keys = _app_keys(app)
        assert "g" not in keys and "G" not in keys and "s" not in keys
        assert not app.query_one("#gpus").can_focus
        await pilot.press("tab")
        assert app.focused is None or app.focused.id not in ("gpus",)


async def test_a_seek_while_paused_repaints_every_panel():
    """Paused, a seek brings one paint: the slow panels (processes, stacks) must follow it too, or they
    keep showing the old position until the user moves again."""
    pipe, src = _replay()
    app = MemtopApp(pipe, src, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: src.scanned)
        await pilot.press("space")
        assert await until(pilot, lambda: src.paused)
        await pilot.pause(0.5)
        stacks_painted = []
        update = app._update_stacks
        app._update_stacks = lambda *a: (stacks_painted.append(pipe.status.position), update(*a))
        app._paints = 0  # the next paint is an odd one, which alone would skip the slow panels
        await pilot.press("end")
        assert await until(pilot, lambda: pipe.status.position > src.duration - 0.2)
        assert await until(pilot, lambda: any(p > src.duration - 0.2 for p in stacks_painted))
        await pilot.press("q")


@pytest.mark.parametrize("ascii_only", [False, True])
def test_help_keeps_its_columns_in_every_mode(ascii_only):
    """Each key's text starts in one column, --ascii (where ← is spelled "left") included."""
    from memtop.tui.app import help_text

    for mode in ("live", "replay"):
        text = help_text(mode, [k for k in KEYS if mode in k.modes], ascii_only)
        rows = [line for line in text.splitlines() if line.startswith("  ") and not line.startswith("   ")]
        keys = rows[: next(i for i, r in enumerate(rows) if "tab" in r) + 1]
        assert len(keys) > 8
        assert all(r[14] == " " and r[15] != " " for r in keys), keys  # names padded to 12


@pytest.mark.parametrize("mode", ["live", "replay"])
def test_help_wraps_a_key_text_under_its_column(mode):
    """At 80 columns `o`'s text wrapped its last word to column 0, where it read as a key of its own."""
    from memtop.tui.app import HELP_WIDTH, help_text

    text = help_text(mode, [k for k in KEYS if mode in k.modes])
    keys = text[text.index("Keys") : text.index("(arrows")].splitlines()[1:]
    assert all(len(r) <= HELP_WIDTH and r.startswith("  ") for r in keys if r), keys
    assert any(r.startswith(" " * 15 + "found") for r in keys)  # `o`'s last word, under its text


def test_help_lists_every_label_the_screen_can_show():
    """The help's phase list lacked "other" and "straggler": it is made from the engine's table, so
    every label a bin gets, the warm-up's and the straggler's (what --trace-on accepts) are there."""
    from memtop.tui.app import help_text

    from memtop.analysis.phases import LABELS, MEANINGS

    text = help_text("live", [k for k in KEYS if "live" in k.modes])
    phases = text[text.index("Phases") :].splitlines()
    named = {r.split()[0] for r in phases if r.startswith("  ") and not r.startswith("   ")}
    assert named == {*LABELS, "warmup", "straggler", "phase?"} and set(MEANINGS) == named - {"phase?"}
    assert all(len(r) <= 74 for r in phases), phases


def test_the_cli_replay_finds_phase_runs_by_columns(monkeypatch):
    """`memtop replay` hands its ReplaySource the column scan (8 hours' runs in about a second rather
    than ten by Frames): the runs it gives are the column scan's."""
    from memtop.analysis import colscan
    from memtop.commands import local

    got = []
    monkeypatch.setattr(local, "_need_tty", lambda: None)
    monkeypatch.setattr(local, "_lean_process", lambda: None)
    monkeypatch.setattr(local, "_run_app", lambda pipeline, src, args: got.append(src) or 0)
    assert local.replay_app(REC[2], None, "replay", loop=False) == 0
    src = got[0]
    real, calls = colscan.phase_runs, []
    monkeypatch.setattr(colscan, "phase_runs", lambda rec: calls.append(rec) or real(rec))
    src._find_changes()
    assert len(calls) == 1
    assert src.scanned and src.phase_runs == real(Recording(REC[2])) and src.phase_runs[0]


def test_replay_at_starts_where_asked(monkeypatch):
    import argparse

    from memtop.cli import OFFSET
    from memtop.commands import local

    got = []
    monkeypatch.setattr(local, "_need_tty", lambda: None)
    monkeypatch.setattr(local, "_lean_process", lambda: None)
    monkeypatch.setattr(local, "_run_app", lambda pipeline, src, args: got.append(src) or 0)
    args = argparse.Namespace(file=str(REC[2]), summary=False, speed=1.0, at=OFFSET("1:05"))
    assert local.replay(args) == 0
    assert got[0]._seek == 65.0


@pytest.mark.parametrize("ascii_only,no_color", [(True, False), (False, True)], ids=["ascii", "no-color"])
async def test_strip_and_band_draw_a_phase_alike_and_the_axis_counts_from_the_start(ascii_only, no_color):
    """The overview strip draws each phase as the band and the legend do (letters without colour or
    on `l`, the legend's letters with --ascii); a replay's time axis reads h:mm:ss into the run."""
    from memtop.tui.timeline import Timeline

    from memtop.analysis.phases import CHARS

    pipe, src = _replay()
    app = MemtopApp(pipe, src, hangup_guard=False, ascii_only=ascii_only, no_color=no_color)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: src.scanned)
        await pilot.press("space")
        assert await until(pilot, lambda: src.paused)
        await pilot.press("t")  # (the time typed once the dialog is up: typed before, it went to the app)
        assert await opened(pilot, JumpScreen)
        await pilot.press(*"1:30", "enter")
        assert await until(pilot, lambda: abs(pipe.status.position - 90) < 0.2)
        timeline = app.query_one(Timeline)
        assert await until(pilot, lambda: any("|0:01:" in ln[0] for ln in timeline._rows)), "no h:mm:ss axis"
        strip = app.query_one(Overview)
        text = strip.render_line(0).text
        w = strip.size.width
        want = [CHARS[lab] if lab else "." for lab in cells(src.phase_runs[0], src.duration, w)]
        cur = strip._cursor(w)
        assert text[:cur] + text[cur + 1 :] == "".join(want[:cur] + want[cur + 1 :])
        await pilot.press("q")


def test_replay_at_past_the_end_is_one_line_and_exit_2(tmp_path):
    """--at beyond the recording: refused before the TUI starts, as bad input."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "memtop", "replay", "--at", "9:00:00", str(REC[2])],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2
    from memtop.core.timefmt import clock

    end = clock(Recording(REC[2]).duration)
    assert r.stderr.strip().splitlines() == [
        f"memtop: --at 9:00:00 is past the end: the recording covers 0:00:00–{end}"
    ]


class _Asks:
    """Live's controller as the app sees it for `s`: the ask reaches the sampler (not run here)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def request_native(self, pid: int) -> bool:
        self.asked.append(pid)
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


async def test_a_native_dump_asked_for_shows_whole_on_its_own_screen_when_it_comes():
    """Found live on two H100s: the dump reached the stacks panel and the next sample replaced it
    before a paint. Here a real recorded stack stands for py-spy --native's reply (the collector's
    own test takes a real one, tests/test_stacks.py); an older dump is not taken for the new one."""
    from dataclasses import replace

    frames = _frames()
    pipe = _live(600)
    ctl = _Asks()
    app = MemtopApp(pipe, ctl, hangup_guard=False)  # type: ignore[arg-type]
    said = notified(app)
    real = next(s for f in frames[600:] for s in f.stacks if s.threads and len(s.threads[0].frames) > 5)
    deep = real.threads[0].frames * 12  # deeper than the panel's 4 or 8 frames, as native ones are
    dump = replace(real, threads=(replace(real.threads[0], frames=deep), *real.threads[1:]), native=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: app.selected_pid is not None)
        pid = app.selected_pid
        old = replace(dump, pid=pid, t=frames[590].t)
        pipe.on_frame(replace(frames[600], stacks=(old,)))  # an earlier dump (the sampler's own)
        await pilot.press("s")
        assert await until(pilot, lambda: ctl.asked == [pid])
        await pilot.pause(1.2)
        assert not isinstance(app.screen, HelpScreen)
        f = frames[601]
        pipe.on_frame(replace(f, stacks=(replace(dump, pid=pid, t=f.t),)))
        plain = replace(real, pid=pid, t=frames[602].t)  # the next sample, at once
        pipe.on_frame(replace(frames[602], stacks=(plain,)))
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = app.screen.text.plain
        assert f"Native stack dump of {pid}" in text
        first = real.threads[0].frames[0].name
        assert text.count(first) >= 12  # every frame, not the panel's few
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        failed = replace(dump, pid=pid, t=frames[603].t, threads=(), error="py-spy: permission denied")
        await pilot.press("s")
        assert await until(pilot, lambda: len(ctl.asked) == 2)  # asked before the reply comes
        pipe.on_frame(replace(frames[603], stacks=(failed,)))
        # waited for, not paused for: a loaded machine paints the failure's notice later than 1.2 s
        assert await until(pilot, lambda: any("permission denied" in m for m in said)), said
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("s")  # and a dump that never comes is given up on, said once
        assert await until(pilot, lambda: len(ctl.asked) == 3)
        for f in frames[604:760]:
            pipe.on_frame(replace(f, stacks=(plain,)))
        assert await until(pilot, lambda: app._native_asked is None)
        assert any("no native dump" in m for m in said), said


async def test_a_resize_under_the_help_screen_leaves_the_app_alive_and_laid_out_after():
    """The fuzz found NoMatches from a panel update while a modal screen was on top: a resize (or a
    paint) under help lays out when the panels show again, and nothing raises."""
    pipe, src = _replay()
    app = MemtopApp(pipe, src, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: app.view is not None)
        await pilot.press("question_mark")
        assert await until(pilot, lambda: app.screen is not app.screen_stack[0])
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        await pilot.press("escape")
        assert await until(pilot, lambda: app.screen is app.screen_stack[0])
        await pilot.resize_terminal(100, 30)
        assert await until(pilot, lambda: app._laid_out is not None and app._laid_out[1].width == 100)
        assert app.is_running
