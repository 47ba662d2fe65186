"""The in-job agent: loaded into every Python process of a `memtop run` job, idle until asked.

This file runs inside the user's job, under the job's interpreter, which may not have memtop (or
numpy, or anything) installed: sitecustomize loads it by path, so it imports the standard library
only and nothing of memtop. memtop's side (memtop.agent.client) imports it for the protocol's names.

Idle, it is one daemon thread blocked in accept() on a Unix socket (a blocking call that holds no
GIL), and nothing else: no timer, no framework import. It listens in the private directory that
`memtop run` made (0700) on ``<pid>.sock`` (0600), answers only peers of the job's own uid or root
(SO_PEERCRED), and writes nothing but the framework's trace, in that directory, removed once sent.
Every error is caught where it happens: the job never sees an exception from here.

Protocol: one JSON request line, at most MAX_REQUEST bytes; one JSON answer line, then for a trace
``bytes`` bytes of the framework's Chrome-trace JSON.
  {"op": "hello"} -> {"ok": true, "pid", "frameworks", "protocol", "busy"}
  {"op": "trace", "seconds": S, "steps": N|null, "at": CLOCK_MONOTONIC s|null, "python": bool,
   "cpu_ops": bool}
    -> {"ok": true, "framework", "bytes", "clock", "window", "steps", "warnings", "timing"}
  any failure -> {"ok": false, "error": "one line"}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import socket
import struct
import sys
import threading
import time

ENV_DIR = "MEMTOP_AGENT_DIR"  # the private directory `memtop run` made for this job's sockets
PROTOCOL = 1
MAX_REQUEST = 4096
MAX_SECONDS = 120.0
MAX_STEPS = 10_000
MIN_INTERVAL_S = 30.0  # at most one capture per process per 30 s (a capture slows the job)
CLOCK_MARKS = 3  # record_function marks bracketed by CLOCK_MONOTONIC reads; the tightest aligns
MARK = "memtop.clock."
SETTLE_S = 0.5  # a capture starts once no other thread has been importing for this long
SETTLE_MAX_S = 20.0  # ... or is refused after waiting this long for that
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def socket_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.sock")


class CaptureError(Exception):
    """A capture that cannot be made: one line back to memtop, nothing else happens."""


class Agent:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.path = socket_path(directory, self.pid)
        self._sock: socket.socket | None = None
        self._busy = threading.Lock()
        self._last_end = -MAX_SECONDS - MIN_INTERVAL_S  # CLOCK_MONOTONIC of the last capture's end

    def start(self) -> None:
        st = os.lstat(self.directory)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:  # not the private directory it must be
            raise CaptureError(f"{self.directory} is not a private directory of this user")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # close-on-exec (PEP 446)
        # a socket left by an earlier process of this pid (exec, os._exit, pid reuse) would make bind
        # fail: the directory is private, so whatever is there is ours to remove
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        old = os.umask(0o177)  # the socket file is born 0600: no moment where others could connect
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        sock.listen(4)
        self._sock = sock
        atexit.register(self._remove)
        os.register_at_fork(after_in_child=self._forget)
        threading.Thread(target=self._serve, name="memtop-agent", daemon=True).start()

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            if os.getpid() == self.pid:
                os.unlink(self.path)

    def _forget(self) -> None:
        """A forked child (a DataLoader worker) has no agent thread: close its copy of the socket."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self) -> None:
        while True:
            sock = self._sock
            if sock is None:
                return
            try:
                conn, _ = sock.accept()  # blocks without the GIL: the idle agent costs nothing
            except OSError:
                time.sleep(1.0)  # (EMFILE and the like: never spin)
                continue
            try:
                threading.Thread(
                    target=self._handle, args=(conn,), name="memtop-agent-req", daemon=True
                ).start()
            except Exception:
                conn.close()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(5.0)
                pid, uid, _ = UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))
                if uid not in (os.getuid(), 0):
                    _send(
                        conn,
                        {"ok": False, "error": f"refused: uid {uid} is neither this job's user nor root"},
                    )
                    return
                req = _read_request(conn)
                conn.settimeout(None)  # (the answer of a trace comes after its window)
                self._answer(conn, req)
        except Exception:  # a client that left, a bad request: the job goes on
            pass

    def _answer(self, conn: socket.socket, req: dict) -> None:
        op = req.get("op")
        if op == "hello":
            hi = {"ok": True, "pid": self.pid, "frameworks": frameworks(), "protocol": PROTOCOL}
            _send(conn, {**hi, "busy": self._busy.locked()})
            return
        if op != "trace":
            _send(conn, {"ok": False, "error": f"unknown request {str(op)[:40]!r}"})
            return
        try:
            head, path = self._trace(req, conn)
        except CaptureError as e:
            _send(conn, {"ok": False, "error": str(e)[:500]})
            return
        except Exception as e:  # the profiler's own failure (no CUPTI, one already running...)
            _send(conn, {"ok": False, "error": f"{type(e).__name__}: {str(e)[:400]}"})
            return
        try:  # sent from the page cache: a trace of hundreds of MB never sits in the job's memory
            with open(path, "rb") as fh:
                _send(conn, {**head, "ok": True, "bytes": os.fstat(fh.fileno()).st_size})
                conn.sendfile(fh)
        finally:
            os.unlink(path)

    def _trace(self, req: dict, conn: socket.socket) -> tuple[dict, str]:
        seconds = _number(req.get("seconds"), 0.1, MAX_SECONDS, "seconds")
        steps, at = req.get("steps"), req.get("at")
        if steps is not None:
            steps = int(_number(steps, 1, MAX_STEPS, "steps"))
        if not self._busy.acquire(blocking=False):
            raise CaptureError("a capture of this process is already running")
        try:
            since = time.monotonic() - self._last_end
            if since < MIN_INTERVAL_S:
                raise CaptureError(
                    f"the last capture of this process ended {since:.0f} s ago: at most one per {MIN_INTERVAL_S:.0f} s"
                )
            start = time.monotonic()
            if at is not None:  # all ranks start together
                start = min(max(start, _number(at, 0, 1e12, "at")), start + 10.0)
            warnings = _settle(start)
            if "torch" not in sys.modules:
                raise CaptureError(
                    "a JAX job is not captured: jax.profiler started in a running JAX loop crashed it on the "
                    "device (docs/TRACE.md)"
                    if "jax" in sys.modules
                    else "this process has not imported torch (no framework trace to take)"
                )
            python = bool(req.get("python"))
            cpu_ops = python or bool(req.get("cpu_ops"))
            try:
                return _torch_trace(self.directory, seconds, steps, (cpu_ops, python), conn, warnings)
            finally:
                self._last_end = time.monotonic()
        finally:
            self._busy.release()


