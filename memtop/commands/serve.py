"""`memtop serve`: this node's pipeline as Prometheus metrics (/metrics), as the snapshot schema
(/snapshot.json), or as a textfile for node_exporter. A custom collector reads the newest View on
each scrape: serving adds no sampling of its own. Imports stay light here: `memtop --help` reads
DEFAULT_PORT.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from memtop.commands.authtoken import read_token
from memtop.errors import UserError

# 9100-9999 is the exporter range; Prometheus (9090), node_exporter (9100), dcgm-exporter (9400) and
# Princeton jobstats' cgroup_exporter (9306) / nvidia_gpu_prometheus_exporter (9445) sit elsewhere.
DEFAULT_PORT = 9866
TEXTFILE_EVERY_S = 5.0
PREFIX = "memtop_"


class NodeCollector:
    """prometheus_client custom collector: gauges from the newest frame, counters of phase and
    clock-event seconds, an info series per GPU with its job identity, and build info. Labels are
    gpu, uuid and hostname (the info series adds the job's identity); never a PID."""

    def __init__(self, node) -> None:
        self.node = node

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
        if frame is None:
            return
        jobs, _ = node.gpu_jobs(frame)
        base = ["gpu", "uuid", "hostname"]
        gpus = [(g, [str(g.index), g.uuid, host]) for g in frame.gpus]
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
        from memtop.model import CLOCK_EVENT_NAMES

        for g, labels in gpus:
            c = clocks.get(g.index, {})
            for reason in CLOCK_EVENT_NAMES.values():
                counter.add_metric([*labels, reason.replace(" ", "_")], float(c.get(reason, 0.0)))
        yield counter
        info = InfoMetricFamily(PREFIX + "gpu", "GPU model and the identity of the job using it", labels=base)
        for g, labels in gpus:
            job = jobs.get(g.index, {})
            info.add_metric(labels, {"name": g.name, **{k: job.get(k, "") for k in KEYS}})
        yield info


def registry(node):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node))
    return reg


def exposition(reg) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(reg)


def write_textfile(directory: Path, data: bytes) -> None:
    """Atomically replace DIR/memtop.prom. 0644, unlike memtop's other files: node_exporter runs as
    its own user and must read it; it holds what /metrics would serve (no PIDs, no command lines)."""
    tmp = directory / f".memtop.prom.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, directory / "memtop.prom")


def _handler(node, reg, token: str | None):
    import hmac
    import json
    from http.server import BaseHTTPRequestHandler

    from memtop.commands.snapshot import snapshot

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a cluster view polls every node every few seconds
        server_version = "memtop"
        timeout = 30
        # headers and body leave in one write (flushed after each request): written apart, the body
        # waited for the client's delayed ACK, 40 ms per keep-alive request
        wbufsize = 1 << 16

        def log_message(self, *a) -> None:  # no per-request line on stderr
            pass

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8", extra=()) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/-/ready":
                ok = node.is_ready()
                return self._send(200 if ok else 503, b"ready\n" if ok else b"starting\n")
            if token is not None:
                got = self.headers.get("Authorization", "")
                if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                    return self._send(401, b"unauthorized\n", extra=[("WWW-Authenticate", "Bearer")])
            if path == "/metrics":
                from prometheus_client import CONTENT_TYPE_LATEST

                return self._send(200, exposition(reg), CONTENT_TYPE_LATEST)
            if path == "/snapshot.json":
                body = json.dumps(snapshot(node), separators=(",", ":")).encode()
                return self._send(200, body, "application/json")
            if path == "/":
                return self._send(200, b"memtop serve: /metrics /snapshot.json /-/ready\n")
            return self._send(404, b"not found\n")

        do_HEAD = do_GET

    return Handler


def _exposes(bind: str) -> bool:
    import ipaddress

    try:
        return not ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind not in ("localhost",)


def serve(args: argparse.Namespace) -> int:
    from memtop.commands.snapshot import Node

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1..65535: {args.port}")
    token = read_token(args.token_file) if args.token_file else None
    ctx = None
    if args.tls_cert:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise UserError(f"cannot load the TLS certificate/key: {e}") from None
    textdir = None
    if args.textfile:
        textdir = Path(args.textfile)
        if not textdir.is_dir():
            raise UserError(f"--textfile {textdir}: no such directory")
    node = Node(args)
    reg = registry(node)
    done = threading.Event()
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())
    if textdir is not None:
        node.start()
        try:
            while not done.is_set():
                if node.is_ready():
                    write_textfile(textdir, exposition(reg))
                done.wait(TEXTFILE_EVERY_S)
        finally:
            node.stop()
        return 0
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = __import__("socket").AF_INET6 if ":" in args.bind else __import__("socket").AF_INET

    try:
        httpd = Server((args.bind, args.port), _handler(node, reg, token))
    except OSError as e:
        raise UserError(f"cannot listen on {args.bind}:{args.port}: {e.strerror}") from None
    if ctx is not None:  # the handshake runs in the request's thread, not in accept()
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    scheme = "https" if ctx else "http"
    port = httpd.server_address[1]
    print(f"memtop serve: {scheme}://{args.bind}:{port}/metrics, /snapshot.json, /-/ready", file=sys.stderr)
    if _exposes(args.bind):
        print(
            f"memtop serve: {args.bind} is reachable from other machines: it exposes GPU metrics, phase "
            "verdicts, process names, PIDs and the training command line (in /snapshot.json), "
            + ("behind a bearer token" if token else "to anyone (no --token-file)")
            + (" over TLS" if ctx else " in plain HTTP (no --tls-cert)"),
            file=sys.stderr,
        )
    node.start()
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
    t.start()
    try:
        done.wait()
    finally:
        httpd.shutdown()
        httpd.server_close()
        node.stop()
    return 0
