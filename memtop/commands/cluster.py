"""`memtop cluster`: many nodes' snapshots, merged into one row per GPU.

Transports, each giving the same snapshot schema (docs/snapshot.schema.json) per node:
- HTTP: every node's `memtop serve` /snapshot.json, polled concurrently (bounded pool, keep-alive
  connections, a timeout and one retry per poll);
- ssh: one long-lived `ssh -o BatchMode=yes HOST memtop snapshot --json --interval S` per node,
  reading its JSON lines (argv lists, no shell; the user's ssh config and agent);
- Prometheus: a server's HTTP API (`rate()` of the phase counters), for hundreds of nodes.
Node names come from --hosts, --hostfile or `scontrol show hostnames`. Everything a node sends is
untrusted: the TUI passes it through memtop.sanitize.clean and never parses it as markup.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from memtop.commands.authtoken import read_token
from memtop.errors import UserError
from memtop.model import JOB_KEYS
from memtop.phases import CHARS

SCHEMA_VERSION = 1
STALE_INTERVALS = 3  # a node greys out after this many intervals without a good snapshot
MAX_BODY = 4 << 20  # a snapshot is a few KB; anything this large is not one
RECENT_STEPS = 5  # straggler detection compares the last few band steps, not one 0.5 s bin
MAJORITY = 0.6  # ...and needs this share of the job's GPUs to agree on a phase
_PHASE_OF = {c: p for p, c in CHARS.items()}
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]{1,255}")


def default_interval(n: int) -> float:
    """2 s for a few nodes, growing with the count so a big job costs the same per second."""
    return max(2.0, n / 50)


@dataclass
class NodeState:
    target: str  # as given: host, host:port or a Prometheus hostname label
    snapshot: dict | None = None
    ok_at: float = 0.0  # monotonic time of the newest good snapshot
    error: str | None = None  # why the newest poll failed: timeout, refused, auth, ...
    polls: int = 0
    failures: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def age(self, now: float | None = None) -> float | None:
        return None if not self.ok_at else (now or time.monotonic()) - self.ok_at

    def stale(self, interval: float, now: float | None = None) -> bool:
        age = self.age(now)
        return age is None or age > STALE_INTERVALS * interval

    def good(self, snap: dict, size: int) -> None:
        if not isinstance(snap, dict) or not isinstance(snap.get("gpus"), list):
            return self.bad("bad response: not a memtop snapshot")
        snap = _sane(snap)
        with self.lock:
            self.snapshot, self.ok_at, self.error = snap, time.monotonic(), None
            self.polls += 1
            self.bytes += size

    def bad(self, why: str) -> None:
        with self.lock:
            self.error = why
            self.polls += 1
            self.failures += 1


def _sane(snap: dict) -> dict:
    """The fields the view reads, with the types it expects: a node may send anything."""

    def d(v: object) -> dict:
        return v if isinstance(v, dict) else {}

    gpus = []
    for g in snap["gpus"]:
        if not isinstance(g, dict):
            continue
        g = dict(g)
        for k in ("band", "phase", "name", "uuid"):
            g[k] = g[k] if isinstance(g.get(k), str) else ""
        g["shares"] = {k: v for k, v in d(g.get("shares")).items() if isinstance(v, (int, float))}
        g["gauges"] = {k: v for k, v in d(g.get("gauges")).items() if isinstance(v, (int, float))}
        g["job"] = {k: v for k, v in d(g.get("job")).items() if isinstance(v, str)}
        v = g.get("verdict")
        ok = (str, int, float, list)
        g["verdict"] = {k: x for k, x in v.items() if isinstance(x, ok)} if isinstance(v, dict) else None
        gpus.append(g)
    return {**snap, "gpus": gpus}


def read_hosts(args: argparse.Namespace) -> list[str]:
    if args.hosts:
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    elif args.hostfile:
        try:
            text = Path(args.hostfile).read_text()
        except OSError as e:
            raise UserError(f"cannot read --hostfile {args.hostfile}: {e.strerror}") from None
        hosts = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
        hosts = [h for h in hosts if h]
    else:
        hosts = slurm_hosts(args.slurm)
    bad = [h for h in hosts if not _HOST.fullmatch(h) or h.startswith("-")]
    if bad:
        raise UserError(f"not a host name: {bad[0]!r}")
    if not hosts:
        raise UserError("no nodes given")
    return list(dict.fromkeys(hosts))


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


def _why(e: BaseException) -> str:
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ssl.SSLError):
        return f"TLS: {e.reason or e}"
    if isinstance(e, socket.gaierror):
        return "unknown host"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return type(e).__name__


class HttpPoller:
    """Polls every node's /snapshot.json with a bounded pool; one keep-alive connection per node."""

    def __init__(
        self,
        nodes: list[NodeState],
        port: int,
        timeout: float = 3.0,
        token: str | None = None,
        tls: bool = False,
        concurrency: int = 32,
        retries: int = 1,
    ) -> None:
        self.nodes, self.port, self.timeout, self.retries = nodes, port, timeout, retries
        self.headers = {"Accept": "application/json", "User-Agent": "memtop-cluster"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.ctx = ssl.create_default_context() if tls else None
        self.pool = ThreadPoolExecutor(max_workers=min(concurrency, len(nodes)), thread_name_prefix="poll")
        self._conns: dict[str, http.client.HTTPConnection] = {}

    def _addr(self, target: str) -> tuple[str, int]:
        if target.startswith("["):  # [v6] or [v6]:port
            host, _, rest = target[1:].partition("]")
            return host, int(rest[1:]) if rest[:1] == ":" and rest[1:].isdigit() else self.port
        host, sep, port = target.rpartition(":")
        if sep and host and ":" not in host and port.isdigit():
            return host, int(port)
        return target, self.port

    def _conn(self, target: str) -> http.client.HTTPConnection:
        c = self._conns.get(target)
        if c is None:
            host, port = self._addr(target)
            if self.ctx is not None:
                c = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self.ctx)
            else:
                c = http.client.HTTPConnection(host, port, timeout=self.timeout)
            self._conns[target] = c
        return c

    def poll_one(self, node: NodeState) -> None:
        why = "?"
        for _ in range(1 + self.retries):
            c = self._conn(node.target)
            try:
                c.request("GET", "/snapshot.json", headers=self.headers)
                r = c.getresponse()
                body = r.read(MAX_BODY + 1)
            except (OSError, http.client.HTTPException) as e:
                c.close()  # a dropped keep-alive connection is retried on a fresh one
                why = _why(e)
                if why == "timeout":
                    break  # a retry would double a dead node's cost
                continue
            if r.status in (401, 403):
                return node.bad("auth")
            if r.status != 200:
                return node.bad(f"HTTP {r.status}")
            if len(body) > MAX_BODY:
                c.close()
                return node.bad("bad response: too large")
            try:
                return node.good(json.loads(body), len(body))
            except (ValueError, RecursionError):
                return node.bad("bad response: not JSON")
        node.bad(why)

    def poll_all(self) -> None:
        list(self.pool.map(self.poll_one, self.nodes))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        for c in self._conns.values():
            c.close()


