"""`memtop serve`: this node's pipeline as Prometheus metrics (/metrics), as the snapshot schema
(/snapshot.json; /compact.json, what `memtop cluster`'s table polls), or as a textfile for
node_exporter. A custom collector reads the newest View on each scrape: serving adds no sampling of
its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from memtop.commands.authtoken import read_token
from memtop.core.errors import UserError
from memtop.core.sanitize import clean

if TYPE_CHECKING:
    import socket

TEXTFILE_EVERY_S = 5.0
PREFIX = "memtop_"


def _what(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class ServeStats:
    """What the HTTP server itself counts: connections that ended in an error, by kind ("reset": the
    client reset, timed out or spoke no TLS; "internal": a fault of memtop's). Each is logged on its
    first occurrence and then once per LOG_EVERY, so no client can flood the journal."""

    LOG_EVERY = 1000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.errors = {"reset": 0, "internal": 0}

    def count(self, kind: str, what: str) -> None:
        with self.lock:
            self.errors[kind] += 1
            n = self.errors[kind]
        if n == 1 or n % self.LOG_EVERY == 0:
            print(
                f"memtop serve: {n} connection(s) ended by {'the client' if kind == 'reset' else 'an error'} "
                f'so far, the last: {clean(what, 200)} (memtop_serve_connection_errors_total{{kind="{kind}"}};'
                f" logged once per {self.LOG_EVERY})",
                file=sys.stderr,
                flush=True,
            )


class NodeCollector:
    """prometheus_client custom collector: gauges from the newest frame, counters of phase and
    clock-event seconds, an info series per GPU with its job identity, the node's GPU count, and build
    info. Labels are gpu, uuid, hostname and node (the info series adds the job's identity); never a
    PID. `node` tells apart exporters that share a host name (demo nodes, containers): this machine's
    name and the port served, or the name alone for a textfile."""

    def __init__(self, node, stats: ServeStats | None = None, per_process: bool = False) -> None:
        self.node = node
        self.stats = stats
        self.per_process = per_process  # --per-process: the pid-labelled series (off: see _processes)

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        from memtop import __version__
        from memtop.collectors.jobid import KEYS
        from memtop.commands.snapshot import GAUGES, PHASES

        node = self.node
        view = node.view()
        phases = node.pipeline.count_phases(view)
        clocks = node.pipeline.clock_seconds
        frame = view.frame
        host = node.hostname
        build = InfoMetricFamily(PREFIX + "build", "memtop version and how this node is sampled")
        build.add_metric([], {"version": __version__, "mode": view.status.mode})
        yield build
        if self.stats is not None:
            errors = CounterMetricFamily(
                PREFIX + "serve_connection_errors",
                "connections that ended in an error: reset (the client reset, timed out or spoke no TLS) "
                "or internal",
                labels=["kind"],
            )
            for kind, n in sorted(self.stats.errors.items()):
                errors.add_metric([kind], float(n))
            yield errors
        if frame is None:
            return
        count = GaugeMetricFamily(
            PREFIX + "node_gpus",
            "GPUs this node reports (0: no NVIDIA driver or GPU)",
            labels=["hostname", "node"],
        )
        count.add_metric([host, node.node_id], float(len(frame.gpus)))
        yield count
        jobs, _ = node.gpu_jobs(frame)
        base = ["gpu", "uuid", "hostname", "node"]
        gpus = [(g, [str(g.index), g.uuid, host, node.node_id]) for g in frame.gpus]
        for m in GAUGES:
            unit = {"percent": "ratio, 0..1", "mhz": "Hz"}.get(m.kind, m.kind.replace("_", " "))
            dcgm = f"; dcgm-exporter: {m.dcgm}" if m.dcgm else ""
            assert m.prom is not None  # GAUGES holds only the exported metrics
            fam = GaugeMetricFamily(PREFIX + m.prom, f"{m.help} ({unit}{dcgm})", labels=base)
            for g, labels in gpus:
                v = getattr(g, m.name)
                if v is None:
                    continue
                if m.kind == "percent":
                    v = v / 100.0
                elif m.kind == "mhz":
                    v = v * 1e6
                fam.add_metric(labels, float(v))
            yield fam
        counter = CounterMetricFamily(
            PREFIX + "gpu_phase_seconds",
            "seconds each GPU spent in each phase (rate() over a window gives its shares)",
            labels=[*base, "phase"],
        )
        for g, labels in gpus:
            c = phases.get(g.index, {})
            for ph in PHASES:
                counter.add_metric([*labels, ph], float(c.get(ph, 0.0)))
        yield counter
        counter = CounterMetricFamily(
            PREFIX + "gpu_clock_event_seconds",
            "seconds a clock-event (throttle) reason was active (dcgm-exporter: "
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, a bitmask there)",
            labels=[*base, "reason"],
        )
        from memtop.core.model import CLOCK_EVENT_NAMES

        for g, labels in gpus:
            c = clocks.get(g.index, {})
            for reason in CLOCK_EVENT_NAMES.values():
                counter.add_metric([*labels, reason.replace(" ", "_")], float(c.get(reason, 0.0)))
        yield counter
        yield from _hardware_families(node.pipeline, gpus, base)
        straggler = GaugeMetricFamily(
            PREFIX + "gpu_straggler",
            "1 while this GPU is its job's straggler on this node (the job's other GPUs wait for it), else 0",
            labels=base,
        )
        for g, labels in gpus:
            v = view.verdicts.get(g.index)
            if v is not None:
                straggler.add_metric(labels, 1.0 if v.straggler else 0.0)
        yield straggler
        info = InfoMetricFamily(PREFIX + "gpu", "GPU model and the identity of the job using it", labels=base)
        for g, labels in gpus:
            job = jobs.get(g.index, {})
            info.add_metric(labels, {"name": g.name, **{k: job.get(k, "") for k in KEYS}})
        yield info
        if self.per_process:
            yield from _processes(gpus)


def _hardware_families(pipeline, gpus: list, base: list[str]):
    """Energy by phase (the driver's counter, split by memtop.analysis.energy), the health counters (memtop.analysis.health:
    names after dcgm-exporter's fields) and the health events memtop saw, as counters rate() reads."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from memtop.analysis.health import COUNTERS

    fam = CounterMetricFamily(
        PREFIX + "gpu_energy_joules",
        "energy by phase since memtop started: the driver's energy counter (dcgm-exporter: "
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ, unsplit), each rise given to its bin's phase",
        labels=[*base, "phase"],
    )
    for g, labels in gpus:
        for phase, joules in sorted(pipeline.phase_energy.get(g.index, {}).items()):
            fam.add_metric([*labels, phase], joules)
    yield fam
    for c in COUNTERS:
        kind = CounterMetricFamily if c.counter else GaugeMetricFamily
        one: CounterMetricFamily | GaugeMetricFamily = kind(
            PREFIX + c.prom.removesuffix("_total"), f"{c.help} (dcgm-exporter: {c.dcgm})", labels=base
        )
        for g, labels in gpus:
            v = None if g.health is None else getattr(g.health, c.field)
            if v is not None:
                one.add_metric(labels, v * c.scale)
        yield one
    fam = CounterMetricFamily(
        PREFIX + "gpu_health_events",
        "health events memtop saw since it started, by kind and Xid (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS "
        "is the last Xid, which never resets; this counts each one)",
        labels=[*base, "kind", "xid"],
    )
    for (gi, kind, xid), n in sorted(pipeline.health_counts.items()):
        labels = next((lb for g, lb in gpus if g.index == gi), None)
        if labels is not None:
            fam.add_metric([*labels, kind, xid], float(n))
    yield fam


def _processes(gpus: list) -> Iterator:
    """``--per-process`` only: each GPU process's share of its GPU, labelled by pid. A series per GPU
    process and metric, and a new one each time a process starts (a restarted job's PIDs are new):
    N GPUs x P processes x 2 series now, and every PID ever seen stays in the TSDB until retention
    drops it. The design keeps PIDs out of every other series."""
    from prometheus_client.core import GaugeMetricFamily

    for field, name, what in (
        ("sm", "process_sm_utilization_ratio", "time its kernels ran"),
        ("mem", "process_memory_utilization_ratio", "time its memory was read or written"),
    ):
        fam = GaugeMetricFamily(
            PREFIX + name,
            f"share of the {what} on this GPU, per process (the driver's per-process samples; ratio, 0..1)",
            labels=["gpu", "uuid", "hostname", "node", "pid"],
        )
        for g, labels in gpus:
            for u in g.proc_util:
                v = getattr(u, field)
                if v is not None:
                    fam.add_metric([*labels, str(u.pid)], v / 100.0)
        yield fam


def registry(node, stats: ServeStats | None = None, per_process: bool = False):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node, stats, per_process))
    return reg


