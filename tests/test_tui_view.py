"""The TUI's rendering: every terminal (NO_COLOR, --ascii), exact resizes, layouts per size, one clock,
per-theme colour-blind-safe phase colours, the detail screen's units, and terminal safety of every
string from a recording. Real H100 recordings (tests/data); the 8-GPU view is tests/multigpu.py's."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from itertools import combinations

import pytest
from conftest import REC, notified
from cvd import delta_e, simulated_lab
from hostile import ESC, HOSTILE
from memtop.tui import format as fmt
from memtop.tui.app import GpuDetail, HelpScreen, MemtopApp, detail_text
from memtop.tui.palette import PHASES, look, phase_colors, to_ascii
from memtop.tui.timeline import Timeline
from multigpu import multi_gpu_of
from pilots import refreshed, steady, until
from rich.color import ColorSystem
from textual.app import App

from memtop.core.metrics import BY_NAME, METRICS
from memtop.core.model import Capability, CapState, StackFrame
from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording

_FRAMES: dict = {}


def _frames():
    if not _FRAMES:
        _FRAMES[0] = list(Recording(REC[0]).frames())
    return _FRAMES[0]


def _pipeline(n_gpus: int = 1, upto: int = 900, frames=None, meta=None) -> Pipeline:
    rec = Recording(REC[0])
    frames = frames if frames is not None else _frames()
    if n_gpus > 1:
        frames = multi_gpu_of(frames, n_gpus)
    p = Pipeline(
        Status("replay", position=frames[upto].t - rec.t0, duration=rec.duration, paused=True),
        meta=meta or rec.meta,
    )
    for f in frames[:upto]:
        p.on_frame(f, tick=False)
    return p


async def _settle(pilot, app: MemtopApp) -> None:
    """Until the first paint and the layout after it are on screen (waited on: a loaded machine is
    slow to them, and a bound passed is a failure)."""
    assert await until(pilot, lambda: app.view is not None and app.query_one(Timeline).line_count > 3)
    assert await refreshed(pilot)
    app._relayout()  # what the layout pass after the first paint does, whenever it comes
    assert await steady(pilot, lambda: _screen(app))


def _screen(app: App) -> list[str]:
    """What the terminal shows, one string per row (Textual's line filters applied)."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


def _ansi(app: App) -> str:
    """The screen as the bytes a truecolor terminal would get (Rich renders each segment's style)."""
    out = []
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            out.append(
                seg.style.render(seg.text, color_system=ColorSystem.TRUECOLOR) if seg.style else seg.text
            )
        out.append("\n")
    return "".join(out)


# -- every terminal -------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "colour"), [("1", False), ("", True)])
async def test_no_color_per_no_color_org(monkeypatch, value, colour):
    """Set and non-empty: no colour; empty: colour. Both crashed at the first paint (style=None)."""
    monkeypatch.setenv("NO_COLOR", value)
    app = MemtopApp(_pipeline(8), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot, app)
        assert app.is_running and app.no_color is (not colour)
        assert any("now:" in row for row in _screen(app))


async def test_no_color_flag(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    app = MemtopApp(_pipeline(1), hangup_guard=False, no_color=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot, app)
        assert app.no_color and "now:" in "".join(_screen(app))
        colours = {
            seg.style.color.get_truecolor() for seg in _strip_segments(app) if seg.style and seg.style.color
        }
        assert all(r == g == b for r, g, b in colours)  # grey at most
    assert "NO_COLOR" not in __import__("os").environ  # not leaked to the process or its children


def _strip_segments(app: App):
    return [seg for strip in app.screen._compositor.render_strips() for seg in strip]


async def test_ascii_emits_only_printable_ascii_on_every_screen():
    app = MemtopApp(_pipeline(8), hangup_guard=False, ascii_only=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:  # (run_test hides them)
        await _settle(pilot, app)
        screens = [_screen(app)]
        await pilot.press("c")  # a notification with the command
        assert await until(pilot, lambda: any("copied" in row for row in _screen(app)))
        screens.append(_screen(app))
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert await steady(pilot, lambda: _screen(app))
        screens.append(_screen(app))
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        app.query_one("#gpus").focus()
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, GpuDetail))
        assert await steady(pilot, lambda: _screen(app))
        screens.append(_screen(app))
    for rows in screens:
        bad = {ch for row in rows for ch in row if not (" " <= ch <= "~")}
        assert not bad, bad


def test_to_ascii_keeps_cell_widths():
    assert to_ascii("╭─ █▏… ×→ 漢") == "+- #|. x> ??"


def test_the_header_names_the_gpm_rate_the_run_read_at():
    """A live view reads GPM at 5 Hz, a recording at 10 Hz (the header said a fixed "GPM 10 Hz");
    a recording's meta that does not say, or says nonsense (hostile), gives "GPM" alone."""
    assert fmt.gpm_rate({"cadence": {"gpu_s": 0.2}}) == "GPM 5 Hz"
    assert fmt.gpm_rate(Recording(REC[0]).meta) == "GPM 10 Hz"
    for bad in ({}, {"cadence": "x"}, {"cadence": {"gpu_s": float("nan")}}, {"cadence": {"gpu_s": True}}):
        assert fmt.gpm_rate(bad) == "GPM", bad
    assert fmt.gpm_rate({"cadence": {"gpu_s": 0}}) == "GPM"


# -- resize is exact ------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus", [1, 8])
async def test_any_resize_sequence_equals_a_fresh_start(gpus):
    """The header once read `…80G9.04 GPM 10 Hz ▶ DEMO 63.0/10 Hz ▶ DEMO 69.0/142s` after 200->120."""
    frames = _frames() if gpus == 1 else multi_gpu_of(_frames(), gpus)
    p = _pipeline(gpus, upto=600)
    app = MemtopApp(p, hangup_guard=False)
    k = 600
    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app)
        for size in ((120, 40), (80, 24), (60, 20), (160, 45), (120, 40)):
            await pilot.resize_terminal(*size)
            for _ in range(2):  # frames and paints while the layout settles
                for f in frames[k : k + 10]:
                    p.on_frame(f, tick=False)
                k += 10
                p.set_status(position=p.status.position + 1.0)
                app._paint()
                await pilot.pause(0.01)
        app.view = None  # the slow panels (every second paint) catch up, as at a fresh start
        app._paint()
        assert await steady(pilot, lambda: _screen(app))
        resized = _screen(app)
        view = app.view
        end = app.query_one(Timeline)._end
    fresh = MemtopApp(p, hangup_guard=False)
    async with fresh.run_test(size=(120, 40)) as pilot:
        await _settle(pilot, fresh)
        fresh.query_one(Timeline)._end = end  # the window moves in jumps
        fresh.view = None
        fresh._paint()
        assert fresh.view.version == view.version
        assert await until(pilot, lambda: _screen(fresh) == resized), "\n".join(_screen(fresh))