class SshStreams:
    """One `ssh HOST memtop snapshot --json --interval S` per node, its JSON lines read as they come."""

    def __init__(
        self, nodes: list[NodeState], interval: float, ssh_config: str | None = None, timeout: float = 10.0
    ) -> None:
        self.nodes, self.interval, self.ssh_config, self.timeout = nodes, interval, ssh_config, timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()
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
            self.procs[node.target] = p
            last_err: list[str] = []  # ssh's last stderr line
            err_reader = threading.Thread(target=self._drain_err, args=(p, last_err), daemon=True)
            err_reader.start()
            assert p.stdout is not None  # stdout=PIPE
            for line in p.stdout:
                if len(line) > MAX_BODY:
                    node.bad("bad response: too large")
                    continue
                try:
                    node.good(json.loads(line), len(line))
                except (ValueError, RecursionError):
                    node.bad("bad response: not JSON")
            rc = p.wait()
            err_reader.join(2)  # its last line says why ssh failed
            if self._stop.is_set():
                return
            node.bad(_ssh_why(rc, last_err[-1] if last_err else ""))
            self._stop.wait(self.interval)  # then reconnect

    @staticmethod
    def _drain_err(p: subprocess.Popen, last: list[str]) -> None:
        assert p.stderr is not None  # stderr=PIPE
        for line in p.stderr:
            last[:] = [line.decode("utf-8", "replace").strip()[:200]]

    def stop(self) -> None:
        self._stop.set()
        for p in list(self.procs.values()):
            if p.poll() is None:
                p.terminate()
        for p in list(self.procs.values()):
            try:
                p.wait(5)
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
    increase() over ten-second steps, identity from memtop_gpu_info, age from the last scrape."""

    BAND_STEP_S = 10.0
    BAND_S = 240.0

    def __init__(self, url: str, timeout: float = 10.0, token: str | None = None) -> None:
        if not re.match(r"https?://", url):
            raise UserError(f"--prom wants an http(s):// URL: {url!r}")
        self.url, self.timeout = url.rstrip("/"), timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.nodes: dict[str, NodeState] = {}
        self.bytes = 0
        self.error: str | None = None

    def _get(self, path: str, **params: str) -> list:
        import urllib.parse
        import urllib.request

        req = urllib.request.Request(
            f"{self.url}{path}?{urllib.parse.urlencode(params)}", headers=self.headers
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            body = r.read(64 << 20)
        self.bytes += len(body)
        data = json.loads(body)
        if data.get("status") != "success":
            raise ValueError(data.get("error", "query failed"))
        return data["data"]["result"]

    def poll_all(self) -> None:
        now = time.time()
        key = "hostname, gpu, uuid"
        try:
            shares = self._get(
                "/api/v1/query", query=f"sum by ({key}, phase) (rate(memtop_gpu_phase_seconds_total[1m]))"
            )
            steps = self._get(
                "/api/v1/query_range",
                query=f"sum by ({key}, phase) (increase(memtop_gpu_phase_seconds_total[{self.BAND_STEP_S:g}s]))",
                start=f"{now - self.BAND_S:.0f}",
                end=f"{now:.0f}",
                step=f"{self.BAND_STEP_S:g}",
            )
            info = self._get("/api/v1/query", query="memtop_gpu_info")
            sm = self._get(
                "/api/v1/query", query="memtop_gpu_sm_activity_ratio or memtop_gpu_utilization_ratio"
            )
            seen = self._get("/api/v1/query", query="max by (hostname) (timestamp(memtop_build_info))")
        except (OSError, ValueError, KeyError) as e:
            self.error = f"Prometheus at {self.url}: {_why(e) if isinstance(e, OSError) else e}"
            for n in self.nodes.values():
                n.bad(self.error)
            return
        self.error = None
        gpus: dict[tuple[str, str], dict] = {}

        def gpu(m: dict) -> dict:
            k = (m.get("hostname", "?"), m.get("gpu", "0"))
            return gpus.setdefault(
                k,
                {
                    "index": int(k[1]) if k[1].isdigit() else 0,
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

        for s in shares:
            v = float(s["value"][1])
            if v > 0:
                gpu(s["metric"])["shares"][s["metric"].get("phase", "other")] = round(v, 4)
        per_step: dict[tuple[str, str], dict[float, dict[str, float]]] = {}
        for s in steps:
            k = (s["metric"].get("hostname", "?"), s["metric"].get("gpu", "0"))
            gpu(s["metric"])
            phase = s["metric"].get("phase", "other")
            for t, v in s["values"]:
                per_step.setdefault(k, {}).setdefault(float(t), {})[phase] = float(v)
        for k, by_t in per_step.items():
            chars = []
            for t in sorted(by_t):
                c = by_t[t]
                top, val = max(c.items(), key=lambda x: x[1]) if c else ("", 0)
                chars.append(CHARS.get(top, "?") if val > 0 else " ")
            gpus[k]["band"] = "".join(chars)[-120:]
            last = next((ch for ch in reversed(chars) if ch != " "), " ")
            gpus[k]["phase"] = _PHASE_OF.get(last, "gathering")
        for s in info:
            g = gpu(s["metric"])
            g["name"] = s["metric"].get("name", "")
            g["job"] = {k: s["metric"][k] for k in JOB_KEYS if s["metric"].get(k)}
        for s in sm:
            name = s["metric"].get("__name__", "")
            g = gpu(s["metric"])
            g["gauges"]["sm" if "sm_activity" in name else "util"] = 100 * float(s["value"][1])
        when = {s["metric"].get("hostname", "?"): float(s["value"][1]) for s in seen}
        by_host: dict[str, list[dict]] = {}
        for (host, _), g in sorted(gpus.items(), key=lambda x: (x[0][0], x[1]["index"])):
            by_host.setdefault(host, []).append(g)
        mono = time.monotonic()
        for host, gl in by_host.items():
            node = self.nodes.setdefault(host, NodeState(host))
            snap = {
                "schema_version": SCHEMA_VERSION,
                "memtop_version": "",
                "hostname": host,
                "time": when.get(host, now),
                "mode": "live",
                "band_step_s": self.BAND_STEP_S,
                "gpus": gl,
                "processes": [],
            }
            node.good(snap, 0)
            node.ok_at = mono - max(0.0, now - when.get(host, now))  # as old as its last scrape

    def close(self) -> None:
        pass


# -- the merged view ---------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    key: str  # target/gpu
    target: str
    hostname: str
    gpu: dict
    job: str  # the group a straggler is judged in
    stale: str | None  # why the node is stale, or None
    age: float | None
    straggler: str | None = None  # evidence, when this GPU's phase differs from the rest of its job


def _job_key(g: dict) -> str:
    job = g.get("job") or {}
    if job.get("slurm_job_id"):
        return f"slurm {job['slurm_job_id']}"
    if job.get("pod"):
        return "pod " + re.sub(r"-[0-9]+$", "", job["pod"])  # trainer-0, trainer-1: one job
    return "all"


def recent_phase(g: dict) -> str:
    """The GPU's phase over the last few band steps (one 0.5 s bin is too jumpy to compare)."""
    tail = [c for c in (g.get("band") or "")[-RECENT_STEPS:] if c.strip()]
    if not tail:
        return str(g.get("phase", "gathering"))
    return _PHASE_OF.get(Counter(tail).most_common(1)[0][0], "other")


