"""`memtop run`'s in-job agent and `memtop trace`, with real processes, sockets and (where installed)
the real CPU build of PyTorch. Never evidence that GPU capture works: that is checked on the device
(bench/trace_device.sh, docs/TRACE.md)."""

from __future__ import annotations

import gzip
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

from memtop.agent import capture, injob
from memtop.agent.capture import _Asking
from memtop.agent.client import AgentRef, ask, hello
from memtop.agent.merge import Capture, Encoded, align
from memtop.core.errors import UserError

try:
    import torch  # noqa: F401

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False
needs_torch = pytest.mark.skipif(
    not HAS_TORCH,
    reason="PyTorch is not installed (CI: torch stays out of the test extras, see docs/TRACE.md)",
)
OTHER_PYTHON = "/usr/bin/python3"  # the venv's may sit where uid 65534 cannot reach it
ACCEPT4 = {"x86_64": 288, "aarch64": 242}  # the syscall an idle agent thread sleeps in


def memtop(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memtop", *args], text=True, **kw)


def run_job(code: str, *options: str, env: dict | None = None) -> subprocess.Popen:
    """`memtop run --no-tui` of a Python job that says its pid and agent folder, then waits for a line."""
    return memtop(
        "run",
        "--no-tui",
        *options,
        "--",
        sys.executable,
        "-c",
        textwrap.dedent(code),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


HELLO = """
    import json, os, sys, threading
    print(json.dumps({"pid": os.getpid(), "dir": os.environ["MEMTOP_AGENT_DIR"]}), flush=True)
"""


def first_line(p: subprocess.Popen) -> dict:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, p.communicate(timeout=30)
    return json.loads(line)


def finish(p: subprocess.Popen) -> tuple[str, str]:
    out, err = p.communicate("\n", timeout=60)
    return out, err


def test_the_idle_agent_imports_nothing_and_sleeps_in_accept():
    p = run_job(
        HELLO
        + """
    agent = [t for t in threading.enumerate() if t.name == "memtop-agent"]
    print(json.dumps({
        "frameworks": [m for m in ("torch", "jax", "numpy", "tensorflow") if m in sys.modules],
        "threads": sorted(t.name for t in threading.enumerate()),
        "tid": agent[0].native_id if agent else None,
    }), flush=True)
    sys.stdin.readline()
    """
    )
    try:
        job = first_line(p)
        seen = first_line(p)
        assert seen["frameworks"] == []
        assert seen["threads"] == ["MainThread", "memtop-agent"]  # one thread, nothing else
        task = Path(f"/proc/{job['pid']}/task/{seen['tid']}")
        # the thread may not have reached accept4() yet on a loaded machine: wait for it to, then
        # see it asleep there (a system call, without the GIL)
        nr = ACCEPT4.get(platform.machine())
        deadline = time.monotonic() + 30
        while nr is not None and _syscall(task) != nr and time.monotonic() < deadline:
            time.sleep(0.05)
        if nr is not None:
            assert _syscall(task) == nr
        assert task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "S"
    finally:
        finish(p)
    assert p.returncode == 0


def _syscall(task: Path) -> int | None:
    """The system call the thread is in ("running" or "-1 ..." when it is in none)."""
    first = task.joinpath("syscall").read_text().split()[0]
    return int(first) if first.isdigit() else None


def test_the_socket_is_private_and_answers_its_user():
    p = run_job(HELLO + "\n    sys.stdin.readline()\n")
    try:
        job = first_line(p)
        d = os.lstat(job["dir"])
        assert stat.S_IMODE(d.st_mode) == 0o700 and d.st_uid == os.getuid()
        s = os.lstat(injob.socket_path(job["dir"], job["pid"]))
        assert stat.S_ISSOCK(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o600
        ref = hello(job["pid"])
        assert ref.pid == job["pid"] and ref.frameworks == ()
        with pytest.raises(UserError, match="has not imported torch"):
            ask(ref.pid, ref.path, {"op": "trace", "seconds": 1}, 10)
        with pytest.raises(UserError, match="seconds must be"):
            ask(ref.pid, ref.path, {"op": "trace", "seconds": 1e9}, 10)
    finally:
        finish(p)
    assert not os.path.exists(job["dir"])  # memtop run removes the folder with the job


def test_a_peer_of_another_user_is_refused(monkeypatch):
    """SO_PEERCRED: only the job's uid and root. As root, a real process of uid 65534 asks (the folder
    and socket opened up for it); otherwise the agent is made to belong to another uid."""
    d = tempfile.mkdtemp(prefix="memtop-test-")  # (not under pytest's 0700 folder: uid 65534 must reach it)
    agent = injob.Agent(d)
    agent.start()
    try:
        if os.getuid() == 0:
            if not os.path.exists(OTHER_PYTHON):
                pytest.skip(f"{OTHER_PYTHON} (an interpreter uid 65534 may run) is not there")
            os.chmod(d, 0o711)
            os.chmod(agent.path, 0o666)
            # (the agent refuses before it reads: a request sent after its refusal meets EPIPE)
            code = (
                "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                'try: s.sendall(b\'{"op":"hello"}\\n\')\n'
                "except BrokenPipeError: pass\n"
                "print(s.recv(4096).decode())"
            )
            r = subprocess.run(
                [OTHER_PYTHON, "-c", code, agent.path],
                user=65534,
                cwd="/",
                capture_output=True,
                text=True,
                timeout=30,
            )
            answer = json.loads(r.stdout)
        else:
            monkeypatch.setattr(injob.os, "getuid", lambda: os.geteuid() + 1)
            with pytest.raises(UserError, match="refused: uid"):
                ask(os.getpid(), agent.path, {"op": "hello"}, 10)
            return
        assert answer["ok"] is False and "refused: uid 65534" in answer["error"]
    finally:
        agent._forget()
        shutil.rmtree(d)


def test_run_passes_output_and_exit_status_through():
    code = "import sys; sys.stdout.write('out\\n'); sys.stderr.write('err\\n'); sys.exit(7)"
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "run", "--no-tui", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")


def test_run_forwards_signals_and_reports_a_death_by_signal():
    p = run_job(
        HELLO
        + """
    import signal, time
    signal.signal(signal.SIGUSR1, lambda *a: print("usr1", flush=True))
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(5))
    print("ready", flush=True)
    while True:
        time.sleep(1)
    """
    )
    first_line(p)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGUSR1)
    assert p.stdout.readline() == "usr1\n"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 5
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memtop",
            "run",
            "--no-tui",
            "--",
            sys.executable,
            "-c",
            "import os; os.kill(os.getpid(), 15)",
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 128 + signal.SIGTERM


def test_run_keeps_the_users_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("MARK = 'users'\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = "import sitecustomize, sys; print(sitecustomize.MARK, '_memtop_agent' in sys.modules)"
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "run", "--no-tui", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.stdout == "users True\n", r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trace", str(os.getpid()), "--seconds", "1"], "has no memtop agent"),
        (["trace", "4194304", "--seconds", "1"], "no process with PID 4194304"),
        (["trace", "--job", str(os.getpid()), "--seconds", "1"], "no process under PID"),
        (["run", "--no-tui"], "name the job to run"),
        (["trace", "1", "--seconds", "nan"], "not a finite number"),
        (["trace", "1", "--seconds", "1e9"], "must be between 0.1 and 120 s"),
        (["trace", "1", "--steps", "0"], "must be between 1 and 10000"),
        (["run", "--no-tui", "--", "/nonexistent/job"], "no such file or command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = subprocess.run([sys.executable, "-m", "memtop", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_run_refuses_an_existing_record_file_before_the_job_starts(tmp_path):
    (tmp_path / "x.memtop").write_text("keep")
    ran = tmp_path / "ran"
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "run", "--no-tui", "--record", str(tmp_path / "x.memtop"), "--"]
        + [sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "exists" in r.stderr, r.stderr
    assert not ran.exists() and (tmp_path / "x.memtop").read_text() == "keep"


def test_a_tui_that_fails_to_start_takes_the_job_down_with_it(tmp_path):
    """A TUI that cannot watch (here: a --pid that does not exist) must not leave the job running
    detached: it is stopped and reaped before memtop exits 2."""
    sock, token = f"memtop-run-{os.getpid()}", f"job-{os.getpid()}-{time.monotonic_ns()}"
    job = f"import time; time.sleep(600)  # {token}"
    cmd = shlex.join(
        [sys.executable, "-m", "memtop", "run", "--pid", "4194304", "--log", str(tmp_path / "log")]
        + ["--", sys.executable, "-c", job]
    )
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        ["tmux", "-L", sock, "new-session", "-d", "-x", "120", "-y", "30", f"{cmd}; echo EXIT=$?; sleep 60"],
        check=True,
        env=env,
    )
    try:
        deadline, screen = time.monotonic() + 60, ""
        while "EXIT=" not in screen and time.monotonic() < deadline:
            time.sleep(0.2)
            screen = subprocess.run(
                ["tmux", "-L", sock, "capture-pane", "-p"], capture_output=True, text=True
            ).stdout
        assert "EXIT=2" in screen and "no process with PID 4194304" in screen, screen
        assert not _processes_with(token)  # stopped and reaped, not orphaned
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def _processes_with(token: str) -> list[int]:
    """Python processes whose command line holds ``token`` (not tmux's shell, which names it too)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0") if entry.isdigit() else []
        except OSError:
            continue
        if argv and argv[0] == os.fsencode(sys.executable) and token.encode() in b" ".join(argv):
            found.append(int(entry))
    return found


def test_a_recording_that_is_slow_to_close_is_waited_for_not_killed(monkeypatch, capsys):
    slow = "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: None); print(flush=True); time.sleep(1)"
    for timeout, fault in ((0.2, True), (None, False)):
        proc = subprocess.Popen([sys.executable, "-c", slow], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline()  # its SIGINT handler is set
        monkeypatch.setattr(capture, "STOP_S", 0.2)
        assert bool(capture.stop_recorder(proc, timeout=timeout)) == fault
    assert "waiting for the recording to be closed" in capsys.readouterr().err


TORCH_LOOP = """
    import json, os, sys, time, torch
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    steps = 0
    while not os.path.exists(sys.argv[1]):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    print("done", steps > 0, flush=True)
"""


def torch_job(tmp_path: Path) -> tuple[subprocess.Popen, int, Path]:
    stop = tmp_path / "stop"
    p = memtop(
        "run",
        "--no-tui",
        "--",
        sys.executable,
        "-c",
        textwrap.dedent(TORCH_LOOP),
        str(stop),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return p, first_line(p)["pid"], stop


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_capture_of_a_cpu_torch_loop_merges_with_memtops_tracks(tmp_path):
    p, pid, stop = torch_job(tmp_path)
    out = tmp_path / "t.json.gz"
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "memtop",
                "trace",
                str(pid),
                "--seconds",
                "1.5",
                "-o",
                str(out),
                "--no-stacks",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert r.returncode == 0, r.stderr
        again = subprocess.run(
            [
                sys.executable,
                "-m",
                "memtop",
                "trace",
                str(pid),
                "--seconds",
                "1",
                "-o",
                str(tmp_path / "b.json"),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        stop.touch()
        job_out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and job_out.endswith("done True\n")
    assert again.returncode == 2 and "at most one per 30 s" in again.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = json.loads(gzip.decompress(out.read_bytes()))
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("tid") == pid]  # the training thread's
    names = {e["name"] for e in ops}
    assert {"aten::linear", "aten::mean"} <= names, sorted(names)[:40]
    cpu = [e["ts"] for e in ev if e.get("ph") == "C" and e.get("name") == "CPU %"]  # memtop's host track
    assert cpu
    (cap,) = doc["metadata"]["captures"]
    assert cap["pid"] == pid and cap["steps"] > 0 and cap["clock_residual_us"] < 1000
    lo, hi = (t * 1e6 for t in cap["window_s"])
    # on one clock: the ops sit inside the window memtop noted, and memtop's samples span it
    assert all(lo - 1e4 <= e["ts"] <= hi + 1e4 for e in ops)
    assert min(cpu) < lo and max(cpu) > hi - 1e6


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_killing_memtop_mid_capture_leaves_the_job_running(tmp_path):
    p, pid, stop = torch_job(tmp_path)
    try:
        tracer = memtop(
            "trace", str(pid), "--seconds", "20", "-o", str(tmp_path / "t.json"), stderr=subprocess.PIPE
        )
        assert "capturing" in tracer.stderr.readline()
        ref = hello(pid)
        while not ask(ref.pid, ref.path, {"op": "hello"}, 10)[0]["busy"]:  # the capture is under way
            assert tracer.poll() is None
        with pytest.raises(UserError, match="already running"):
            ask(ref.pid, ref.path, {"op": "trace", "seconds": 1}, 60)
        tracer.kill()
        tracer.wait(timeout=30)
        assert hello(pid).frameworks == ("torch",)  # the agent still answers
    finally:
        stop.touch()
        job_out, job_err = p.communicate(timeout=120)
    assert p.returncode == 0 and job_out.endswith("done True\n"), job_err
    assert not (tmp_path / "t.json").exists()


def test_the_agent_never_listens_outside_a_private_folder(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    with pytest.raises(injob.CaptureError, match="not a private directory"):
        injob.Agent(str(open_dir)).start()
    assert not list(open_dir.iterdir())


def test_a_socket_left_by_the_same_pid_is_replaced():
    """exec keeps the pid and skips atexit: the new image's agent must still listen."""
    p = run_job(
        """
    import json, os, sys
    if "AGAIN" not in os.environ:
        os.environ["AGAIN"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    print(json.dumps({"pid": os.getpid()}), flush=True)
    sys.stdin.readline()
    """
    )
    try:
        pid = first_line(p)["pid"]
        assert hello(pid).pid == pid
    finally:
        finish(p)
    assert p.returncode == 0


def test_bytes_after_the_request_end_the_window_instead_of_spinning():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"x")
        with pytest.raises(injob.CaptureError, match="unexpected bytes"):
            injob._until(60.0, threading.Event(), ours)
        theirs.close()
        with pytest.raises(injob.CaptureError, match="hung up"):
            injob._until(60.0, threading.Event(), ours)


HEAD = {"clock": [], "window": [1.0, 2.0], "warnings": []}


@needs_torch
def test_a_failed_export_leaves_no_trace_file_behind(tmp_path, monkeypatch):
    import torch.profiler

    def half_written(self, path: str) -> None:
        Path(path).write_text('{"traceEvents": [')
        raise OSError("disk full")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", half_written)
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(OSError, match="disk full"):
        injob._torch_trace(str(tmp_path), 0.1, None, (False, False), ours, [])
    assert list(tmp_path.iterdir()) == []


def _capture(pid: int, offset_us: float) -> Capture:
    """A framework trace as the agent sends it: marks on a clock ``offset_us`` ahead of
    CLOCK_MONOTONIC, two processes' worth of tracks (the process and a GPU) and a flow."""
    marks = [[f"{injob.MARK}{k}", 1_000_000 + k * 10_000, 1_000_000 + k * 10_000 + 40_000] for k in range(6)]
    events = [
        {
            "ph": "X",
            "name": f"{injob.MARK}{k}",
            "pid": pid,
            "tid": 9,
            "ts": a / 1000 + offset_us + 5,
            "dur": 10,
        }
        for k, (_, a, _) in enumerate(marks)
    ]
    events += [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 2000 + offset_us, "dur": 5},
        {"ph": "s", "cat": "ac2g", "name": "launch", "pid": pid, "tid": pid, "ts": 1990 + offset_us, "id": 3},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": "bad"},
        "not an event",
    ]
    payload = json.dumps({"traceEvents": events}).encode()
    return Capture.parse(pid, {**HEAD, "framework": "torch", "clock": marks}, payload)


def test_the_merge_aligns_each_capture_and_keeps_ranks_apart():
    a, b = _capture(101, 5e12), _capture(202, -3e6)
    for cap, off in ((a, 5e12), (b, -3e6)):
        al = align(cap)
        # a mark 5 µs into its 40 µs bracket, 10 µs long: the offset is off by the bracket's middle
        # less the mark's, within the residual (40 - 10) / 2
        assert abs(al.offset_us - off) <= al.residual_us == 15.0
        assert al.drift_us == 0.0
    encoded = Encoded([(c, align(c)) for c in (a, b)])
    out = [json.loads(f"[{text}]") for text, _ in encoded]  # (one piece per capture: a small trace)
    counts = encoded.counts
    kernels = [[e for e in evs if e.get("cat") == "kernel"] for evs in out]
    assert [abs(k[0]["ts"] - 2000) <= 15 for k in kernels] == [True, True]  # both on CLOCK_MONOTONIC
    assert kernels[0][0]["pid"] != kernels[1][0]["pid"]  # the two ranks' "GPU 0" stay apart
    assert {e["id"] for evs in out for e in evs if e["ph"] == "s"} == {"0:3", "1:3"}
    names = {e["args"]["name"] for evs in out for e in evs if e.get("name") == "process_name"}
    assert names == {
        "torch pid 101: python3",
        "torch pid 101: GPU 0",
        "torch pid 202: python3",
        "torch pid 202: GPU 0",
    }
    assert not any(e.get("ts") == "bad" for evs in out for e in evs)  # an event without a time is left out
    assert counts["kernel"] == 2 and counts["cpu_op"] == 0


def test_a_trace_without_memtops_marks_is_refused():
    cap = Capture.parse(1, HEAD, b'{"traceEvents": [{"ph": "X", "name": ["unhashable"], "ts": 1}]}')
    with pytest.raises(UserError, match="clock marks"):
        align(cap)
    with pytest.raises(UserError, match="no traceEvents"):
        Capture.parse(1, HEAD, b"{")
    with pytest.raises(UserError, match="not JSON"):
        Capture.parse(1, HEAD, b'{"traceEvents": [{"ph": "X"},]}')
    with pytest.raises(UserError, match="over 20000000 JSON objects"):
        Capture.parse(1, HEAD, b"[" * 20_000_001)


@pytest.mark.parametrize(
    "bad",
    [
        {"clock": 5},
        {"clock": [[f"{injob.MARK}x", 1, 2]]},
        {"clock": [[f"{injob.MARK}1", 1, 10**400]]},
        {"clock": [[f"{injob.MARK}1", True, 2]]},
        {"warnings": 5},
        {"warnings": [5]},
        {"window": [0, float("nan")]},
        {"window": None},
    ],
)
def test_a_malformed_answer_head_is_one_line(bad):
    with pytest.raises(UserError, match="malformed") as e:
        Capture.parse(7, {**HEAD, **bad}, b'{"traceEvents": []}')
    assert "\n" not in str(e.value)


def fake_agent(tmp_path: Path, answer: bytes, pause: float = 0.0) -> AgentRef:
    """An agent socket in this process (SO_PEERCRED: our pid) that sends ``answer`` in 1-byte
    pieces ``pause`` s apart to the first caller."""
    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                for i in range(len(answer)):
                    try:
                        conn.sendall(answer[i : i + 1])
                    except OSError:  # the caller gave up
                        return
                    time.sleep(pause)

    threading.Thread(target=serve, daemon=True).start()
    return AgentRef(os.getpid(), path)


def test_an_agent_that_trickles_its_answer_is_cut_at_one_deadline(tmp_path):
    ref = fake_agent(tmp_path, b'{"ok": true, "pid": 1}' + b" " * 1000 + b"\n", pause=0.01)
    with pytest.raises(UserError, match="in time|timed out"):
        ask(ref.pid, ref.path, {"op": "hello"}, 0.5)  # every byte within 0.5 s of the last


def test_an_answer_head_of_many_objects_is_refused_unparsed(tmp_path):
    ref = fake_agent(tmp_path, b"[" * 1000 + b"\n")
    with pytest.raises(UserError, match="over 100 JSON objects"):
        ask(ref.pid, ref.path, {"op": "hello"}, 30)


def test_one_process_that_cannot_be_aligned_is_a_failure_line_not_the_captures_end(tmp_path):
    trace = b'{"traceEvents": []}'
    head = json.dumps({**HEAD, "ok": True, "framework": "torch", "bytes": len(trace)}).encode()
    ref = fake_agent(tmp_path, head + b"\n" + trace)
    caps, failed = _Asking([ref], {"op": "trace"}, 30, []).join()
    assert caps == [] and len(failed) == 1 and "clock marks" in failed[0]


@needs_torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_all_ranks_of_a_job_are_captured_over_one_window(tmp_path):
    """Two processes under `memtop run` (as torchrun's ranks are), each with its own agent."""
    rank = tmp_path / "rank.py"
    rank.write_text(textwrap.dedent(TORCH_LOOP))
    stop = tmp_path / "stop"
    launcher = (
        "import subprocess, sys\n"
        f"ranks = [subprocess.Popen([sys.executable, {str(rank)!r}, {str(stop)!r}]) for _ in range(2)]\n"
        "sys.exit(max(r.wait() for r in ranks))\n"
    )
    p = memtop(
        "run",
        "--no-tui",
        "--",
        sys.executable,
        "-c",
        launcher,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        pids = {first_line(p)["pid"], first_line(p)["pid"]}
        out = tmp_path / "job.json"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "memtop",
                "trace",
                "--job",
                str(p.pid),
                "--seconds",
                "1",
                "-o",
                str(out),
                "--no-stacks",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert r.returncode == 0, r.stderr
    finally:
        stop.touch()
        p.communicate(timeout=120)
    assert p.returncode == 0
    caps = json.loads(out.read_text())["metadata"]["captures"]
    assert {c["pid"] for c in caps} == pids  # the launcher (no torch) is not asked
    (a0, a1), (b0, b1) = (c["window_s"] for c in caps)
    assert a0 < b1 and b0 < a1  # one window: each started before the other ended


def test_a_jax_job_is_refused_in_one_line(monkeypatch, tmp_path):
    """jax.profiler started from the agent in a running JAX loop crashed the job on the H200
    (CUDA_ERROR_LAUNCH_FAILED, bench/RESULTS.md): a JAX job is refused, and says why."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(injob.CaptureError, match="JAX job is not captured"):
        injob.Agent(str(tmp_path))._trace({"seconds": 1}, ours)