async def test_timeline_columns_kept_between_paints_equal_a_fresh_draw():
    """The series rows add only the points since the last paint (their columns and cells): after paints with new frames, a
    pause back in time and a resume, every row equals a draw from the whole window."""
    frames = _frames()
    p = _pipeline(1, upto=400)
    app = MemtopApp(p, hangup_guard=False)

    def rows(tl: Timeline, fresh: bool) -> list[str]:
        if fresh:
            tl._columns.clear()
            tl._cells.clear()
        tl._sigs = None
        tl._redraw()
        return [sig for sig, _ in tl._rows]

    async with app.run_test(size=(200, 50)) as pilot:
        await _settle(pilot, app)
        tl = app.query_one(Timeline)
        for k in range(400, 700, 25):
            for f in frames[k : k + 25]:
                p.on_frame(f, tick=False)
            for back in (None, 7.0, None) if k == 550 else (None,):
                p.freeze(back)
                app._paint()
                await pilot.pause(0.01)
                kept = rows(tl, fresh=False)
                assert tl._columns and kept == rows(tl, fresh=True)
        assert any(ch not in " ▁" for row in kept[:4] for ch in row[9:])  # the rows draw something


# -- layouts --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(60, 20), (80, 24), (120, 40), (200, 50)])
async def test_headline_evidence_and_command_are_on_screen_at_every_size(size):
    """The verdict's headline, evidence and command at every size; where there is room (120x40 and
    up) every GPU has its band too, and only the selected GPU keeps its series (one app per size for
    both: the bands were a test of their own, with its own app at the same two sizes)."""
    app = MemtopApp(_pipeline(8), hangup_guard=False)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot, app)
        rows = _screen(app)
        vd = app.view.verdicts[0]
    text = "\n".join(rows)
    assert "GPU 0 now:" in text and "last 60 s " in text and "verdict: " in text
    assert any(row.strip().startswith(vd.evidence[:20]) for row in rows)
    cmd_row = next(row for row in rows if row.strip().startswith("$ nsys") or row.strip().startswith("$ ncu"))
    if len(vd.command) + 3 > size[0]:
        # the fixed options give way first: what differs per verdict (-o memtop-<label>) stays
        assert "…" in cmd_row.split(" -o ")[0]  # (and at the end, where the rest does not fit either)
        assert f"-o memtop-{vd.label}" in cmd_row
    if size >= (120, 40):  # every GPU has its band where there is room
        bands = [row for row in rows if row.startswith("GPU") and row[3:4].isdigit()]
        assert [row[:4] for row in bands] == [f"GPU{i}" for i in range(8)]
        assert sum(row.startswith("SM ") for row in rows) == 1  # the selected GPU keeps its series