def exposition(reg) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(reg)


def write_textfile(directory: Path, data: bytes) -> None:
    """Atomically replace DIR/memtop.prom. The temporary file has a random name (mkstemp: O_EXCL,
    O_NOFOLLOW, 0600), so no one who can write DIR can take its name in advance; it becomes 0644 only
    once written, unlike memtop's other files: node_exporter runs as its own user and must read it,
    and it holds what /metrics would serve (no PIDs, no command lines)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".memtop.prom.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, directory / "memtop.prom")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Answers:
    """The bodies of /metrics and /snapshot.json, made once per newest frame: every scrape between
    two frames would compute the same bytes, and hundreds of clients at once must not each pay for
    them (bench/RESULTS.md). Used from the event loop's one thread."""

    def __init__(self, make) -> None:
        self.make = make
        self.key: object = None
        self.body = b""

    def get(self, key: object) -> bytes:
        if key is None or key is not self.key:
            self.body = self.make()
            self.key = key
        return self.body


BACKLOG = 4096  # listen(): the kernel caps it at net.core.somaxconn
IDLE_S = 30.0  # an idle keep-alive connection (or a request's head not yet complete) is closed after this
HEAD_MAX = 16 * 1024  # a request's line and headers; serve reads no body
STATUS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
          503: "Service Unavailable"}  # fmt: skip