def rows(nodes: list[NodeState], interval: float) -> list[Row]:
    now = time.monotonic()
    out: list[Row] = []
    for n in nodes:
        with n.lock:
            snap, err, age = n.snapshot, n.error, n.age(now)
        stale = None
        if n.stale(interval, now):
            stale = err or ("no answer yet" if snap is None else "no fresh snapshot")
        if snap is None:
            out.append(Row(f"{n.target}/-", n.target, "", {}, "none", stale or err, age))
            continue
        for g in snap.get("gpus", []):
            if isinstance(g, dict):
                out.append(
                    Row(
                        f"{n.target}/{g.get('index')}",
                        n.target,
                        str(snap.get("hostname", "")),
                        g,
                        _job_key(g),
                        stale,
                        age,
                    )
                )
    return _flag_stragglers(out)


def _flag_stragglers(rs: list[Row]) -> list[Row]:
    """Within each job (Slurm id, pod set, or all GPUs shown), a GPU whose recent phase differs from
    what most of the job's GPUs are doing is the straggler candidate: in a synchronous job the slow
    rank computes while the others wait for it in a collective, or the reverse."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rs):
        if r.gpu and r.stale is None:
            groups.setdefault(r.job, []).append(i)
    out = list(rs)
    for job, idx in groups.items():
        if len(idx) < 3:
            continue
        phases = {i: recent_phase(rs[i].gpu) for i in idx}
        (major, count), *_ = Counter(p for p in phases.values() if p != "gathering").most_common(1) or [
            ("", 0)
        ]
        if not major or count < MAJORITY * len(idx) or count == len(idx):
            continue
        for i in idx:
            p = phases[i]
            if p in (major, "gathering"):
                continue
            g = rs[i].gpu
            v = g.get("verdict") or {}
            share = (g.get("shares") or {}).get(p)
            ev = f"{p} while {count} of {len(idx)} GPUs of {'the job' if job == 'all' else job} are {major}"
            if share is not None:
                ev += f"; {100 * share:.0f} % {p} over the last minute"
            if v.get("headline"):
                ev += f"; verdict: {v['headline']}" + (f" ({v['evidence']})" if v.get("evidence") else "")
            out[i] = Row(**{**rs[i].__dict__, "straggler": ev})
    return out


def merged(nodes: list[NodeState], interval: float) -> dict:
    """`--once --json`: every node's snapshot and state, and the straggler candidates."""
    now = time.monotonic()
    flagged = [r for r in rows(nodes, interval) if r.straggler]
    return {
        "schema_version": SCHEMA_VERSION,
        "time": round(time.time(), 3),
        "interval_s": interval,
        "nodes": [
            {
                "target": n.target,
                "ok": n.snapshot is not None and not n.stale(interval, now),
                "error": n.error,
                "age_s": None if (age := n.age(now)) is None else round(age, 2),
                "snapshot": n.snapshot,
            }
            for n in nodes
        ],
        "stragglers": [
            {
                "target": r.target,
                "hostname": r.hostname,
                "gpu": r.gpu.get("index"),
                "job": r.job,
                "evidence": r.straggler,
            }
            for r in flagged
        ],
    }