@pytest.mark.parametrize("size", [(60, 20), (80, 24)])
async def test_position_in_the_header_survives_a_narrow_screen_and_a_long_host_name(size):
    """The header is cut at the right: the replay position once fell off it at 80 columns."""
    meta = {**Recording(REC[0]).meta, "host": "h" * 40, "driver": "9" * 20}
    app = MemtopApp(_pipeline(8, meta=meta), hangup_guard=False)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot, app)
        top = _screen(app)[0]
        s = app.view.status
    assert f"REPLAY {fmt.clock(s.position)}/{fmt.clock(s.duration)}" in top
    assert "h" * 10 in top  # the host follows, cut where the screen ends


async def test_copy_command_puts_the_whole_command_on_the_clipboard():
    app = MemtopApp(_pipeline(1), hangup_guard=False)
    said = notified(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot, app)
        await pilot.press("c")
        cmd = app.view.verdicts[0].command
        assert await until(pilot, lambda: app.clipboard == cmd)
        assert len(cmd) > 80 and cmd in said


# -- one clock ------------------------------------------------------------------------------------
async def test_row_band_and_headline_name_the_same_label_and_settling_shows():
    """Stop at every paint of a stretch with phase changes: the GPU row's phase, the headline's
    "now" and the band's newest cell agree, and a label held by hysteresis carries a `?`."""
    # seed 6: with a new label confirmed after one bin, only "no rule matched" waits a second bin;
    # this run has such a bin (an input phase's start at ~58 s) inside the stretch
    frames = list(Recording(REC[6]).frames())
    p = _pipeline(1, upto=300, frames=frames)
    app = MemtopApp(p, hangup_guard=False)
    settled_seen = settling_seen = False
    async with app.run_test(size=(120, 40)) as pilot:
        for k in range(300, 900, 5):
            for f in frames[k : k + 5]:
                p.on_frame(f, tick=False)
            app._paint()
            await pilot.pause(0.01)
            name, settling = fmt.now_label(app.view.labels.get(0))
            if name == "warmup":
                continue
            row = app.query_one("#gpus")._rows[0][1][1].plain
            assert row == name + ("?" if settling else "")
            head = app.query_one("#verdict").text.plain.split("\n")[0]
            assert (f"now: {name}?" in head) is settling
            tl = app.query_one(Timeline)
            band = next(line for line in tl._sigs[1] if line.startswith("phase"))
            code = band.rstrip()[-1] if tl.gpu == 0 and app.view.status.mode == "live" else None
            assert code is None or code == "|"  # replay: the newest cell is the position mark
            settled_seen |= not settling
            settling_seen |= settling
    assert settled_seen and settling_seen


# -- colours --------------------------------------------------------------------------------------
def test_phase_colours_are_distinct_in_every_theme_and_under_colour_blindness():
    """Transfer and sync were one pink in 11 dark themes. CIE76 distance > 12 between every pair of
    the eight phase colours, for normal vision, deuteranopia and protanopia (Machado 2009)."""
    themes = App().available_themes
    assert len(themes) >= 20
    for name, theme in themes.items():
        colors = phase_colors(theme)
        for deficiency in (None, "deuteranopia", "protanopia"):
            labs = {k: simulated_lab(colors[k], deficiency) for k in PHASES}
            worst = min((delta_e(labs[a], labs[b]), a, b) for a, b in combinations(PHASES, 2))
            assert worst[0] > 12, (name, deficiency, worst)