class Http:
    """The endpoints over asyncio: one thread holds every connection, answers leave in one write
    each, and the bodies come from Answers. A thread per connection (http.server) made 300 keep-alive
    clients queue behind the GIL's hand-offs: p99 1.6 s after the backlog fix (bench/RESULTS.md)."""

    def __init__(self, node, reg, token: str | None, stats: ServeStats) -> None:
        import json

        from memtop.commands.snapshot import snapshot
        from memtop.fleet.wire import COMPACT_PATH, compact

        self.node = node
        self.token = f"Bearer {token}".encode() if token is not None else None
        self.stats = stats
        self.metrics = Answers(lambda: exposition(reg))
        self.snap = Answers(lambda: json.dumps(snapshot(node), separators=(",", ":")).encode())
        # what `memtop cluster`'s table polls: the same frame's snapshot, cut (memtop.fleet.wire)
        self.compact_path = COMPACT_PATH.encode()
        self.compact = Answers(lambda: json.dumps(compact(snapshot(node)), separators=(",", ":")).encode())

    def answer(self, method: bytes, path: bytes, headers: dict[bytes, bytes]) -> tuple[int, bytes, str, str]:
        """Status, body, content type and any extra header lines for one request."""
        import hmac

        from prometheus_client import CONTENT_TYPE_LATEST

        text = "text/plain; charset=utf-8"
        if method not in (b"GET", b"HEAD"):
            return 405, b"GET or HEAD\n", text, "Allow: GET, HEAD\r\n"
        path = path.split(b"?", 1)[0]
        node = self.node
        if path == b"/-/ready":
            if not node.is_ready():
                return 503, b"starting\n", text, ""
            missing = node.no_gpu()
            return (
                (503, f"no GPU: {missing}\n".encode(), text, "") if missing else (200, b"ready\n", text, "")
            )
        if self.token is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self.token):
            return 401, b"unauthorized\n", text, "WWW-Authenticate: Bearer\r\n"
        if path == b"/metrics":
            return 200, self.metrics.get(node.pipeline.frame), CONTENT_TYPE_LATEST, ""
        if path == b"/snapshot.json":
            return 200, self.snap.get(node.pipeline.frame), "application/json", ""
        if path == self.compact_path:
            return 200, self.compact.get(node.pipeline.frame), "application/json", ""
        if path == b"/":
            return 200, b"memtop serve: /metrics /snapshot.json /compact.json /-/ready\n", text, ""
        return 404, b"not found\n", text, ""

    async def connection(self, reader, writer) -> None:
        import asyncio
        import ssl

        try:
            while True:
                try:  # between requests, silence and a close are a client's right, not an error
                    first = await asyncio.wait_for(reader.read(1), IDLE_S)
                except (TimeoutError, asyncio.TimeoutError):  # not one class before Python 3.11
                    return
                if not first or not await self._one(first, reader, writer):
                    return
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            TimeoutError,
            asyncio.TimeoutError,
            ssl.SSLError,
        ) as e:
            self.stats.count("reset", _what(e))  # mid-request: a reset, a stall, a flood
        except Exception as e:  # a fault of memtop's: counted and said rarely, the server goes on
            self.stats.count("internal", _what(e))
        finally:
            writer.close()

    async def _one(self, first: bytes, reader, writer) -> bool:
        """Reads the rest of a request begun by `first` and answers it; False when the connection is
        to close."""
        import asyncio

        head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
        line, *rest = head[:-4].split(b"\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in rest)}
        parts = line.split(b" ")
        if (
            len(parts) != 3
            or not parts[2].startswith(b"HTTP/1.")
            or headers.get(b"content-length", b"0") != b"0"
            or b"transfer-encoding" in headers
        ):
            code, body, ctype, extra = 400, b"bad request\n", "text/plain; charset=utf-8", ""
            keep = False
        else:
            code, body, ctype, extra = self.answer(parts[0], parts[1], headers)
            conn = headers.get(b"connection", b"").lower()
            keep = conn != b"close" if parts[2] == b"HTTP/1.1" else conn == b"keep-alive"
        out = (
            f"HTTP/1.1 {code} {STATUS[code]}\r\nServer: memtop\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n{extra}"
            + ("" if keep else "Connection: close\r\n")
            + "\r\n"
        ).encode()
        writer.write(out if parts[0] == b"HEAD" else out + body)  # one write: no wait on a delayed ACK
        await asyncio.wait_for(writer.drain(), IDLE_S)
        return keep


def _loop_errors(stats: ServeStats):
    """asyncio's exception handler: what it would log with a traceback (a failed TLS handshake, a
    transport's error) is counted instead."""
    import asyncio
    import ssl

    def handler(loop, context: dict) -> None:
        exc = context.get("exception")
        reset = (ConnectionError, TimeoutError, asyncio.TimeoutError, ssl.SSLError)
        kind = "reset" if isinstance(exc, reset) else "internal"
        stats.count(kind, _what(exc) if exc else str(context.get("message")))

    return handler


def _exposes(bind: str) -> bool:
    import ipaddress

    try:
        return not ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind not in ("localhost",)


def stop_on_signals() -> threading.Event:
    """SIGINT, SIGTERM and SIGHUP end serve (or record) cleanly (exit 0) from here on: a service manager
    that stops it during start-up (loading a recording, starting NVML) must not see 143."""
    import signal

    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())
    return done


