"""The real CLI: bad input gets one line and exit 2; doctor; record; and one tmux session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest
from conftest import HAS_GPU, REC

from memtop.cli import main


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memtop", *args], capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["record"],
        ["record", "-o", "/nonexistent/dir/x.memtop", "--duration", "1"],
        ["record", "-o", "x.memtop", "--pid", "999999999"],
        ["--interval", "-1"],
        ["replay", "/nonexistent"],
        ["replay", "--summary", "/etc/hostname"],
        ["report", "/dev/null"],
        ["export", "/nonexistent", "--perfetto", "x"],
        ["--trace-on", "bogus"],
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(args, tmp_path):
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("flag", [["--record", "x.memtop"], ["--pid", "1"], ["--trace-on", "sync"]])
def test_demo_refuses_a_live_only_flag(flag, tmp_path):
    """The demo plays a recording: it ignored these, silently (no file recorded, no process watched)."""
    r = run("--demo", *flag, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and f"{flag[0]} watches this machine live" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.memtop").exists()


def test_tui_refuses_without_a_terminal():
    r = run("--demo", stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "terminal" in r.stderr


def test_doctor_runs_and_says_what_is_missing():
    r = run("doctor")
    assert "py-spy" in r.stdout and "perf_event_paranoid" in r.stdout and "NUMA" in r.stdout
    j = run("doctor", "--json")
    rows = json.loads(j.stdout)
    assert {"check", "ok", "detail", "fix", "required"} <= set(rows[0])
    for row in rows:
        if row["ok"] is False:
            assert row["detail"]
    # exit 1 exactly when something memtop cannot work without is missing (no driver on CI)
    missing = any(row["required"] and row["ok"] is False for row in rows)
    assert missing == (not HAS_GPU)
    assert r.returncode == j.returncode == (1 if missing else 0)


def test_doctor_and_the_live_view_agree_about_the_pmu():
    """Doctor tries the same counter group the live collector opens (one event may open alone)."""
    from memtop.collectors.perf import HARDWARE, PerfCollector

    from memtop.commands.doctor import perf_rows

    doc = next(r for r in perf_rows() if r.check == "hardware counters (PMU)")
    col = PerfCollector(pids=(os.getpid(),))
    col.start()
    col.sample(time.monotonic())
    col.stop()
    live = col.hw_ok is True
    assert doc.ok == live, (doc, col.status)
    assert len(HARDWARE) > 1


def test_replay_summary(capsys):
    assert main(["replay", "--summary", str(REC[0])]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and s["rows"]["marker"] == 19


@pytest.mark.slow
def test_record_headless_with_duration(tmp_path):
    out = tmp_path / "r.memtop"
    r = run("record", "-o", str(out), "--duration", "2")
    assert r.returncode == 0, r.stderr
    s = json.loads(run("replay", "--summary", str(out)).stdout)
    assert s["rows"]["host"] >= 2 and s["rows"]["frame"] >= 3 and s["duration_s"] >= 1.0
    assert "env" not in json.dumps(s["command"]).lower()
    assert run("record", "-o", str(out), "--duration", "1").returncode == 2  # exists, no --force


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True).stdout


def _wait_for(sock: str, text: str, timeout: float = 60.0, gone: bool = False) -> str:
    """The screen once ``text`` is on it (or, with ``gone``, once it has left; the bound is for a
    loaded machine, not a pace)."""
    end = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < end:
        screen = _tmux(sock, "capture-pane", "-p")
        if (text in screen) != gone:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} {'still on screen' if gone else 'never appeared'}:\n{screen}")


def _changed(sock: str, screen: str, timeout: float = 60.0) -> str:
    """The screen once it differs from ``screen`` (polled: the bound is for a loaded machine)."""
    end = time.monotonic() + timeout
    now = screen
    while now == screen and time.monotonic() < end:
        time.sleep(0.2)
        now = _tmux(sock, "capture-pane", "-p")
    assert now != screen, f"the screen never changed:\n{screen}"
    return now


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_real_cli_in_tmux_replay_resize_quit():
    sock = f"memtop-test-{uuid.uuid4().hex[:8]}"
    cmd = f"{sys.executable} -m memtop replay {REC[0]} --speed 4; echo EXIT=$?; sleep 30"
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        ["tmux", "-L", sock, "new-session", "-d", "-x", "120", "-y", "40", cmd], check=True, env=env
    )
    try:
        first = _wait_for(sock, "NVIDIA H100")
        assert "REPLAY" in first
        _changed(sock, first)  # data changes
        _tmux(sock, "send-keys", "Enter")  # the GPU detail screen
        _wait_for(sock, "uuid")
        _tmux(sock, "send-keys", "Escape")  # a lone Escape: only the input parser's timeout makes it a key
        _wait_for(sock, "uuid", gone=True)
        _tmux(sock, "resize-window", "-x", "80", "-y", "24")
        small = _wait_for(sock, "REPLAY")
        assert len(small.splitlines()) <= 24
        _tmux(sock, "send-keys", "q")
        _wait_for(sock, "EXIT=0")
    finally:
        _tmux(sock, "kill-server")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_hangup_ends_memtop(tmp_path):
    import psutil

    sock = f"memtop-hup-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "TERM": "xterm-256color", "XDG_STATE_HOME": str(tmp_path)}
    subprocess.run(
        [
            "tmux",
            "-L",
            sock,
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "30",
            f"exec {sys.executable} -m memtop --demo",
        ],
        check=True,
        env=env,
    )
    try:
        _wait_for(sock, "DEMO")
        pid = int(_tmux(sock, "display-message", "-p", "#{pane_pid}").strip())
        proc = psutil.Process(pid)
    finally:
        _tmux(sock, "kill-server")  # the terminal goes away: SIGHUP, then a dead pty
    # it leaves as q does, or by its own 3 s bound (MemtopApp._hangup); 60 s is a hang bound for a
    # loaded machine, not a pace: an app that spins on the dead terminal never ends
    end = time.monotonic() + 60
    while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:  # (a zombie has ended)
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("memtop still running 60 s after the hang-up")
        time.sleep(0.1)
    # a hang-up is no crash: Textual's writer meeting the dead terminal leaves no crash log
    assert not list(tmp_path.glob("memtop/memtop-crash-*")), [
        p.read_text() for p in tmp_path.glob("memtop/*")
    ]


def test_display_options_work_before_or_after_replay():
    from memtop.cli import build_parser

    p = build_parser()
    a = p.parse_args(["--ascii", "replay", "f.memtop"])
    assert a.ascii and not a.no_mouse and a.paint_rate is None  # None: the config file or 1 Hz
    b = p.parse_args(["replay", "f.memtop", "--no-mouse", "--paint-rate", "2"])
    assert b.no_mouse and b.paint_rate == 2.0 and not b.ascii


def _pty_run(argv: list[str], keys: bytes = b"", sig: int | None = None, env=None):
    """Run ``argv`` on a real 120x40 pty; once the app has painted its footer (its key and signal
    handlers are in place by then: a fixed wait lost the race on a loaded machine) type ``keys``
    and/or send ``sig``. Returns (exit code, everything written to the terminal)."""
    import fcntl
    import select
    import struct
    import termios

    m, s = os.openpty()
    fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen(
        argv,
        stdin=s,
        stdout=s,
        stderr=s,
        start_new_session=True,
        env={**os.environ, "TERM": "xterm-256color", **(env or {})},
    )
    os.close(s)
    out = b""

    def drain(until: float, seen: bytes = b"") -> bool:
        nonlocal out
        while time.monotonic() < until and not (seen and seen in out):
            if select.select([m], [], [], 0.1)[0]:
                try:
                    chunk = os.read(m, 65536)
                except OSError:  # EIO: the child closed the terminal
                    return False
                if not chunk:
                    return False
                out += chunk
            elif p.poll() is not None:
                return False
        return True

    try:
        drain(time.monotonic() + 90, seen=b"quit")
        drain(time.monotonic() + 0.5)
        if keys:
            os.write(m, keys)
        if sig is not None:
            p.send_signal(sig)
        drain(time.monotonic() + 60)  # until it closes the terminal (bounds for a loaded machine)
        return p.wait(60), out
    finally:
        if p.poll() is None:
            p.kill()
        os.close(m)


def _restored(out: bytes) -> bool:
    """The last word on alt screen and mouse tracking is "off"."""
    alt_off, alt_on = out.rfind(b"\x1b[?1049l"), out.rfind(b"\x1b[?1049h")
    mouse_off, mouse_on = out.rfind(b"\x1b[?1000l"), out.rfind(b"\x1b[?1000h")
    return alt_on >= 0 and alt_off > alt_on and mouse_off > mouse_on


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT"])
def test_signals_restore_the_terminal_and_close_the_recording(sig, tmp_path):
    import signal

    rec = tmp_path / "live.memtop"
    rc, out = _pty_run([sys.executable, "-m", "memtop", "--record", str(rec)], sig=getattr(signal, sig))
    assert rc in (0, 128 + getattr(signal, sig)), out[-300:]
    assert _restored(out), out[-300:]
    assert b"Traceback" not in out
    assert rec.exists() and not any(tmp_path.glob("live.memtop-*")), list(tmp_path.iterdir())  # no -wal/-shm


@pytest.mark.slow
@pytest.mark.parametrize("key", [b"q", b"\x03"])
def test_q_and_ctrl_c_quit_with_0(key):
    rc, out = _pty_run([sys.executable, "-m", "memtop", "replay", str(REC[2])], keys=key)
    assert rc == 0 and _restored(out)


# an exception in the app (a key's action), and one in a thread of memtop's (the replay thread)
CRASHES = {
    "app": ("import memtop.tui.app as a\na.MemtopApp.action_zoom = lambda self, f: 1 / 0\n", b"z"),
    "thread": (
        "import memtop.live.pipeline as p\ndef boom(self, start):\n    1 / 0\np.ReplaySource._prefill = boom\n",
        b"\x1b[6~",  # PgDn: a seek, which prefills
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("where", list(CRASHES))
def test_a_crash_restores_the_terminal_names_a_log_and_exits_70(tmp_path, where):
    patch, key = CRASHES[where]
    code = f"import sys\n{patch}from memtop.cli import main\nsys.exit(main(['replay', {str(REC[2])!r}]))\n"
    rc, out = _pty_run([sys.executable, "-c", code], keys=key, env={"XDG_STATE_HOME": str(tmp_path)})
    assert rc == 70, out[-500:]
    assert _restored(out)
    tail = out[out.rfind(b"\x1b[?1049l") :].decode(errors="replace")
    assert "Traceback" not in tail and "internal error: ZeroDivisionError" in tail
    logs = list((tmp_path / "memtop").glob("memtop-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in tail.replace("\r\n", "")
    assert "ZeroDivisionError" in logs[0].read_text()


@pytest.mark.slow
def test_damage_found_mid_replay_is_the_clean_error_and_exit_2(tmp_path):
    """The store raises its clean error for damage it meets only while replaying (a page SQLite reads
    late): the TUI stops with that one line and exit 2, as the CLI does for a damaged file."""
    patch = (
        "import memtop.live.pipeline as p\nfrom memtop.core.errors import UserError\n"
        "def damaged(self, start):\n    raise UserError('x.memtop is damaged or truncated')\n"
        "p.ReplaySource._prefill = damaged\n"
    )
    code = f"import sys\n{patch}from memtop.cli import main\nsys.exit(main(['replay', {str(REC[2])!r}]))\n"
    rc, out = _pty_run([sys.executable, "-c", code], keys=b"\x1b[6~", env={"XDG_STATE_HOME": str(tmp_path)})
    assert rc == 2, out[-500:]
    assert _restored(out)
    tail = out[out.rfind(b"\x1b[?1049l") :].decode(errors="replace")
    assert "memtop: x.memtop is damaged or truncated" in tail and "Traceback" not in tail
    assert not (tmp_path / "memtop").exists()  # no crash log: it is not memtop's fault


def test_record_says_once_that_it_has_no_py_spy(tmp_path, monkeypatch, capsys):
    """corpus runs were once recorded without stacks, silently (py-spy was not on PATH)."""
    import memtop.collectors.stacks as stacks

    monkeypatch.setattr(stacks, "find_pyspy", lambda: None)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:  # in-process, so record's signal handlers are put back afterwards
        assert main(["record", "-o", str(tmp_path / "r.memtop"), "--duration", "1"]) == 0
        err = capsys.readouterr().err
        assert err.count("py-spy not found") == 1 and "--no-stacks" in err
        assert main(["record", "-o", str(tmp_path / "s.memtop"), "--duration", "1", "--no-stacks"]) == 0
        assert "py-spy" not in capsys.readouterr().err
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