def test_deuteranopia_simulation_collapses_red_and_green():
    """The simulation does what it claims: pure red and green are close for a deuteranope."""
    normal = delta_e(simulated_lab("#d00000"), simulated_lab("#00a000"))
    deutan = delta_e(simulated_lab("#d00000", "deuteranopia"), simulated_lab("#00a000", "deuteranopia"))
    assert deutan < normal / 3


async def test_letters_on_request_in_any_mode():
    app = MemtopApp(_pipeline(1), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot, app)
        band = next(row for row in _screen(app) if row.startswith("phase"))
        assert "█" in band and not set("CMTSIP") & set(band[9:])
        await pilot.press("l")

        def band() -> str:
            return next(row for row in _screen(app) if row.startswith("phase"))

        assert await until(pilot, lambda: "█" not in band()), band()
        assert set("CMTSIP") & set(band()[9:])


# -- detail screen, tables ------------------------------------------------------------------------
def test_detail_screen_shows_every_metric_with_its_unit():
    v = _pipeline(1).view()
    text = detail_text(v, 0, look(None)).plain
    for m in METRICS:
        if m.kind != "bitmask":
            assert m.title in text
    for unit in ("GB/s", "GiB", "MHz", " W", " %"):
        assert unit in text
    assert "20039906304.0" not in text and "pcie_rx " not in text


def test_gpu_table_columns_come_from_the_metric_table():
    titles = [t for t, _ in fmt.GPU_COLUMNS]
    for name in fmt.GPU_METRIC_COLUMNS:
        m = BY_NAME[name]
        assert any(t.startswith(m.title[:4]) for t in titles), m.title


def test_the_gpu_table_fits_the_screen_down_to_80_columns():
    """The throttle column takes what is left (at 80 columns its title was cut to "th"); link% goes
    first where a reason would not fit, and every other column keeps its width."""
    for screen in range(80, 201):
        widths = dict(enumerate(w for _, w in fmt.GPU_COLUMNS)) | fmt.gpu_widths(screen)
        assert sum(w + 1 for w in widths.values() if w) - 1 <= screen, screen
        assert widths[len(widths) - 1] >= len("thr")
        kept = {i: w for i, w in widths.items() if fmt.GPU_COLUMNS[i][0] not in ("link%", "throttle")}
        assert kept == {i: fmt.GPU_COLUMNS[i][1] for i in kept}
    assert fmt.gpu_widths(80)[9] == 0 and fmt.gpu_widths(200) == {9: 5, 11: 14}
    assert fmt.gpu_titles((), 3)[-1] == "thr" and fmt.gpu_titles((), 14)[-1] == "throttle"


def test_the_cpu_line_fits_its_width_and_keeps_a_busy_core_in_sight():
    """128 cores in 40 cells: the bar shrinks (a cell the busiest of its cores), then load and iowait
    give way; one core at 100 % still shows."""
    h = Recording(REC[4]).seek(Recording(REC[4]).t0 + 30).host
    assert h is not None
    many = replace(h, cpu_pct=(0.0,) * 77 + (100.0,) + (0.0,) * 50)
    for width in (80, 46, 40, 30, 24):
        line = fmt.cpu_line(many, width).plain
        assert len(line) <= width and "█" in line, (width, line)
    assert "load" in fmt.cpu_line(many, 40).plain and "load" not in fmt.cpu_line(many, 30).plain
    assert "iowait" in fmt.cpu_line(many, 30).plain and "iowait" not in fmt.cpu_line(many, 24).plain


def test_top_frame_is_the_user_frame_with_the_width_it_has():
    from memtop.core.model import StackSample, ThreadStack

    frames = (
        StackFrame("_local_scalar_dense", "/x/site-packages/torch/_tensor.py", 10),
        StackFrame("train_step_with_a_long_function_name", "/home/u/project/train.py", 134),
    )
    s = StackSample(
        t=0.0,
        pid=7,
        threads=(ThreadStack(tid=7, name="MainThread", active=True, owns_gil=True, frames=frames),),
    )
    assert fmt.top_frame(s, 80) == "train_step_with_a_long_function_name train.py:134"
    cut = fmt.top_frame(s, 30)
    assert len(cut) == 30 and cut.endswith("… train.py:134") and cut.startswith("train_step")


async def test_no_gpu_live_says_what_it_can_show():
    p = Pipeline(Status("live"), meta={"host": "test"})
    cap = Capability("nvml", "driver", CapState.UNSUPPORTED, "NVIDIA driver not found")
    from memtop.core.model import Frame

    p.on_frame(Frame(t=1.0, host=_frames()[100].host, caps=(cap,)), tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot, app)
        text = "\n".join(_screen(app))
    assert "host CPU and memory, NUMA, the watched processes and their Python stacks" in text
    assert "no GPU: nothing to chart" in text and "waiting for data" not in text  # it never comes


