"""What a demanding user reads on the real CLI's screen, in tmux: every line under a verdict agrees with
what the screen shows beside it, and nothing wraps where a line was made to fit. Marked slow; the tmux
driver is test_tmux_matrix's (one server per test, killed at the end)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tmux_matrix import READY, VARIANTS, Tmux, _paused_at, _quit, _until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]

DATA = Path(__file__).parent / "data"
ENV = VARIANTS["default"][0]


@pytest.fixture
def term(tmp_path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t("kill-server")


def _verdict_lines(pane: str) -> list[str]:
    """The verdict and the lines under it (the screen's second to fifth lines)."""
    return pane.splitlines()[2:5]


def test_an_idle_verdict_agrees_with_the_process_beside_it(term):
    """A replay's first seconds (heldout9_pipe_s111: its process opens the GPU 8 s in) said "idle (no
    process on it)" and "no process holds it: the job has not started yet" for 5 s more while the
    process table beside it listed the process: the verdict's sub came from the middle of its window."""
    term.start("r", ["replay", str(DATA / "heldout9_pipe_s111.memtop")], (120, 40), ENV)
    term.wait("r", READY)
    for when, held in (("0:05", False), ("0:09", True), ("0:14", True)):
        _paused_at(term, "r", when)
        pane = _until(term, "r", lambda p: "verdict:" in p)
        rows = [line for line in pane.splitlines() if line.startswith("509 ")]
        said = " ".join(_verdict_lines(pane))
        assert bool(rows) == held, f"at {when}:\n{pane}"
        assert ("no process" in said) == (not held), f"at {when}:\n{pane}"
    _quit(term, "r")


def test_the_x_key_shows_one_notice_for_one_capture(term):
    """`x` on a process without an agent showed "trace: asking the agent of N..." and "trace failed"
    together: two notices for one request. Each stage of a capture replaces the one before."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        term.start("live", ["--pid", str(sleeper.pid)], (120, 40), ENV)
        term.wait("live", f"{sleeper.pid} ")  # its row in the process table, selected
        term.keys("live", "x")
        pane = term.wait("live", "trace failed")
        assert "asking the agent" not in pane, pane
        _quit(term, "live")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_host_lines_never_wrap_at_80x24(term):
    """At 80x24 the host's CPU line wrapped its load (16 cores) or its iowait and load (32 cores) onto
    a line of their own: the per-core bar gives way to them (a cell the busiest of its cores)."""
    runs = {"one": DATA / "labelled_s4.memtop", "two": DATA / "multi" / "heldout_ddp_s13.memtop"}
    for name, path in runs.items():
        term.start(name, ["replay", str(path)], (80, 24), ENV)
    for name in runs:
        term.wait(name, READY)
        _paused_at(term, name, "0:20")
        pane = _until(term, name, lambda p: " CPU " in p and " mem " in p)
        lines = pane.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(" CPU "))
        assert "iowait" in lines[at] and "load" in lines[at], pane
        assert lines[at + 1].startswith(" mem "), pane
        _quit(term, name)


def test_the_cluster_detail_keeps_its_indent_when_it_wraps(term):
    """`memtop cluster` at 80x24 over two `memtop serve --demo` nodes: the detail pane's evidence,
    advice and command wrapped to column 0, where a continuation read as a line of its own. Each
    continuation row starts under its line's text, in the pane and in the node's screen (Enter)."""
    from netutil import free_ports, memtop, stop, wait_ready

    ports = free_ports(2)
    nodes = [memtop("serve", "--demo", "--port", str(p), stderr=subprocess.DEVNULL) for p in ports]
    try:
        for p, port in zip(nodes, ports, strict=True):
            wait_ready(port, proc=p, timeout=60)
        term.start("c", ["cluster", "--hosts", ",".join(f"127.0.0.1:{p}" for p in ports)], (80, 24), ENV)
        for screen in ("pane", "node"):
            # (the table's compact answer has the evidence; the command comes with the full snapshot)
            pane = _until(
                term,
                "c",
                lambda p, s=screen: "evidence:" in p and "next: " in p and ("╭" in p) == (s == "node"),
            )
            lines = pane.splitlines()
            if screen == "node":  # (the box's border and padding taken off)
                lines = [row[2:] for row in lines if row.startswith("│ ")]
            at = next(i for i, line in enumerate(lines) if line.startswith("  evidence: "))
            assert lines[at + 1].startswith("    ") and lines[at + 1][4] != " ", pane  # wrapped, kept in
            nxt = next(i for i, line in enumerate(lines) if line.startswith("  next: "))
            assert lines[nxt + 1].startswith("    "), pane
            term.keys("c", "Enter")
        _quit(term, "c")
    finally:
        stop(*nodes)


def test_the_end_of_a_replay_names_the_job_and_no_live_advice(term):
    """At the end of a two-GPU replay (its processes gone): `c` copied `python train.py`, a made-up
    command; the stacks panel showed a frameless MainThread of an exiting process; and it told the
    user to pick a process with `memtop --pid`, which a recording cannot do (or, the process selected
    while it ran, "no stack sample for 1539 yet")."""
    term.start("end", ["replay", str(DATA / "multi" / "heldout_ddp_s13.memtop")], (200, 50), ENV)
    term.wait("end", READY)
    term.wait("end", "\n1539 ", timeout=60)  # its first process listed (and selected) before it exits
    term.keys("end", "End")
    pane = _until(term, "end", lambda p: "⏸ REPLAY 0:01:15/0:01:15" in p and "$ nsys" in p)
    assert "python train.py" not in pane and "ddp_straggler.py" in pane.split("$ nsys", 1)[1], pane
    assert "--pid PID" not in pane and "MainThread" not in pane, pane
    assert "no GPU process at this point of the recording" in pane, pane
    term.keys("end", "c")
    pane = term.wait("end", "copied")
    assert "python train.py" not in pane, pane
    _quit(term, "end")
