"""The transports of `memtop cluster`, each giving NodeStates the same snapshot schema:
- HTTP: every node's `memtop serve` /snapshot.json, polled concurrently (a bounded pool, keep-alive
  connections, a deadline per request, nodes still in flight skipped, never waited for);
- ssh: one long-lived `ssh -o BatchMode=yes HOST memtop snapshot --json --interval S` per node,
  reading its JSON lines (argv lists, no shell; the user's ssh config and agent);
- Prometheus: a server's HTTP API (`rate()` of the phase counters), for hundreds of nodes, one node
  per scrape `instance`.
Node names come from --hosts, --hostfile or `scontrol show hostnames`. Every answer crosses
memtop.fleet.wire (bounded, typed, sanitized) before anything else sees it.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import IO

from memtop.analysis.phases import CHARS
from memtop.core.errors import UserError
from memtop.core.model import JOB_KEYS
from memtop.fleet import wire
from memtop.fleet.fetch import Again, DeadlineExceeded, Fetcher, Loop, Origin
from memtop.fleet.files import read_regular
from memtop.fleet.view import PHASE_OF, NodeState

_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]{1,255}")
MAX_HOSTFILE = 4 << 20  # 100 000 nodes of 40 characters


def default_interval(n: int) -> float:
    """2 s for a few nodes, growing with the count so a big job costs the same per second."""
    return max(2.0, n / 50)


def read_hosts(args: argparse.Namespace) -> list[str]:
    if args.hosts:
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    elif args.hostfile:
        try:
            text = read_regular(args.hostfile, "--hostfile", MAX_HOSTFILE).decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"--hostfile {args.hostfile} is not UTF-8 text (byte {e.start})") from None
        hosts = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
        hosts = [h for h in hosts if h]
    else:
        hosts = slurm_hosts(args.slurm)
    bad = [h for h in hosts if not _HOST.fullmatch(h) or h.startswith("-") or not _port_ok(h)]
    if bad:
        raise UserError(f"not a host name: {bad[0]!r}")
    if not hosts:
        raise UserError("no nodes given")
    return list(dict.fromkeys(hosts))


def split_target(target: str, default_port: int) -> tuple[str, int]:
    """(host, port) of host, host:port, [v6] or [v6]:port (a bare v6 address has no port); ValueError
    for a port that is not one."""
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        if rest and not (rest[:1] == ":" and rest[1:].isdigit()):
            raise ValueError(target)
        port = int(rest[1:]) if rest else default_port
    else:
        host, sep, tail = target.rpartition(":")
        if not (sep and host and ":" not in host and tail.isdigit()):
            host, port = target, default_port
        else:
            port = int(tail)
    if not 0 < port < 65536:
        raise ValueError(target)
    return host, port


def _port_ok(target: str) -> bool:
    try:
        split_target(target, 1)
    except ValueError:
        return False
    return True


def slurm_hosts(job: str) -> list[str]:
    """The job's nodes: its NodeList from `scontrol show job`, expanded by `scontrol show hostnames`."""
    if not re.fullmatch(r"[0-9]{1,12}(_[0-9]{1,8})?", job):
        raise UserError(f"--slurm wants a job id: {job!r}")

    def scontrol(*argv: str) -> str:
        try:
            r = subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            raise UserError("--slurm needs scontrol (Slurm's client) on PATH") from None
        except subprocess.TimeoutExpired:
            raise UserError("scontrol did not answer in 30 s") from None
        if r.returncode != 0:
            raise UserError(f"scontrol {' '.join(argv)}: {r.stderr.strip()[:200]}")
        return r.stdout

    m = re.search(r"\bNodeList=(\S+)", scontrol("show", "job", "-o", job))
    if m is None or m.group(1) in ("(null)", ""):
        raise UserError(f"Slurm job {job} has no nodes (not running?)")
    return scontrol("show", "hostnames", m.group(1)).split()


# what a fetch may raise, each said by _why (wire.Refused is a ValueError)
FETCH_ERRORS = (OSError, ValueError)


def _why(e: OSError | ValueError) -> str:
    if isinstance(e, DeadlineExceeded):
        return "timeout (deadline)"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    if isinstance(e, socket.gaierror):
        return "unknown host"
    if isinstance(e, wire.Refused):
        return str(e)
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return f"bad address: {e}"  # a ValueError: a host name the resolver cannot encode