# -- terminal safety (#16) ------------------------------------------------------------------------
def hostile_frames(frames, corpus=HOSTILE):
    """The real recording with every string it holds replaced by the hostile corpus."""

    def h(i: int) -> str:
        return corpus[i % len(corpus)]

    out = []
    for k, f in enumerate(frames):
        gpus = tuple(replace(g, name=h(k), uuid=h(k + 1)) for g in f.gpus)
        host = f.host
        if host is not None:
            procs = tuple(replace(p, name=h(k + 2), cmdline=h(k + 3), user=h(k + 4)) for p in host.procs)
            host = replace(host, procs=procs)
        stacks = tuple(
            replace(
                s,
                error=h(k + 5) if s.error else None,
                threads=tuple(
                    replace(
                        th,
                        name=h(k + j),
                        frames=tuple(
                            replace(fr, name=h(k + j + 1), file="/u/" + h(k + j + 2), code=h(k + j + 3))
                            for fr in th.frames
                        ),
                    )
                    for j, th in enumerate(s.threads)
                ),
            )
            for s in f.stacks
        )
        caps = tuple(replace(c, detail=h(k + 6), fix=h(k + 7)) for c in f.caps)
        out.append(
            replace(f, gpus=gpus, host=host, stacks=stacks, caps=caps, notes=(h(k),) if k % 50 == 0 else ())
        )
    return out


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_hostile_strings_reach_no_screen_raw(size):
    meta = {**Recording(REC[0]).meta, "host": HOSTILE[0], "driver": HOSTILE[10]}
    p = _pipeline(1, frames=hostile_frames(_frames()), meta=meta)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=size, notifications=True) as pilot:  # (run_test hides them)
        await _settle(pilot, app)
        outputs = [_ansi(app)]
        app.query_one("#gpus").focus()
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, GpuDetail))
        assert await steady(pilot, lambda: _ansi(app))
        outputs.append(_ansi(app))
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, GpuDetail))
        await pilot.press("question_mark")
        assert await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert await steady(pilot, lambda: _ansi(app))
        outputs.append(_ansi(app))
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        app.query_one("#procs").focus()
        await pilot.press("c")
        assert await until(pilot, lambda: "copied" in _ansi(app) or "no profiler command" in _ansi(app))
        outputs.append(_ansi(app))
        assert app.is_running
    for out in outputs:
        # the only escapes are the console's own SGR colour codes: no OSC, CSI other than SGR, DCS
        import re

        assert "\\x1b]0;PWNED" in "".join(outputs)  # the strings are on screen, made visible
        assert not re.search(r"\x1b(?!\[[0-9;]*m)", out)
    assert ESC not in (app.clipboard or "")


# -- snapshots ------------------------------------------------------------------------------------
async def _settled(pilot) -> None:
    await _settle(pilot, pilot.app)  # the layout pass after the first paint, however loaded the machine


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)])
def test_snapshot_per_size_8gpu(snap_compare, size):
    app = MemtopApp(_pipeline(8), hangup_guard=False)
    assert snap_compare(app, terminal_size=size, run_before=_settled)


def test_snapshot_no_color(snap_compare, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = MemtopApp(_pipeline(1), hangup_guard=False)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settled)


def test_snapshot_ascii(snap_compare):
    app = MemtopApp(_pipeline(8), hangup_guard=False, ascii_only=True)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settled)


# -- the real CLI in tmux: pane title, paste buffers and screen stay untouched ---------------------
_VICTIM = r"""
import sys, threading, time
corpus = {corpus!r}
src = "def f():\n    end = time.time() + 120\n    while time.time() < end:\n        sum(range(1000))\n"
code = compile(src, "/tmp/" + corpus[0] + ".py", "exec")
inner = next(c for c in code.co_consts if hasattr(c, "co_name")).replace(co_name=corpus[1] + corpus[2])
threading.current_thread().name = corpus[3] + corpus[10]
print("ready", flush=True)
type(lambda: 0)(inner, {{"time": time}})()
"""


def _tmux(sock: str, *args: str) -> str:
    import subprocess

    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True).stdout


