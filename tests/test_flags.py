"""Numeric flags: finite and inside their documented range, else exit 2 with one line; a bug anywhere
is a crash log and exit 70, never a traceback or 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REC

BAD = ("nan", "inf", "-inf", "1e309", "0", "-1", "1e300", "x")


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    from memtop.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's errors
        rc = e.code
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "-o", "/tmp/never.memtop", "--interval"],
        ["record", "-o", "/tmp/never.memtop", "--stack-interval"],
        ["record", "-o", "/tmp/never.memtop", "--duration"],
        ["--paint-rate"],
        ["replay", str(REC[0]), "--speed"],
        ["replay", str(REC[0]), "--paint-rate"],
    ],
)
@pytest.mark.parametrize("value", BAD)
def test_a_numeric_flag_outside_its_range_is_one_line_and_exit_2(capsys, argv, value):
    rc, err = _run(capsys, [*argv, value])
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not os.path.exists("/tmp/never.memtop")


@pytest.mark.parametrize("flag", ["--from", "--to"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "1e300"])
def test_report_range_flags_are_finite(capsys, flag, value):
    rc, err = _run(capsys, ["report", str(REC[0]), flag, value])
    assert rc == 2 and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "-o", "/tmp/never.memtop", "--interval", "0.01"],
        ["record", "-o", "/tmp/never.memtop", "--interval", "60"],
        ["--paint-rate", "30"],
        ["replay", "x", "--speed", "0.015625"],
        ["replay", "x", "--speed", "64"],
        ["report", "x", "--from", "0", "--to", "10.5"],
    ],
)
def test_the_range_limits_themselves_parse(argv):
    from memtop.cli import build_parser

    build_parser().parse_args(argv)


def test_report_range_works(capsys):
    rc, err = _run(capsys, ["report", str(REC[0]), "--from", "10", "--to", "40", "--format", "json"])
    assert rc == 0 and err == ""


def test_a_flag_value_with_escapes_is_echoed_inert(capsys):
    rc, err = _run(capsys, ["--paint-rate", "\x1b]0;PWNED\x07"])
    assert rc == 2 and "\x1b" not in err and "\\x1b" in err


def test_an_unexpected_exception_is_a_crash_log_and_exit_70(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    import memtop.outputs.report

    def boom(*a, **k):
        raise RuntimeError("bug \x1b]0;T\x07")

    monkeypatch.setattr(memtop.outputs.report, "build_report", boom)
    rc, err = _run(capsys, ["report", str(REC[0])])
    assert rc == 70
    assert err.count("\n") == 1 and "\x1b" not in err
    (log,) = (tmp_path / "memtop").iterdir()
    assert (log.stat().st_mode & 0o777) == 0o600
    assert "RuntimeError" in log.read_text() and str(log) in err


def test_a_crash_exits_70_end_to_end(tmp_path):
    """As a subprocess: the exit status the shell sees, and no traceback on the terminal."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    code = (
        "import sys, memtop.commands.local as c\n"
        "def boom(a): raise ZeroDivisionError('x')\n"
        "c.report = boom\n"
        "from memtop.cli import main\n"
        "sys.exit(main(['report', 'whatever']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 70
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_a_closed_pipe_is_no_crash(tmp_path):
    r = subprocess.run(
        f"{sys.executable} -m memtop report {REC[4]} | head -c 10 >/dev/null",
        shell=True,  # the pipe is the point of the test; no input reaches the shell
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