class HttpPoller:
    """Polls every node's /snapshot.json, or with `compact` its compact form (wire.compact) but for
    the node in `focus` (whose detail is on screen) and nodes that answered anything else for it
    (older memtops: a 404): one keep-alive connection per node, one deadline per
    request (connect + headers + body). A node with a kept-alive plain connection is polled by the
    Loop, one thread for all of them; a new connection (the first poll, after a failure), TLS, a
    redirect and a retry go to a bounded pool of worker threads fed by one queue. A node still in
    flight is not polled again, and poll_all(wait=False) returns at once: a slow or hostile node
    holds a worker or the loop's attention for at most its deadline and never delays another
    node's poll."""

    PATH = "/snapshot.json"

    def __init__(
        self,
        nodes: list[NodeState],
        port: int,
        timeout: float = 3.0,
        token: str | None = None,
        tls: bool = False,
        concurrency: int = 32,
        compact: bool = False,
    ) -> None:
        self.nodes, self.port, self.timeout, self.compact = nodes, port, timeout, compact
        self.focus: str | None = None  # the target whose full snapshot is wanted (see want_full)
        self._no_compact: set[str] = set()  # targets that answered anything but the compact form
        self.headers = {"Accept": "application/json", "User-Agent": "memtop-cluster"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.ctx = ssl.create_default_context() if tls else None
        self._todo: queue.SimpleQueue[NodeState | None] = queue.SimpleQueue()
        self.workers = [
            threading.Thread(target=self._work, name=f"poll_{i}", daemon=True)
            for i in range(min(concurrency, len(nodes)))
        ]
        self.loop = Loop()
        self._loop_thread = threading.Thread(target=self.loop.run, name="poll_loop", daemon=True)
        self._fetchers: dict[str, Fetcher] = {}
        self._busy: set[str] = set()
        self._done = threading.Condition()  # guards _busy and _waiting; told when a poll ends
        self._waiting = 0  # poll_all(wait=True) calls waiting on _done
        self._started = False  # the threads: by the first poll_all

    def _fetcher(self, target: str) -> Fetcher:
        f = self._fetchers.get(target)
        if f is None:
            host, port = split_target(target, self.port)
            origin = Origin("https" if self.ctx else "http", host.lower(), port)
            f = self._fetchers[target] = Fetcher(origin, wire.MAX_SNAPSHOT, self.headers, self.ctx)
        return f

    def _path(self, node: NodeState) -> str:
        full = not self.compact or node.target == self.focus or node.target in self._no_compact
        return self.PATH if full else wire.COMPACT_PATH

    def poll_one(self, node: NodeState) -> None:
        path = self._path(node)
        try:
            got: tuple[int, bytes | bytearray] | BaseException = self._fetcher(node.target).get(
                path, time.monotonic() + self.timeout
            )
        except FETCH_ERRORS as e:
            got = e
        if not self._answered(node, path, got):
            self.poll_one(node)  # (once: the node is now polled for the full snapshot)

    def _answered(
        self, node: NodeState, path: str, got: tuple[int, bytes | bytearray] | BaseException
    ) -> bool:
        """The answer said in the node's state; False when the node answered a request for the
        compact form with anything else (then it is polled for /snapshot.json from now on)."""
        if isinstance(got, FETCH_ERRORS):
            node.bad(_why(got))
        elif isinstance(got, BaseException):  # a fault of memtop's: said in the node's row
            node.bad(f"polling failed: {type(got).__name__}: {got}")
        elif (status := got[0]) in (401, 403):
            node.bad("auth")
        elif path == wire.COMPACT_PATH:
            if status == 200 and node.receive(got[1], compact=True):
                return True
            if status == 200 or 400 <= status < 500:  # (an old node's 404, a proxy's page)
                self._no_compact.add(node.target)
                return False
            node.bad(f"HTTP {status}")
        elif status != 200:
            node.bad(f"HTTP {status}")
        else:
            node.receive(got[1])
        return True

    def want_full(self, target: str | None) -> None:
        """Poll `target`'s full snapshot from now on (the others' compact form), the first one now;
        None: none."""
        self.focus = target
        node = next((n for n in self.nodes if n.target == target), None)
        if node is None or not self._started:
            return
        with self._done:
            if target in self._busy:
                return  # (the next round polls it)
            self._busy.add(node.target)
        self._todo.put(node)

    def _work(self) -> None:
        while (node := self._todo.get()) is not None:
            try:
                self.poll_one(node)
            except Exception as e:  # a fault of memtop's: said in the node's row, the worker goes on
                node.bad(f"polling failed: {type(e).__name__}: {e}")
            finally:
                self._finished(node)

    def _looped(self, node: NodeState, path: str) -> Callable[[tuple[int, bytearray] | BaseException], None]:
        """What the loop calls with the node's answer to `path` (in its thread)."""

        def done(got: tuple[int, bytearray] | BaseException) -> None:
            if isinstance(got, Again):
                return self._todo.put(node)  # the worker asks again, from the start
            try:
                if not self._answered(node, path, got):
                    return self._todo.put(node)  # a worker asks for the full snapshot (still in flight)
            except Exception as e:  # as a worker's: the loop goes on
                node.bad(f"polling failed: {type(e).__name__}: {e}")
            self._finished(node)

        return done

    def _finished(self, node: NodeState) -> None:
        with self._done:
            self._busy.discard(node.target)
            if self._waiting:  # (the TUI never waits: a thousand answers a round tell no one)
                self._done.notify_all()

    def in_flight(self) -> int:
        """How many polls have not ended yet (a round's answers still coming in)."""
        return len(self._busy)  # (one read of a set's size: no lock needed)

    def poll_all(self, wait: bool = True) -> None:
        """Start a poll of every node not already in flight; with `wait`, until these end (each
        within its deadline). Nodes that answered last time go first: dead ones queue behind them."""
        with self._done:
            todo = [n for n in self.nodes if n.target not in self._busy]
            self._busy.update(n.target for n in todo)
        todo.sort(key=lambda n: n.error is not None)
        if not self._started:
            self._started = True
            for t in [*self.workers, self._loop_thread]:
                t.start()
        deadline = time.monotonic() + self.timeout
        for n in todo:
            f = self._fetchers.get(n.target)  # (none yet: no connection either)
            path = self._path(n)
            if f is None or not self.loop.submit(f, path, deadline, self._looped(n, path)):
                self._todo.put(n)
        self.loop.wake()
        if wait:
            targets = {n.target for n in todo}
            with self._done:
                self._waiting += 1
                try:
                    self._done.wait_for(lambda: not targets & self._busy)
                finally:
                    self._waiting -= 1

    def close(self, wait: bool = False) -> None:
        """Polls not begun are dropped, those in flight end at once (their sockets shut); with
        `wait`, until every worker has returned."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._todo.get_nowait()
        for _ in self.workers:
            self._todo.put(None)
        self.loop.close()
        for f in list(self._fetchers.values()):
            f.close()
        if wait:
            for t in [*self.workers, self._loop_thread] if self._started else []:
                t.join()


class SshStreams:
    """One `ssh HOST memtop snapshot --json --interval S` per node, its JSON lines read as they come."""

    def __init__(
        self, nodes: list[NodeState], interval: float, ssh_config: str | None = None, timeout: float = 10.0
    ) -> None:
        self.nodes, self.interval, self.ssh_config, self.timeout = nodes, interval, ssh_config, timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()  # stop() and a new ssh's entry in procs: one before the other
        self._threads: list[threading.Thread] = []

    def argv(self, host: str) -> list[str]:
        cfg = ["-F", self.ssh_config] if self.ssh_config else []
        return [
            "ssh",
            *cfg,
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, int(self.timeout))}",
            "-o",
            "ServerAliveInterval=15",
            "--",
            host,
            "memtop",
            "snapshot",
            "--json",
            "--interval",
            f"{self.interval:g}",
        ]

    def start(self) -> None:
        for node in self.nodes:
            t = threading.Thread(target=self._run, args=(node,), name=f"ssh-{node.target}", daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self, node: NodeState) -> None:
        while not self._stop.is_set():
            try:
                p = subprocess.Popen(
                    self.argv(node.target),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            except OSError as e:
                node.bad(f"ssh: {e.strerror}")
                return
            with self._lock:
                stopped = self._stop.is_set()
                if not stopped:
                    self.procs[node.target] = p
            if stopped:  # stop() came while ssh started: it did not see this one
                _end([p], time.monotonic() + 5)
                return
            last_err: list[str] = []  # ssh's last stderr line
            err_reader = threading.Thread(target=self._drain_err, args=(p, last_err), daemon=True)
            err_reader.start()
            assert p.stdout is not None  # stdout=PIPE
            self._read_lines(node, p.stdout)
            rc = p.wait()
            err_reader.join(2)  # its last line says why ssh failed
            if self._stop.is_set():
                return
            node.bad(_ssh_why(rc, last_err[-1] if last_err else ""))
            self._stop.wait(self.interval)  # then reconnect

    @staticmethod
    def _read_lines(node: NodeState, out: IO[bytes]) -> None:
        """JSON lines, each read with a bound: a line over the cap is refused and skipped."""
        while line := out.readline(wire.MAX_SNAPSHOT + 1):
            if len(line) <= wire.MAX_SNAPSHOT:
                node.receive(line)
                continue
            node.bad(f"bad response: a line over {wire.MAX_SNAPSHOT >> 20} MiB")
            while line and not line.endswith(b"\n"):
                line = out.readline(wire.MAX_SNAPSHOT)

    @staticmethod
    def _drain_err(p: subprocess.Popen, last: list[str]) -> None:
        assert p.stderr is not None  # stderr=PIPE
        while line := p.stderr.readline(4096):
            last[:] = [line.decode("utf-8", "replace").strip()[:200]]  # NodeState.bad cleans it

    def stop(self) -> None:
        """Ends every ssh: all told at once, then waited for within one deadline (5 s in all)."""
        with self._lock:
            self._stop.set()
            procs = list(self.procs.values())
        _end(procs, time.monotonic() + 5)


def _end(procs: list[subprocess.Popen], deadline: float) -> None:
    """SIGTERM to each, then SIGKILL to those still running at `deadline`; each reaped."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _ssh_why(rc: int, err: str) -> str:
    low = err.lower()
    if "permission denied" in low or "host key verification failed" in low:
        return "auth"
    if "connection refused" in low:
        return "refused"
    if "timed out" in low:
        return "timeout"
    if rc == 127 or "not found" in low:
        return "ssh: memtop not found on the node"
    return f"ssh exited {rc}" + (f": {err}" if err else "")


class PromSource:
    """Every node from a Prometheus server: phase shares from rate() of the counters, the band from
    increase() over ten-second steps, identity from memtop_gpu_info, age from the last scrape. A node
    is a scrape `instance` (what is unique; every `serve --demo` has the same hostname)."""

    BAND_STEP_S = 10.0
    BAND_S = 240.0
    KEY = "instance, hostname, gpu, uuid"

    def __init__(self, url: str, timeout: float = 10.0, token: str | None = None) -> None:
        try:
            origin = Origin.parse(url)
        except ValueError:
            raise UserError(f"--prom wants an http(s):// URL: {url!r}") from None
        self.url, self.timeout = url.rstrip("/"), timeout
        self.prefix = urllib.parse.urlsplit(self.url).path  # a server behind a path (/prometheus)
        headers = {"Accept": "application/json", "User-Agent": "memtop-cluster"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.fetcher = Fetcher(origin, wire.MAX_PROM, headers)
        self.nodes: dict[str, NodeState] = {}
        self.received = 0  # bytes of answers
        self.error: str | None = None
        self.refused = False  # the server's answer was not a Prometheus answer (not unreachable)

    def _get(self, deadline: float, path: str, **params: str) -> list[wire.Series]:
        status, body = self.fetcher.get(f"{self.prefix}{path}?{urllib.parse.urlencode(params)}", deadline)
        self.received += len(body)
        if status in (401, 403):
            raise wire.Refused("auth")
        if status != 200 and not body.startswith(b"{"):  # a 400/422/503 carries Prometheus' error
            raise wire.Refused(f"HTTP {status}")
        return wire.prom_result(body)

    def poll_all(self, wait: bool = True) -> None:
        """One round of queries, all within one deadline (a trickling server costs one timeout)."""
        now, deadline = time.time(), time.monotonic() + self.timeout
        key, step = self.KEY, f"{self.BAND_STEP_S:g}"
        try:
            shares = self._get(
                deadline,
                "/api/v1/query",
                query=f"sum by ({key}, phase) (rate(memtop_gpu_phase_seconds_total[1m]))",
            )
            steps = self._get(
                deadline,
                "/api/v1/query_range",
                query=f"sum by ({key}, phase) (increase(memtop_gpu_phase_seconds_total[{step}s]))",
                start=f"{now - self.BAND_S:.0f}",
                end=f"{now:.0f}",
                step=step,
            )
            info = self._get(deadline, "/api/v1/query", query="memtop_gpu_info")
            sm = self._get(
                deadline,
                "/api/v1/query",
                query="memtop_gpu_sm_activity_ratio or memtop_gpu_utilization_ratio",
            )
            seen = self._get(
                deadline, "/api/v1/query", query="max by (instance) (timestamp(memtop_build_info))"
            )
        except FETCH_ERRORS as e:
            self.refused = isinstance(e, wire.Refused) and str(e) != "auth"
            self.error = f"Prometheus at {self.url}: {_why(e)}"
            for n in self.nodes.values():
                n.bad(self.error)
            return
        self.error, self.refused = None, False
        self._update(now, shares, steps, info, sm, seen)

    def _update(self, now: float, shares: list, steps: list, info: list, sm: list, seen: list) -> None:
        gpus: dict[tuple[str, str], dict] = {}
        hostnames: dict[str, str] = {}

        def gpu(m: dict[str, str]) -> dict:
            node = m.get("instance") or m.get("hostname", "?")
            hostnames.setdefault(node, m.get("hostname", ""))
            label = m.get("gpu", "0")
            return gpus.setdefault(
                (node, label),
                {
                    # not a small number: wire refuses the node, with the reason
                    "index": int(label) if label.isdigit() and len(label) <= 4 else label,
                    "uuid": m.get("uuid", ""),
                    "name": "",
                    "mode": "gpm",
                    "gauges": {},
                    "throttle": [],
                    "phase": "gathering",
                    "shares": {},
                    "band": "",
                    "verdict": None,
                    "job": {},
                },
            )

        for m, v in _last(shares):
            if v > 0:
                gpu(m)["shares"][m.get("phase", "other")] = v  # wire normalises them per GPU
        per_step: dict[int, dict[float, dict[str, float]]] = {}
        for m, points in steps:
            g = gpu(m)
            for t, v in points:
                per_step.setdefault(id(g), {}).setdefault(t, {})[m.get("phase", "other")] = v
        for g in gpus.values():
            chars = []
            for _, c in sorted(per_step.get(id(g), {}).items()):
                top, val = max(c.items(), key=lambda x: x[1])
                chars.append(CHARS.get(top, "?") if val > 0 else " ")
            g["band"] = "".join(chars)[-120:]
            last = next((ch for ch in reversed(chars) if ch != " "), " ")
            g["phase"] = PHASE_OF.get(last, "gathering")
        for m, _ in info:
            g = gpu(m)
            g["name"] = m.get("name", "")
            g["job"] = {k: m[k] for k in JOB_KEYS if m.get(k)}
        for m, v in _last(sm):
            gpu(m)["gauges"]["sm" if "sm_activity" in m.get("__name__", "") else "util"] = 100 * v
        when = {m.get("instance", "?"): v for m, v in _last(seen)}  # the value is the scrape's time
        self._publish(now, gpus, hostnames, when)

    def _publish(
        self, now: float, gpus: dict[tuple[str, str], dict], hostnames: dict[str, str], when: dict[str, float]
    ) -> None:
        by_node: dict[str, list[dict]] = {}
        for (node, _), g in gpus.items():
            by_node.setdefault(node, []).append(g)
        mono = time.monotonic()
        for node, gl in by_node.items():
            state = self.nodes.setdefault(node, NodeState(node))
            gl.sort(key=lambda g: g["index"] if isinstance(g["index"], int) else -1)
            snap = {
                "schema_version": wire.SCHEMA_VERSION,
                "memtop_version": "",
                "hostname": hostnames.get(node, ""),
                "time": when.get(node, now),
                "mode": "live",
                "band_step_s": self.BAND_STEP_S,
                "gpus": gl,
                "processes": [],
            }
            state.good(snap, 0)
            if state.snapshot is not None and state.error is None:
                state.ok_at = mono - max(0.0, now - when.get(node, now))  # as old as its last scrape

    def close(self) -> None:
        self.fetcher.close()


def _last(series: list[wire.Series]) -> list[tuple[dict[str, str], float]]:
    """An instant query's series as (labels, value); a series without samples is left out."""
    return [(m, points[-1][1]) for m, points in series if points]


Source = HttpPoller | SshStreams | PromSource


def node_list(src: Source) -> list[NodeState]:
    return list(src.nodes.values()) if isinstance(src.nodes, dict) else src.nodes