def frameworks() -> list[str]:
    """The frameworks the job has imported (never imported here)."""
    return [name for name in ("torch", "jax") if name in sys.modules]


def _number(v: object, lo: float, hi: float, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise CaptureError(f"{what} must be a number between {lo:g} and {hi:g}")
    return float(v)


def _read_request(conn: socket.socket) -> dict:
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(MAX_REQUEST)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise CaptureError("request too long")
    req = json.loads(buf.split(b"\n", 1)[0])
    if not isinstance(req, dict):
        raise CaptureError("a request is a JSON object")
    return req


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")


def _clock_marks(record_function, first: int) -> list[tuple[int, int]]:
    """CLOCK_MONOTONIC brackets (ns) around marks named MARK + k (k from ``first``) that the profiler
    records on its own clock: the tightest bracket gives the offset between the two clocks
    (memtop.agent.merge)."""
    marks = []
    for k in range(first, first + CLOCK_MARKS):
        t0 = time.monotonic_ns()
        with record_function(f"{MARK}{k}"):
            pass
        marks.append((t0, time.monotonic_ns()))
    return marks


_IMPORTLIB = ("importlib/_bootstrap.py", "importlib/_bootstrap_external.py")


def _importing(me: int) -> bool:
    """Whether a thread of the job other than ``me`` is inside an import now (importlib's frames on
    its stack)."""
    for tid, frame in sys._current_frames().items():
        f = frame if tid != me else None
        while f is not None:
            name = f.f_code.co_filename  # (frozen in CPython; a build without frozen modules: the file)
            if name.startswith("<frozen importlib") or name.endswith(_IMPORTLIB):
                return True
            f = f.f_back
    return False


def _settle(start: float) -> list[str]:
    """Wait until ``start`` (CLOCK_MONOTONIC), and beyond it while the job is importing modules.

    Starting the profiler imports parts of torch the job may not have imported yet (torch._dynamo,
    lazily, at its optimizer's first use); two threads importing the same package at once can end in
    a _DeadlockError in one and a half-initialised module in the other. Seen on the H100: a capture
    asked 7 s after the job started, while the optimizer imported torch._dynamo, made the job's
    import fail (bench/RESULTS.md). So the window starts only once no other thread has been inside
    an import for SETTLE_S (checked every 50 ms, from the request on), or is refused after SETTLE_MAX_S."""
    me, quiet, now = threading.get_ident(), time.monotonic(), time.monotonic()
    deadline = max(now, start) + SETTLE_MAX_S
    while True:
        if _importing(me):
            quiet = now
        elif now >= start and now - quiet >= SETTLE_S:
            late = now - start
            return [f"started {late:.1f} s late: the job was importing modules"] if late > 0.1 else []
        if now > deadline:
            raise CaptureError(
                f"the job kept importing modules for {SETTLE_MAX_S:.0f} s: no capture now (it could break an import)"
            )
        time.sleep(0.05)
        now = time.monotonic()


def _until(seconds: float, done: threading.Event, conn: socket.socket) -> None:
    """Wait out the window: it ends early after ``done`` (the steps were counted) or when memtop
    hangs up (killed mid-capture: the profiler stops now, rather than after a window nobody reads).
    A byte after the request ends it too, as a protocol error: a readable socket left unread would
    make select return at once, forever (a spin inside the job)."""
    end = time.monotonic() + seconds
    while not done.is_set() and (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([conn], [], [], min(left, 0.1))
        if ready:
            raise CaptureError("unexpected bytes after the request" if conn.recv(1) else "memtop hung up")


def _torch_trace(
    directory: str,
    seconds: float,
    steps: int | None,
    cpu: tuple[bool, bool],
    conn: socket.socket,
    warnings: list[str],
) -> tuple[dict, str]:
    """Record the PyTorch profiler's trace from this (the agent's) thread. CUDA activities (kernels,
    memcpys, runtime API) come through CUPTI for the whole process. ``cpu``: (the job's CPU ops,
    its Python frames too). Started from this thread, the profiler records only this thread's CPU
    ops (memtop's clock marks) unless profile_all_threads is set; the training thread's ops are
    about half of a busy loop's events, and PyTorch's stop and export and memtop's merge all grow
    with the events (bench/RESULTS.md), so they are recorded only when asked for. CUDA is asked for
    only where the job has initialised it: a CPU-only process (a DataLoader worker) gets no CUDA
    context."""
    cpu_ops, python = cpu
    torch = sys.modules["torch"]
    from torch.profiler import ProfilerActivity, profile, record_function

    if torch.autograd.profiler._is_profiler_enabled:
        raise CaptureError("the PyTorch profiler is already running in this process")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_initialized():
        activities.append(ProfilerActivity.CUDA)
    else:
        warnings.append("CUDA not initialised in this process: CPU activities only")
    config = None
    if cpu_ops:
        try:
            from torch.profiler import _ExperimentalConfig

            config = _ExperimentalConfig(profile_all_threads=True)
        except (ImportError, TypeError):  # an older torch: only this thread's CPU ops are recorded
            warnings.append("this torch cannot record other threads' CPU ops: GPU activities only")
    done = threading.Event()
    counted = [0]

    def on_step(*_: object) -> None:  # runs on the training thread: a count, nothing more
        counted[0] += 1
        if steps is not None and counted[0] >= steps:
            done.set()

    prof = profile(activities=activities, with_stack=python, experimental_config=config)
    optim = sys.modules.get("torch.optim.optimizer")  # (imported only if the job did)
    if optim is None and steps is not None:
        raise CaptureError("--steps: this process has no torch optimizer (use --seconds)")
    hook = None if optim is None else optim.register_optimizer_step_post_hook(on_step)
    try:
        prof.start()
        try:
            start = time.monotonic()
            marks = _clock_marks(record_function, 0)
            _until(seconds, done, conn)
            end = time.monotonic()
            marks += _clock_marks(record_function, CLOCK_MARKS)
        finally:
            stopping = time.monotonic()
            prof.stop()
            stopped = time.monotonic()
    finally:
        if hook is not None:
            hook.remove()
    if steps is not None and counted[0] < steps:
        warnings.append(f"{counted[0]} of {steps} optimizer steps in {seconds:g} s")
    path = os.path.join(directory, f".{os.getpid()}.{time.monotonic_ns()}.json")
    try:
        prof.export_chrome_trace(path)
    except BaseException:  # a half-written trace is never left in the agents' directory
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    exported = time.monotonic()
    head = {
        "framework": "torch",
        "version": str(torch.__version__),
        "clock": [[MARK + str(k), a, b] for k, (a, b) in enumerate(marks)],
        "window": [start, end],
        "steps": counted[0],
        "warnings": warnings,
        "timing": {"stop_s": round(stopped - stopping, 3), "export_s": round(exported - stopped, 3)},
    }
    return head, path


def start_from_environment() -> Agent | None:
    """sitecustomize's entry: an agent for this process if `memtop run` asked for one, else None."""
    directory = os.environ.get(ENV_DIR)
    if not directory:
        return None
    agent = Agent(directory)
    agent.start()
    return agent
