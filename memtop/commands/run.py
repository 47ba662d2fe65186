"""`memtop run [--no-tui] [--record FILE] -- CMD ...`: start a job with the in-job agent in each of its
Python processes (for `memtop trace`), and watch it as `memtop --pid <its pid>` would.

The agent comes in through PYTHONPATH: a folder holding only a sitecustomize.py (memtop/agent/site)
that starts the agent and then imports the sitecustomize the job would have had. Headless, the job
keeps the terminal: its stdin, stdout and stderr are memtop's own, untouched, and memtop exits with
its exit status (128+N for a signal N). With the TUI, the job's output goes to a log file instead."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from memtop.agent import injob
from memtop.agent.capture import start_recorder, stop_recorder
from memtop.core.errors import UserError
from memtop.core.sanitize import clean

SITE = Path(injob.__file__).parent / "site"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


def job_environment(agent_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment: memtop's site folder first on PYTHONPATH (the user's entries after it)
    and the agents' private directory."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SITE) + (os.pathsep + old if old else "")
    env[injob.ENV_DIR] = agent_dir
    return env


def exit_status(returncode: int) -> int:
    """Popen's -N for a signal N is 128+N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def _terminal_signalled_child(child: subprocess.Popen) -> bool:
    """A Ctrl-C or Ctrl-\\ on the terminal reaches its foreground process group: the job got it
    already if it is in that group; passing it on would deliver it twice (torchrun stops on one)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.getpgid(child.pid) == os.tcgetpgrp(fd)
    return False


def forward_signals(child: subprocess.Popen) -> None:
    def handler(sig: int, _frame: object) -> None:
        if sig in _FROM_TERMINAL and _terminal_signalled_child(child):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, sig)

    for sig in FORWARDED:
        signal.signal(sig, handler)


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("name the job to run: memtop run [--no-tui] -- CMD ...")
    return cmd


def _spawn(cmd: list[str], env: dict[str, str], tui_log: int | None) -> subprocess.Popen:
    try:
        if tui_log is None:  # headless: the job has the terminal as if memtop were not there
            return subprocess.Popen(cmd, env=env)
        # with the TUI: the screen is memtop's; the job reads nothing and writes to the log
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=tui_log, stderr=tui_log, start_new_session=True
        )
    except FileNotFoundError:
        raise UserError(f"cannot run {clean(cmd[0], 200)}: no such file or command") from None
    except PermissionError:
        raise UserError(f"cannot run {clean(cmd[0], 200)}: permission denied") from None


def _open_log(path: str) -> int:
    try:  # appended, 0600, never through a symlink
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise UserError(f"cannot write the job's log {clean(path, 200)}: {e.strerror}") from None


def run_job(args: argparse.Namespace) -> int:
    cmd = _command(args)
    if args.no_tui and getattr(args, "trace_on", None):
        raise UserError("--trace-on needs the live view (its verdicts): drop --no-tui")
    if not args.no_tui:
        from memtop.commands.local import check_trace_dir

        check_trace_dir(args)
    if not args.no_tui and not (sys.stderr.isatty() and sys.stdin.isatty()):
        raise UserError("the TUI needs a terminal; use `memtop run --no-tui -- CMD` when piping")
    if args.record:  # refused now, not once the job runs (a TUI that fails would orphan it)
        from memtop.storage.store import check_creatable

        check_creatable(Path(args.record), args.force)
    agent_dir = tempfile.mkdtemp(prefix="memtop-run-")  # 0700: only the job's user reaches the sockets
    log = None if args.no_tui else _open_log(args.log)
    try:
        child = _spawn(cmd, job_environment(agent_dir), log)
        if log is not None:
            os.close(log)
            log = None
        if args.no_tui:
            return _headless(child, args)
        return _with_tui(child, args)
    finally:
        if log is not None:
            os.close(log)
        shutil.rmtree(agent_dir, ignore_errors=True)


def _record_options(args: argparse.Namespace) -> list[str]:
    opts = ["--interval", repr(args.interval), "--stack-interval", repr(args.stack_interval)]
    for flag in ("force", "no_stacks", "native", "no_gpm", "no_perf"):
        if getattr(args, flag, False):
            opts.append("--" + flag.replace("_", "-"))
    return opts


def _headless(child: subprocess.Popen, args: argparse.Namespace) -> int:
    forward_signals(child)
    recorder = None
    if args.record:
        recorder = start_recorder(Path(args.record), [child.pid, *args.pid], _record_options(args))
    code = exit_status(child.wait())
    if recorder is not None:
        fault = stop_recorder(recorder, timeout=None)  # a long recording's close is never cut short
        print(
            f"memtop: {f'recording failed: {fault}' if fault else f'recorded the job to {args.record}'}",
            file=sys.stderr,
        )
    return code


def _with_tui(child: subprocess.Popen, args: argparse.Namespace) -> int:
    from memtop.commands.local import live

    args.pid = [child.pid, *args.pid]
    args.demo = False
    forward_signals(child)  # (in the TUI a Ctrl-C is a key; after it, Ctrl-C reaches the job)
    try:
        code = live(args)
    except BaseException:  # memtop exits: the job, detached from the terminal, must not outlive it
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        child.wait()
        raise
    if child.poll() is None:
        print(
            f"memtop: the job (pid {child.pid}) is still running, its output in {args.log}; "
            "waiting for it (Ctrl-C stops it)",
            file=sys.stderr,
        )
    job = exit_status(child.wait())
    return code or job