def _wait(sock: str, text: str, timeout: float = 60.0, gone: bool = False, target: str = "") -> str:
    """The screen (of session ``target``, else the current one) once ``text`` is on it (with ``gone``:
    once it has left it)."""
    import time

    end = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < end:
        screen = _tmux(sock, "capture-pane", "-p", *(("-t", target) if target else ()))
        if (text in screen) != gone:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{text!r} {'still on screen' if gone else 'never appeared'}:\n{screen}")


def _kill(sock: str) -> None:
    """Stop the private tmux server and remove its socket file."""
    import os

    path = _tmux(sock, "display-message", "-p", "#{socket_path}").strip()
    _tmux(sock, "kill-server")
    if path.startswith("/") and os.path.basename(path) == sock:
        with __import__("contextlib").suppress(OSError):
            os.unlink(path)


def _untouched(sock: str, title: str) -> str:
    assert _tmux(sock, "display-message", "-p", "#{pane_title}").strip() == title
    assert _tmux(sock, "list-buffers").strip() == ""  # no OSC 52 reached tmux (set-clipboard on)
    screen = _tmux(sock, "capture-pane", "-p")
    assert "memtop" in screen.splitlines()[0]  # no clear screen / cursor home from data
    return screen


def _storable(s: str) -> bool:
    try:
        s.encode()  # sqlite stores UTF-8: a lone surrogate cannot be written (it is tested in Pilot)
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("tmux") is None, reason="tmux not installed")
def test_real_cli_hostile_replay_and_live_process_in_tmux(tmp_path):
    import os
    import subprocess
    import sys
    import uuid

    from memtop.storage.store import Writer

    corpus = tuple(s for s in HOSTILE if _storable(s))
    rec = Recording(REC[0])
    meta = {**rec.meta, "host": corpus[0], "driver": corpus[2]}
    path = tmp_path / "hostile.memtop"
    w = Writer(path, meta)
    for f in hostile_frames(_frames()[:400], corpus):
        w.add(f)
    w.close()

    sock = f"tuiview-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TERM": "xterm-256color"}
    title = "KNOWN-TITLE"
    victim = None
    try:
        cmd = f"{sys.executable} -m memtop replay {path}; echo EXIT=$?; sleep 60"
        subprocess.run(
            ["tmux", "-L", sock, "new-session", "-d", "-x", "120", "-y", "40", cmd], check=True, env=env
        )
        _tmux(sock, "set-option", "-g", "set-clipboard", "on")
        _tmux(sock, "select-pane", "-T", title)
        _wait(sock, "REPLAY")
        _wait(sock, "\\x1b")  # the hostile strings are on screen, made visible
        _untouched(sock, title)
        _wait(sock, "palette")  # the TUI's footer: keys reach the app now, not the first look before it
        for _ in range(5):  # the GPU detail screen shows names, uuid, evidence (Enter toggles it: it is
            _tmux(sock, "send-keys", "Enter")  # pressed again only while the screen has not come, as an
            with contextlib.suppress(AssertionError):  # Enter before the table holds its row does nothing)
                _wait(sock, "uuid", timeout=6.0)
                break
        _wait(sock, "uuid")
        _tmux(sock, "send-keys", "Escape")
        _wait(sock, "uuid", gone=True)
        screen = _untouched(sock, title)
        assert "\\x1b" in screen
        _tmux(sock, "send-keys", "q")
        _wait(sock, "EXIT=0")

        # LIVE: a real Python process whose file, function and thread names carry the corpus
        victim = subprocess.Popen(
            [sys.executable, "-c", _VICTIM.format(corpus=corpus)], stdout=subprocess.PIPE, text=True
        )
        assert victim.stdout.readline().strip() == "ready"
        cmd = f"{sys.executable} -m memtop --pid {victim.pid}; echo EXIT=$?; sleep 60"
        _tmux(sock, "respawn-pane", "-k", cmd)
        _tmux(sock, "select-pane", "-T", title)
        _wait(sock, "LIVE")
        screen = _wait(sock, "\\x1b]0;PWNED", 40)  # py-spy sampled it: the names are on screen, inert
        _untouched(sock, title)
        _tmux(sock, "send-keys", "q")
        _wait(sock, "EXIT=0")
    finally:
        _kill(sock)
        if victim is not None:
            victim.kill()
            victim.wait()