def _tls(cert: str, key: str):
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot load the TLS certificate/key: {e}") from None
    mode = os.stat(key).st_mode
    if mode & 0o077:
        print(
            f"memtop serve: warning: the TLS key {clean(key, 200)} is readable by others "
            f"(mode {stat.S_IMODE(mode):04o}): chmod 600 {clean(key, 200)}",
            file=sys.stderr,
        )
    return ctx


def _watch(node, done: threading.Event, every: float, step=None) -> None:
    """Until a signal: run step (if any) every `every` s once the node is ready, and say once, in one
    line, that the node has no GPU (its /-/ready answers 503 with the same reason)."""
    said = False
    while True:
        node.check()  # a replayed recording damaged past what replay can skip ends serve with one line
        if node.is_ready():
            if not said and (missing := node.no_gpu()):
                print(
                    f"memtop serve: no GPU: {clean(missing, 300)}; /-/ready answers 503",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            if step is not None:
                step()
        if done.wait(every):
            return


def _textfile_step(textdir: Path, reg):
    """Writes the textfile; a failed write (disk full, DIR removed) is one line per new error and
    the exporter goes on."""
    last: list[str] = []

    def step() -> None:
        try:
            write_textfile(textdir, exposition(reg))
        except OSError as e:
            msg = f"memtop serve: cannot write {textdir}/memtop.prom: {e.strerror or e}"
            if last != [msg]:
                print(clean(msg, 500), file=sys.stderr, flush=True)
                last[:] = [msg]
        else:
            last.clear()

    return step


def _listen(args) -> socket.socket:
    """The listening socket, made here so that a port in use is one line and exit 2. Its backlog
    (socketserver's default was 5) keeps hundreds of clients connecting at once out of SYN retries of
    1, 3, 7, 15 s; the kernel caps it at net.core.somaxconn."""
    import socket

    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    try:
        return socket.create_server((args.bind, args.port), family=family, backlog=BACKLOG)
    except OSError as e:
        raise UserError(f"cannot listen on {args.bind}:{args.port}: {e.strerror}") from None


def _run_http(http: Http, sock: socket.socket, ctx, stats: ServeStats, done: threading.Event) -> None:
    """Serves until done is set (by a signal); the event loop runs in this thread."""
    import asyncio

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(_loop_errors(stats))
        server = await asyncio.start_server(
            http.connection,
            sock=sock,
            backlog=BACKLOG,  # start_server listens again, with 100 unless told
            ssl=ctx,
            limit=HEAD_MAX,
            ssl_handshake_timeout=IDLE_S if ctx else None,
        )
        await asyncio.to_thread(done.wait)
        server.close()  # not wait_closed(): it would wait for idle keep-alive clients; run() cancels them

    asyncio.run(main())


def serve(args: argparse.Namespace) -> int:
    done = stop_on_signals()
    import platform

    from memtop.commands.snapshot import Node

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1..65535: {args.port}")
    token = read_token(args.token_file) if args.token_file else None
    ctx = _tls(args.tls_cert, args.tls_key) if args.tls_cert else None
    textdir = None
    if args.textfile:
        textdir = Path(args.textfile)
        if not textdir.is_dir():
            raise UserError(f"--textfile {textdir}: no such directory")
    node = Node(args)
    stats = ServeStats()
    reg = registry(node, stats, args.per_process)
    if textdir is not None:
        node.node_id = platform.node()
        if done.is_set():
            return 0
        node.start()
        try:
            _watch(node, done, TEXTFILE_EVERY_S, _textfile_step(textdir, reg))
        finally:
            node.stop()
        return 0
    sock = _listen(args)
    scheme = "https" if ctx else "http"
    port = sock.getsockname()[1]
    node.node_id = f"{platform.node()}:{port}"
    print(
        f"memtop serve: {scheme}://{args.bind}:{port}/metrics, /snapshot.json, /compact.json, /-/ready",
        file=sys.stderr,
    )
    if _exposes(args.bind):
        print(
            f"memtop serve: {args.bind} is reachable from other machines: it exposes GPU metrics, phase "
            "verdicts, process names, PIDs and the training command line (in /snapshot.json), "
            + ("behind a bearer token" if token else "to anyone (no --token-file)")
            + (" over TLS" if ctx else " in plain HTTP (no --tls-cert)"),
            file=sys.stderr,
        )
    if done.is_set():
        sock.close()
        return 0
    node.start()
    t = threading.Thread(
        target=_run_http, args=(Http(node, reg, token, stats), sock, ctx, stats, done), daemon=True
    )
    t.start()
    try:
        _watch(node, done, 1.0)
    finally:
        done.set()
        t.join(5.0)
        node.stop()
    return 0
