"""The real CLI in tmux: every key in every mode, every size and terminal variant with a few keys, and
resizes. Alive after each key, q exits 0, no Traceback on screen, --ascii panes hold only ASCII, and a
paused replay resized any number of times equals a fresh start at the final size at the same position.

One tmux server per test (its own socket), killed at the end; the sessions of a test run side by side.
Screens are polled for what they must show (bounds for a loaded machine, not paces). Marked slow.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REC
from memtop.tui.app import KEYS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]

REPLAY = ["replay", str(REC[2])]
# the same from 0:40, where the verdict's window is full: its headline shows with the first paint
REPLAY_AT = ["replay", "--at", "40", str(REC[2])]
MULTI = ["replay", str(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop")]  # 2 GPUs
MODES = {"live": [], "demo": ["--demo"], "replay": REPLAY}
SIZES = [(80, 24), (120, 40), (200, 50)]
VARIANTS = {
    "default": ({"TERM": "xterm-256color"}, []),
    "NO_COLOR": ({"TERM": "xterm-256color", "NO_COLOR": "1"}, []),
    "xterm": ({"TERM": "xterm"}, []),
    "linux": ({"TERM": "linux"}, []),
    "ascii": ({"TERM": "xterm-256color"}, ["--ascii"]),
}
# Textual key names -> tmux send-keys names
TMUX_KEY = {
    "space": "Space",
    "left": "Left",
    "right": "Right",
    "pageup": "PPage",
    "pagedown": "NPage",
    "home": "Home",
    "end": "End",
    "question_mark": "?",
    "colon": ":",
    "plus": "+",
    "equals_sign": "=",
    "minus": "-",
    "ctrl+c": "C-c",
    "escape": "Escape",
    "enter": "Enter",
    "tab": "Tab",
    "slash": "/",
}
ALL_KEYS = sorted({key for k in KEYS for key in k.keys.split(",")} - {"q", "ctrl+c"}) + ["tab", "enter"]
READY = "memtop"  # the header's first word


class Tmux:
    def __init__(self, home: Path) -> None:
        self.sock = f"tuicore-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # no user config read, crash logs kept out of the user's state directory
        self.env = {"XDG_CONFIG_HOME": str(home / "config"), "XDG_STATE_HOME": str(home / "state")}

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True).stdout

    def start(self, name: str, args: list[str], size: tuple[int, int], env: dict[str, str]) -> None:
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**self.env, **env}.items())
        # without COLUMNS and LINES (pytest's environment has them, 80 and 24; the tmux server passes
        # them on): with them the app takes that size whatever the pane's, and keeps it on a resize
        cmd = (
            f"env -u COLUMNS -u LINES {envs} {shlex.quote(sys.executable)} -m memtop {shlex.join(args)};"
            " echo EXIT=$?; sleep 120"
        )
        w, h = size
        self("new-session", "-d", "-s", name, "-x", str(w), "-y", str(h), cmd)
        # the window follows its size, not the size of the largest client
        self("set-option", "-t", name, "window-size", "manual")

    def pane(self, name: str) -> str:
        return self("capture-pane", "-p", "-t", name)

    def keys(self, name: str, *keys: str) -> None:
        self("send-keys", "-t", name, *keys)

    def wait(self, name: str, text: str, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        pane = ""
        while time.monotonic() < end:
            pane = self.pane(name)
            if text in pane:
                return pane
            time.sleep(0.15)
        raise AssertionError(f"{name}: {text!r} never appeared:\n{pane}")


@pytest.fixture
def tmux(tmp_path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t("kill-server")


def _alive(pane: str, what: str) -> None:
    assert "Traceback" not in pane, f"{what}:\n{pane}"
    assert "EXIT=" not in pane, f"{what}: memtop ended:\n{pane}"


def _quit(tmux: Tmux, *names: str) -> None:
    """q to each session, each exits 0 without a Traceback. A session the q did not end (a modal
    held it) gets an Escape first, then one pause for all of them side by side: on a loaded machine
    an Escape read together with the q would be one key, Alt+q."""
    left, modal = list(names), False
    for _ in range(3):
        if modal:
            for name in left:
                tmux.keys(name, "Escape")
            time.sleep(1.0)
        for name in left:
            tmux.keys(name, "q")
        left = [name for name in left if "EXIT=" not in _until(tmux, name, lambda p: "EXIT=" in p, 10)]
        if not left:
            break
        modal = True
    for name in names:
        pane = tmux.wait(name, "EXIT=")
        assert "EXIT=0" in pane and "Traceback" not in pane, f"{name}:\n{pane}"


def test_every_key_in_every_mode(tmux):
    """At 120x40: each key of every binding (a mode's hidden ones too), the app alive after each; the
    three modes side by side in one tmux server, each key to all three."""
    for mode, args in MODES.items():
        tmux.start(mode, args, (120, 40), VARIANTS["default"][0])
    for mode in MODES:
        tmux.wait(mode, READY)
    time.sleep(1.0)
    for key in ALL_KEYS:
        for mode in MODES:
            tmux.keys(mode, TMUX_KEY.get(key, key))
        time.sleep(0.25)
        for mode in MODES:
            _alive(tmux.pane(mode), f"{mode} after {key}")
        if key in ("question_mark", "t", "colon", "enter", "slash", "k"):  # a modal: close it
            for mode in MODES:
                tmux.keys(mode, "Escape")
            time.sleep(0.3)
    _quit(tmux, *MODES)


# Each terminal variant at 80x24 (the size where a line is likeliest to wrap or be cut); the default
# at every size too (what it draws differs by size: panels that show only where there is room), and
# --ascii at the smallest and the largest (its 120x40 screens, help, a notice and the detail screen
# among them, are test_tui_view's test_ascii_emits_only_printable_ascii_on_every_screen, in-process:
# a third app here checked them again), while the colour variants draw the same cells as the default
# in other colours.
VARIANT_SIZES = {
    v: SIZES if v == "default" else [SIZES[0], SIZES[2]] if v == "ascii" else SIZES[:1] for v in VARIANTS
}
HELP = "is the GPU busy"  # the help screen's first line
# each step: the keys, and what the screen shows once the app has taken them (from the screen before
# them; None: nothing to wait for). Keys arrive in order, but a lone Escape must be seen taken before
# the next key goes (the two would read as one Alt+key), and a jump (Right, n) must have landed before
# End goes: one still reading its context when End came landed after it
STEPS: list[tuple[list[str], object]] = [
    (["?"], lambda p, before: HELP in p),
    (["Escape"], lambda p, before: HELP not in p),
    (["g"], None),
    (["Space"], lambda p, before: any(mark in _top(p) for mark in ("⏸ ", "|| "))),  # (--ascii: ||)
    (["Right"], lambda p, before: _position(p) not in (None, _position(before))),
    (["n"], lambda p, before: _moved(p, before)),
    (["End"], lambda p, before: _at_end(p)),
]
_POSITION = re.compile(r"(\d+):(\d\d):(\d\d)/(\d+):(\d\d):(\d\d)")


def _position(pane: str) -> tuple[int, int] | None:
    """The header's position and duration in seconds (`0:02:20/0:02:21`)."""
    m = _POSITION.search(_top(pane))
    if not m:
        return None
    h, mi, s, dh, dm, ds = map(int, m.groups())
    return h * 3600 + mi * 60 + s, dh * 3600 + dm * 60 + ds


def _moved(pane: str, before: str) -> bool:
    """A paused replay moved: its position, or the phase it is in (the next phase may begin within
    the second shown: the header reads the same, the `now:` line under it does not)."""
    lines, was = pane.splitlines(), before.splitlines()
    return _position(pane) is not None and (_position(pane) != _position(before) or lines[1:2] != was[1:2])


def _at_end(pane: str) -> bool:
    at = _position(pane)
    return at is not None and at[1] - at[0] <= 2


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_size_and_terminal_with_a_few_keys(tmux, variant):
    """Replay in one terminal variant (at its sizes, side by side): the verdict's headline, then
    help, the next GPU (a repaint of everything), pause, seek, next phase, end, quit."""
    env, flags = VARIANTS[variant]
    names = {f"{variant}-{w}x{h}": (w, h) for w, h in VARIANT_SIZES[variant]}
    for name, size in names.items():
        tmux.start(name, [*flags, *REPLAY_AT], size, env)
    for name in names:
        tmux.wait(name, READY)
        pane = tmux.wait(name, " s: ")  # "last N s:": the verdict's window beside now
        assert "GPU 0 now:" in pane, f"{name}:\n{pane}"
        head = next(line for line in pane.splitlines() if line.startswith("GPU ") and " phase " in line)
        assert head.rstrip().endswith(("throttle", "thr")), (
            f"{name}: the GPU table's last column cut:\n{pane}"
        )
    before = {name: tmux.pane(name) for name in names}
    for keys, shown in STEPS:
        for name in names:
            tmux.keys(name, *keys)
        for name, (_, h) in names.items():
            if shown is None:
                pane = tmux.pane(name)
            else:
                if keys == ["n"]:
                    pane = _next_change(tmux, name, before[name])
                else:
                    pane = _until(tmux, name, lambda p, b=before[name], f=shown: f(p, b))  # type: ignore[operator]
                assert shown(pane, before[name]), f"{name} after {keys}:\n{pane}"  # type: ignore[operator]
            _alive(pane, f"{name} after {keys}")
            before[name] = pane
            assert len(pane.rstrip("\n").splitlines()) <= h
            if variant == "ascii":
                bad = sorted({c for c in pane if not (c == "\n" or " " <= c <= "~")})
                assert not bad, f"{name} after {keys}: non-ASCII {bad!r}:\n{pane}"
    _quit(tmux, *names)


def _paused_at(tmux: Tmux, name: str, when: str) -> None:
    """Pause and go to ``when`` (m:ss); returns once the header shows it, paused there. Each step
    waits for the screen to show it: keys typed before the dialog is up would go to the app."""
    if "⏸" not in _top(tmux.pane(name)):
        tmux.keys(name, "Space")
        tmux.wait(name, "⏸")
    tmux.keys(name, "t")
    tmux.wait(name, "Go to")
    tmux.keys(name, when, "Enter")
    m, sec = when.split(":")
    at = f"0:{int(m):02d}:{sec}/"
    pane = _until(tmux, name, lambda p: "Go to" not in p and "⏸ " in _top(p) and at in _top(p))
    assert "Go to" not in pane and "⏸ " in _top(pane) and at in _top(pane), f"{name}: not at {when}:\n{pane}"


def _next_change(tmux: Tmux, name: str, before: str) -> str:
    """The pane once `n` has moved the replay. Until the recording's phase changes are read (a scan in
    the background, long on a loaded machine) `n` says "still reading the recording" and stays: the
    key is pressed again, each time the notice has been read."""
    end = time.monotonic() + 120.0
    while True:
        pane = _until(tmux, name, lambda p: _moved(p, before) or "still reading" in p)
        if _moved(pane, before) or time.monotonic() > end:
            return pane
        time.sleep(2.0)
        tmux.keys(name, "n")


def _top(pane: str) -> str:
    return (pane.splitlines() or [""])[0]


def _until(tmux: Tmux, name: str, cond, timeout: float = 60.0) -> str:
    """The pane once ``cond(pane)`` holds (polled: the bound is for a loaded machine, not a pace)."""
    end = time.monotonic() + timeout
    while True:
        pane = tmux.pane(name)
        if cond(pane) or time.monotonic() > end:
            return pane
        time.sleep(0.2)


def _same(tmux: Tmux, a: str, b: str, timeout: float = 60.0) -> tuple[str, str]:
    """Panes ``a`` and ``b`` once they are equal but for trailing blanks (the overview's scan, a
    repaint: waited for, with a bound for a loaded machine), else the last ones captured."""
    end = time.monotonic() + timeout
    while True:
        pa, pb = tmux.pane(a), tmux.pane(b)
        if _strip_toasts(pa) == _strip_toasts(pb) or time.monotonic() > end:
            return pa, pb
        time.sleep(0.3)


def _strip_toasts(pane: str) -> str:
    return re.sub(r"[ \t]+$", "", pane, flags=re.M)


def test_a_resized_paused_replay_equals_a_fresh_start_at_the_final_size(tmux):
    """A paused two-GPU replay at 200x50 resized any number of times (120x40, 80x24, 200x50, then
    200x40) equals a fresh start at the final size there, cell for cell, the right panel's scrollbar
    included. The last step changes the height alone (the same widths, so the panels keep their
    heights while the stacks get shallower and the timeline shorter): no cell comes from an earlier
    frame or from blank lines a panel keeps (the right panel once scrolled through kept blank lines,
    the end of its thumb a stray block character beside blank rows, and the caps below out of sight).
    (One pair of apps for what were two tests, a resize sequence and a height change, each with its
    own pair; a one-GPU view's resize sequences are test_tui_view's, in-process.)"""
    env = VARIANTS["default"][0]
    tmux.start("resized", MULTI, (200, 50), env)
    tmux.start("fresh", MULTI, (200, 40), env)
    for name in ("resized", "fresh"):
        tmux.wait(name, READY)
        _paused_at(tmux, name, "0:45")
    for w, h in ((120, 40), (80, 24), (200, 50), (200, 40)):
        tmux("resize-window", "-t", "resized", "-x", str(w), "-y", str(h))
        time.sleep(0.6)  # (each size reaches the app: how many of them it paints is its own affair)
    resized, fresh = _same(tmux, "resized", "fresh")
    _alive(resized, "resized")
    same = _strip_toasts(resized) == _strip_toasts(fresh)  # the right panel's scrollbar included
    assert same, f"resized:\n{resized}\nfresh:\n{fresh}"
    _quit(tmux, "resized", "fresh")


def test_the_demo_at_the_moment_of_the_issue_explains_one_verdict(tmux):
    """`memtop --demo` at 80x24 and 200x50 side by side, paused, `t 1:39` Enter (issue 33): the
    verdict line and every line under it name one label (the screen once said `now: sync-stall`
    above the input pipeline's evidence and command), and End pauses at the demo's end instead of
    starting it over. (test_tui_answer walks the demo at every size, 120x40 too, in-process.)"""
    from test_tui_answer import check_screen

    names = {f"demo-{w}x{h}": (w, h) for w, h in (SIZES[0], SIZES[2])}
    for name, size in names.items():
        tmux.start(name, ["--demo"], size, VARIANTS["default"][0])
    for name in names:
        tmux.wait(name, "DEMO")
        tmux.wait(name, "verdict:")
    for when in ("1:39", "1:09"):
        for name in names:
            _paused_at(tmux, name, when)
        for name in names:
            where = f"{name} at {when}"
            # once the screen has settled (the context read after the jump is classified): polled
            pane = _until(tmux, name, lambda p, where=where: _explains(check_screen, p, where))
            label, cmd = check_screen(pane.splitlines(), where)
            assert label and f"-o memtop-{label}" in cmd  # the part of the command that differs shows
    for name in names:
        tmux.keys(name, "End")
    for name, size in names.items():
        pane = _until(tmux, name, lambda p: "⏸ DEMO 0:02:20/0:02:21" in _top(p))
        assert "⏸ DEMO 0:02:20/0:02:21" in _top(pane), pane
        if size == (80, 24):
            footer = pane.splitlines()[-1]
            assert "c copy cmd" in footer, footer  # not cut to `c co`
    _quit(tmux, *names)


def _explains(check_screen, pane: str, where: str) -> bool:
    try:
        label, cmd = check_screen(pane.splitlines(), where)
    except AssertionError:
        return False
    return bool(label) and f"-o memtop-{label}" in cmd


def test_the_tui_with_stderr_redirected_says_textual_draws_there(tmux, tmp_path):
    """`memtop --demo 2>err.log` from a terminal: one line on why (Textual draws on stderr), exit 2."""
    err = tmp_path / "err.log"
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in tmux.env.items())
    cmd = (
        f"env -u COLUMNS -u LINES {envs} TERM=xterm-256color {shlex.quote(sys.executable)} -m memtop --demo"
        f" 2>{shlex.quote(str(err))}; echo EXIT=$?; sleep 60"
    )
    tmux("new-session", "-d", "-s", "err", "-x", "80", "-y", "24", cmd)
    tmux.wait("err", "EXIT=")
    assert "EXIT=2" in tmux.pane("err")
    text = err.read_text()
    assert text.count("\n") == 1 and "draws on stderr" in text and "Traceback" not in text, text