# Terminals beyond test_tmux_matrix's (xterm-256color, xterm's 16 colours, linux, NO_COLOR=1 and --ascii,
# at 80x24 among its sizes, with the same checks): truecolor, screen's 8 colours, an empty NO_COLOR (colour,
# per no-color.org) and --no-color. TERM is set in the pane's command: tmux gives every pane its own
# default-terminal (tmux-256color), whatever TERM the server was started with.
TERMINALS = {
    "truecolor": ({"TERM": "xterm-256color", "COLORTERM": "truecolor"}, ()),
    "screen": ({"TERM": "screen"}, ()),
    "empty-NO_COLOR": ({"TERM": "tmux-256color", "NO_COLOR": ""}, ()),
    "no-color-flag": ({"TERM": "xterm-256color"}, ("--no-color",)),
}


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("tmux") is None, reason="tmux not installed")
def test_real_cli_renders_in_every_terminal():
    """Each terminal in its own session of one tmux server, side by side: the replay paints, takes a
    key (`g`, a repaint of everything for the selected GPU), shows the verdict's window, and q exits 0."""
    import os
    import shlex
    import subprocess
    import sys
    import uuid

    sock = f"tuiview-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLORTERM")}
    try:
        for name, (env, flags) in TERMINALS.items():
            envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            run = shlex.join([sys.executable, "-m", "memtop", "replay", str(REC[0]), *flags])
            cmd = f"env -u NO_COLOR -u COLORTERM {envs} {run}; echo EXIT=$?; sleep 60"
            new = ["new-session", "-d", "-s", name, "-x", "80", "-y", "24", cmd]
            subprocess.run(["tmux", "-L", sock, *new], check=True, env=full)
        for name in TERMINALS:
            _wait(sock, "now:", target=name)
            _tmux(sock, "send-keys", "-t", name, "g")
        for name in TERMINALS:
            screen = _wait(sock, " s: ", target=name)  # "last N s:": the verdict's window beside now
            assert "Traceback" not in screen and "GPU 0 now:" in screen, f"{name}:\n{screen}"
            _tmux(sock, "send-keys", "-t", name, "q")
        for name in TERMINALS:
            _wait(sock, "EXIT=0", target=name)
    finally:
        _kill(sock)


async def test_the_screen_says_which_evidence_is_missing_and_its_cost():
    """An NVML-only recording (real H100, no GPM): the capabilities panel names the missing GPM and
    its held-out cost; a run with GPM and stacks (seed 0) says nothing of the kind."""
    from conftest import REC_NOGPM

    frames = list(Recording(REC_NOGPM).frames())
    for pipeline, want in ((_pipeline(1, upto=len(frames) - 1, frames=frames), True), (_pipeline(1), False)):
        app = MemtopApp(pipeline, hangup_guard=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await _settle(pilot, app)
            caps = app.query_one("#caps").text.plain
            assert ("missing GPM:" in caps and "held-out macro-F1" in caps) is want, caps


async def test_gpu_detail_scrolls_to_its_end_at_80x24():
    """The detail screen was a fixed box: at 80x24 (and 120x40) the verdict and timeline lay below it."""
    app = MemtopApp(_pipeline(1), hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot, app)
        app.query_one("#gpus").focus()
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, GpuDetail))
        assert await steady(pilot, lambda: _screen(app))
        assert not any(row.startswith("│events") for row in _screen(app))  # the timeline's last rows
        await pilot.press("pagedown", "pagedown", "pagedown")
        assert await until(pilot, lambda: any(row.startswith("│events") for row in _screen(app)))


async def test_top_frame_is_never_cut_at_the_left_column_edge():
    """At 120x40 the top frame ran past the left column's edge and read `workload.py:19` for `:198`."""
    import re

    def long_names(s):
        threads = tuple(
            replace(t, frames=tuple(replace(fr, name="a_long_function_name_" + fr.name) for fr in t.frames))
            for t in s.threads
        )
        return replace(s, threads=threads)

    frames = [replace(f, stacks=tuple(long_names(s) for s in f.stacks)) for f in _frames()]
    app = MemtopApp(_pipeline(1, frames=frames), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot, app)
        rows = _screen(app)
    left = [r.split("▏")[0] for r in rows if re.match(r"\d+ ", r)]
    locs = [m.group(0) for r in left if (m := re.search(r"\w+\.py:\d+", r))]
    assert locs, left
    stacks = "\n".join(r.split("▏", 1)[-1] for r in rows)
    assert all(re.search(re.escape(loc) + r"\b", stacks) for loc in locs), (locs, stacks)
