"""The config file keeps layout choices (letters, the timeline's span) as they are made, like the
theme; a bad file is one line on stderr and the defaults, never a traceback nor a refusal to start."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import uuid

import pytest
from conftest import REC, notified
from memtop.tui.app import MemtopApp
from memtop.tui.timeline import Timeline
from pilots import refreshed, until

from memtop import config
from memtop.cli import build_parser
from memtop.commands.local import display_options
from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording


def _live() -> Pipeline:
    p = Pipeline(Status("live"), meta={"host": "test"})
    for f in list(Recording(REC[2]).frames())[:300]:
        p.on_frame(f, tick=False)
    return p


def _app(cfg: config.Config) -> MemtopApp:
    """The app as the CLI builds it from a config (no flags)."""
    opts = display_options(build_parser().parse_args([]), cfg)
    return MemtopApp(
        _live(),
        hangup_guard=False,
        save_config=True,
        letters=opts.letters,
        timeline_s=opts.timeline_s,
    )


def test_layout_choices_are_read_and_bad_ones_named_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    p = tmp_path / "memtop" / "config.toml"
    p.parent.mkdir()
    p.write_text("letters = true\ntimeline_s = 300\n")
    c = config.load()
    assert (c.letters, c.timeline_s) == (True, 300.0)
    for bad in ("timeline_s = 5", "timeline_s = nan", 'timeline_s = "wide"', 'letters = "yes"'):
        p.write_text(bad + "\n")
        assert config.load() == config.Config()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and bad.split(" ")[0] in err and "Traceback" not in err


def test_unknown_keys_are_named_in_one_line_and_the_known_ones_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    p = tmp_path / "memtop" / "config.toml"
    p.parent.mkdir()
    p.write_text('letters = true\npaint-rate = 2\n"\\u001b[31m" = 1\n[colours]\ntheme = "nord"\n')
    assert config.load() == config.Config(letters=True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    assert err.startswith("memtop: ignoring unknown key(s) in ") and "paint-rate" in err and "colours" in err
    assert "known: theme, paint_rate" in err
    p.write_text("letters = true\n")
    config.load()
    assert capsys.readouterr().err == ""


def test_an_unreadable_config_is_one_line_and_the_defaults(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    p = tmp_path / "memtop" / "config.toml"
    p.parent.mkdir()
    p.write_bytes(b"\xff\xfe letters = \x00")
    assert config.load() == config.Config()
    err = capsys.readouterr().err
    assert err.startswith("memtop: ignoring") and err.count("\n") == 1


def test_a_bad_config_does_not_stop_the_cli(tmp_path):
    """Through the real entry point: the command still runs, with one line about the file."""
    (tmp_path / "memtop").mkdir()
    (tmp_path / "memtop" / "config.toml").write_text("timeline_s = [\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    code = "from memtop.commands.local import display_options as d; from memtop.cli import build_parser as b;"
    code += "from memtop import config; print(d(b().parse_args([]), config.load()).timeline_s)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "None"
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and "config.toml" in r.stderr


async def test_letters_and_zoom_are_saved_as_chosen_and_come_back(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    app = _app(config.load())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not config.path().exists()  # starting is not choosing
        tl = app.query_one("#timeline", Timeline)
        await pilot.press("l")
        await pilot.press("z")
        assert await until(pilot, lambda: tl.letters and tl.span_s == 60.0)
        span = tl.span_s
    saved = config.load()
    assert saved.letters is True and saved.timeline_s == span == 60.0
    assert stat.S_IMODE(os.stat(config.path()).st_mode) == 0o600
    again = _app(saved)  # the next run starts where this one was left
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        tl = again.query_one("#timeline", Timeline)
        assert tl.letters and tl.span_s == 60.0
        await pilot.press("Z", "Z", "Z", "Z")  # out to the 600 s limit
        assert await until(pilot, lambda: tl.span_s == 600.0)
        await pilot.press("Z")  # and one press past it
        assert await refreshed(pilot)
        assert tl.span_s == 600.0
    assert config.load().timeline_s == 600.0 and config.load().letters is True


async def test_a_choice_that_cannot_be_saved_is_said_and_the_app_goes_on(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))  # memtop/ cannot be made under a file
    app = _app(config.Config())
    said = notified(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("l")
        assert await until(pilot, lambda: app.query_one("#timeline", Timeline).letters)
        assert await until(pilot, lambda: any("letters not saved" in m for m in said)), said
        assert app.is_running


async def test_the_config_is_never_written_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    target = tmp_path / "elsewhere.toml"
    target.write_text("keep")
    config.path().parent.mkdir()
    config.path().symlink_to(target)
    app = _app(config.Config())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("z")
        assert await until(pilot, lambda: not config.path().is_symlink())  # saved, the link replaced
    assert target.read_text() == "keep" and not config.path().is_symlink()
    assert config.load().timeline_s == 60.0


def test_an_integer_past_any_range_is_a_bad_value_and_saving_keeps_going(tmp_path, monkeypatch, capsys):
    """TOML integers are unbounded: 10**400 overflowed isfinite() (exit 70 at start, and on `l`)."""
    from memtop import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "memtop").mkdir()
    big = "1" + "0" * 400
    (tmp_path / "memtop" / "config.toml").write_text(f"timeline_s = {big}\npaint_rate = {big}\nfoo = {big}\n")
    cfg = config.load()
    assert cfg.timeline_s == config.Config().timeline_s and cfg.paint_rate == config.Config().paint_rate
    assert "timeline_s" in capsys.readouterr().err
    assert config.save(letters=True) is not None
    assert config.load().letters is True


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_an_unknown_theme_in_the_config_is_named_and_the_monitor_starts(tmp_path):
    """The file's theme (not the flag's) must not stop memtop: one line, then the default theme."""
    (tmp_path / "memtop").mkdir()
    (tmp_path / "memtop" / "config.toml").write_text('theme = "bogus"\n')
    sock = f"config-theme-{uuid.uuid4().hex[:8]}"
    # stderr stays on the terminal (the TUI needs it): the line shows again once the app has quit
    cmd = f"XDG_CONFIG_HOME={tmp_path} {sys.executable} -m memtop --demo; echo EXIT=$?; sleep 30"
    tm = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tm, "new-session", "-d", "-x", "120", "-y", "40", cmd], check=True)

    def pane_once(cond) -> str:
        """The pane once ``cond(pane)`` holds, or after 60 s (a bound for a loaded machine)."""
        end = time.monotonic() + 60
        while True:
            pane = subprocess.run([*tm, "capture-pane", "-p"], capture_output=True, text=True).stdout
            if cond(pane) or time.monotonic() > end:
                return pane
            time.sleep(0.15)

    try:
        pane = pane_once(lambda p: "now:" in p or "EXIT=" in p)
        assert "now:" in pane and "EXIT=" not in pane, pane
        subprocess.run([*tm, "send-keys", "q"])
        pane = pane_once(lambda p: "EXIT=" in p)
        assert "EXIT=0" in pane and "Traceback" not in pane, pane
        assert "ignoring the theme" in pane and "bogus" in pane, pane
    finally:
        subprocess.run([*tm, "kill-server"], capture_output=True)