def _token(args: argparse.Namespace) -> str | None:
    if not args.token_file:
        return None
    return read_token(args.token_file)


def make_source(args: argparse.Namespace):
    """(nodes, poller, interval): the transport the flags ask for."""
    token = _token(args)
    if args.prom:
        src = PromSource(args.prom, timeout=max(args.timeout, 5.0), token=token)
        return src, args.interval or 5.0
    hosts = read_hosts(args)
    nodes = [NodeState(h) for h in hosts]
    interval = args.interval or default_interval(len(nodes))
    if args.ssh:
        return SshStreams(nodes, interval, ssh_config=args.ssh_config, timeout=args.timeout), interval
    return HttpPoller(nodes, args.port, timeout=args.timeout, token=token, tls=args.tls), interval


def node_list(src) -> list[NodeState]:
    return list(src.nodes.values()) if isinstance(src.nodes, dict) else src.nodes


def run_cluster(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        raise UserError("--json goes with --once")
    if args.ssh and args.prom:
        raise UserError("--ssh and --prom are two transports: choose one")
    src, interval = make_source(args)
    if args.once:
        try:
            if isinstance(src, SshStreams):
                src.start()
                end = time.monotonic() + interval + args.timeout + 15  # a node's memtop warms up first
                while time.monotonic() < end and any(
                    n.snapshot is None and n.failures == 0 for n in src.nodes
                ):
                    time.sleep(0.1)
            else:
                src.poll_all()
        finally:
            (src.stop if isinstance(src, SshStreams) else src.close)()
        nodes = node_list(src)
        if getattr(src, "error", None) and not nodes:
            print(f"memtop: {src.error}", file=sys.stderr)
            return 1
        out = merged(nodes, interval)
        if args.json:
            print(json.dumps(out, separators=(",", ":")))
        else:
            _print_text(nodes, interval)
        return 0 if all(n["ok"] for n in out["nodes"]) else 1
    if not (sys.stderr.isatty() and sys.stdin.isatty()):
        raise UserError("the cluster view needs a terminal; use --once --json when piping")
    from memtop.tui.cluster import ClusterApp

    app = ClusterApp(src, interval, ascii_only=args.ascii, theme=args.theme, paint_rate=args.paint_rate)
    app.run(mouse=not args.no_mouse)
    return 0


def _print_text(nodes: list[NodeState], interval: float) -> None:
    from memtop.sanitize import clean

    for r in rows(nodes, interval):
        g = r.gpu
        head = f"{clean(r.target, 40):<24} GPU {g.get('index', '-')!s:<2}"
        if r.stale:
            print(f"{head} stale: {clean(r.stale, 80)}")
            continue
        flag = "  << straggler? " + clean(r.straggler, 300) if r.straggler else ""
        print(f"{head} {clean(g.get('phase', ''), 10):<9} {clean(g.get('band', '')[-40:], 40)}{flag}")
