"""memtop's side of the in-job agent: find the agent of a process and ask it.

Everything an agent answers is untrusted (the job's user wrote the code that runs it; memtop may be
root): the socket must be the one the process itself listens on (SO_PEERCRED: the listener's pid),
answers are bounded in bytes and time, and type-checked here."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from memtop.agent.injob import ENV_DIR, MAX_REQUEST, UCRED, socket_path
from memtop.core.errors import UserError
from memtop.core.sanitize import clean
from memtop.fleet.wire import load_json

MAX_TRACE_BYTES = 1 << 30  # a framework trace larger than this is refused (5 s of a busy GPU: ~10-100 MB)
HELLO_TIMEOUT_S = 3.0
MAX_HEAD_OBJECTS = 100  # an answer's head: a few marks and warnings


@dataclass(frozen=True)
class AgentRef:
    pid: int
    path: str
    frameworks: tuple[str, ...] = ()


def _environ_dir(pid: int) -> str | None:
    """The agent directory `memtop run` gave the process (its start-up environment; nothing else of
    the environment is kept). Readable only by the process's user and root: a permission check too."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except FileNotFoundError:
        raise UserError(f"no process with PID {pid}") from None
    except PermissionError:
        raise UserError(f"no permission to ask PID {pid} (run as its user or root)") from None
    except OSError as e:
        raise UserError(f"cannot read PID {pid}: {e.strerror}") from None
    prefix = ENV_DIR.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return os.fsdecode(item[len(prefix) :])
    return None


def locate(pid: int) -> str:
    """The agent socket of ``pid``, or one clear error."""
    directory = _environ_dir(pid)
    if not directory:
        raise UserError(f"PID {pid} has no memtop agent (start the job with `memtop run -- CMD`)")
    path = socket_path(directory, pid)
    if not os.path.exists(path):
        raise UserError(f"PID {pid} has no memtop agent listening (a process that is not Python, or exited)")
    return path


def _connect(pid: int, path: str, deadline: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(_left(deadline))
    try:
        sock.connect(path)
    except PermissionError:
        sock.close()
        raise UserError(f"no permission to ask PID {pid} (run as its user or root)") from None
    except OSError as e:
        sock.close()
        raise UserError(f"the agent of PID {pid} does not answer ({e.strerror or e})") from None
    peer = UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))[0]
    if peer != pid:  # a socket someone else put there: never talk to it
        sock.close()
        raise UserError(f"the socket of PID {pid} belongs to PID {peer}: not asked")
    return sock


def _left(deadline: float) -> float:
    """The time left to an answer: an agent that trickles bytes still ends at the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no whole answer in time")
    return left


def _recv(sock: socket.socket, size: int, deadline: float) -> bytes:
    sock.settimeout(_left(deadline))
    return sock.recv(size)


def _read_line(sock: socket.socket, limit: int, deadline: float) -> tuple[dict, bytes]:
    buf = b""
    while b"\n" not in buf:
        chunk = _recv(sock, 65536, deadline)
        if not chunk:
            raise OSError("the agent closed the connection")
        buf += chunk
        if len(buf) > limit and b"\n" not in buf[:limit]:
            raise OSError("the agent's answer is too long")
    line, rest = buf.split(b"\n", 1)
    head = load_json(line, MAX_HEAD_OBJECTS)
    if not isinstance(head, dict):
        raise OSError("the agent's answer is not a JSON object")
    return head, rest


def ask(pid: int, path: str, request: dict, timeout: float) -> tuple[dict, bytes]:
    """One request; the answer's head (ok: true) and its payload, whole within ``timeout`` s, or a
    UserError."""
    deadline = time.monotonic() + timeout
    sock = _connect(pid, path, deadline)
    try:
        with sock:
            sock.sendall(json.dumps(request).encode() + b"\n")
            head, rest = _read_line(sock, MAX_REQUEST * 16, deadline)
            if head.get("ok") is not True:
                raise UserError(f"PID {pid}: {clean(head.get('error', 'refused'), 500)}")
            size = head.get("bytes", 0)
            if not isinstance(size, int) or not 0 <= size <= MAX_TRACE_BYTES:
                raise OSError(f"a payload of {clean(size, 40)} bytes")
            parts, got = [rest[:size]], len(rest[:size])
            while got < size:
                chunk = _recv(sock, min(1 << 20, size - got), deadline)
                if not chunk:
                    raise OSError("the agent closed the connection mid-answer")
                parts.append(chunk)
                got += len(chunk)
            return head, b"".join(parts)
    except (OSError, ValueError) as e:  # OSError: timeouts too; ValueError: JSON refused
        raise UserError(f"the agent of PID {pid} answered badly: {clean(e, 200)}") from None


def hello(pid: int) -> AgentRef:
    path = locate(pid)
    head, _ = ask(pid, path, {"op": "hello"}, HELLO_TIMEOUT_S)
    fw = head.get("frameworks")
    names = tuple(str(f)[:20] for f in fw) if isinstance(fw, list) else ()
    return AgentRef(pid, path, names)


def children() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (processes that vanish meanwhile are skipped)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after the comm, which may hold spaces and ')'
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def job_agents(run_pid: int) -> list[AgentRef]:
    """The agents of a job: every descendant of ``run_pid`` (the `memtop run` process, or any
    ancestor of the ranks) that has one and has imported a framework, oldest pid first."""
    if not Path(f"/proc/{run_pid}").exists():
        raise UserError(f"no process with PID {run_pid}")
    tree, todo, found = children(), [run_pid], []
    while todo:
        for kid in tree.get(todo.pop(), []):
            todo.append(kid)
            try:
                ref = hello(kid)
            except UserError:
                continue
            if ref.frameworks:
                found.append(ref)
    if not found:
        raise UserError(f"no process under PID {run_pid} has a memtop agent with torch or jax imported")
    return sorted(found, key=lambda r: r.pid)
