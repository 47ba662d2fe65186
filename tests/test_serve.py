"""`memtop serve`: the exposition (prometheus_client's parser, promtool), a real Prometheus server
reading rate() of the phase counters back, /snapshot.json, token, TLS and the textfile."""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import shutil
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from netutil import free_ports, memtop, stop, wait_ready
from prometheus_client.parser import text_string_to_metric_families

from memtop.analysis.phases import LABELS
from memtop.commands.serve import _exposes, write_textfile
from memtop.core.metrics import METRICS

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "docs" / "snapshot.schema.json").read_text())
pytestmark = pytest.mark.slow


def _get(url: str, **kw) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=kw.pop("headers", {}))
    try:
        with urllib.request.urlopen(req, timeout=30, **kw) as r:  # (a serve process on a loaded machine)
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def demo():
    (port,) = free_ports(1)
    p = memtop("serve", "--demo", "--port", str(port), stderr=subprocess.PIPE)
    try:
        wait_ready(port, proc=p)
        yield port
    finally:
        stop(p)


def _families(port: int) -> dict:
    code, body = _get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_exposition_derives_from_the_metrics_table(demo):
    fams = _families(demo)
    for m in METRICS:
        if m.prom:
            assert f"memtop_{m.prom}" in fams, m.prom
    for f in fams.values():
        for s in f.samples:
            assert "pid" not in s.labels
            if f.name.endswith("_ratio"):
                assert 0 <= s.value <= 1, s
    (clock,) = fams["memtop_gpu_sm_clock_hertz"].samples
    assert clock.value > 1e8  # MHz became Hz
    assert set(clock.labels) == {"gpu", "uuid", "hostname", "node"}
    # nodes that share a host name (every demo says "vm") stay apart: this machine's name and the port
    assert clock.labels["node"] == f"{platform.node()}:{demo}"
    (gpus,) = fams["memtop_node_gpus"].samples
    assert gpus.value == 1 and gpus.labels["node"] == clock.labels["node"]
    assert {s.labels["gpu"] for s in fams["memtop_gpu_straggler"].samples} == {"0"}
    phases = {
        s.labels["phase"] for s in fams["memtop_gpu_phase_seconds"].samples if s.name.endswith("_total")
    }
    assert set(LABELS) <= phases
    assert fams["memtop_gpu_phase_seconds"].type == "counter"
    assert fams["memtop_build_info"].samples[0].labels["mode"] == "demo"
    assert "name" in fams["memtop_gpu_info"].samples[0].labels


def test_phase_counters_only_grow(demo):
    """Each phase's counter never goes down between scrapes, and they do go up while the demo plays
    (the replay's pace is test_tui's, on a virtual clock)."""

    def counters() -> dict[tuple, float]:
        f = _families(demo)["memtop_gpu_phase_seconds"]
        return {tuple(sorted(s.labels.items())): s.value for s in f.samples if s.name.endswith("_total")}

    first = last = counters()
    end = time.monotonic() + 60  # (a bound for a loaded machine, not a pace)
    while sum(last.values()) <= sum(first.values()):
        assert time.monotonic() < end, f"the phase counters never rose: {last}"
        time.sleep(0.2)
        now = counters()
        assert all(now.get(k, 0.0) >= v for k, v in last.items()), (last, now)
        last = now


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian: prometheus)")
def test_promtool_check_metrics(demo):
    _, body = _get(f"http://127.0.0.1:{demo}/metrics")
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_snapshot_json_and_ready(demo):
    code, body = _get(f"http://127.0.0.1:{demo}/snapshot.json")
    assert code == 200
    jsonschema.validate(json.loads(body), SCHEMA)
    assert _get(f"http://127.0.0.1:{demo}/-/ready")[0] == 200
    assert _get(f"http://127.0.0.1:{demo}/nothing")[0] == 404


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus not installed (Debian: prometheus)"
)
def test_real_prometheus_reads_phase_shares(demo, tmp_path):
    (port,) = free_ports(1)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{ROOT / 'docs' / 'prometheus-rules.yml'}']\n"
        "scrape_configs:\n"
        f"  - job_name: memtop\n    static_configs: [{{targets: ['127.0.0.1:{demo}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def query(q: str) -> list:
            try:
                _, body = _get(
                    f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
                )
            except OSError:  # not listening yet
                return []
            return json.loads(body)["data"]["result"] if body.startswith(b"{") else []

        # wait until the 6 s window is full of scrapes (a partial window's rate is extrapolated)
        full = 'count_over_time(memtop_gpu_phase_seconds_total{phase="idle"}[6s]) >= 6'
        end = time.monotonic() + 40
        while not query(full):
            assert time.monotonic() < end, "Prometheus never held six scrapes"
            time.sleep(1)
        result = query("sum by (gpu) (rate(memtop_gpu_phase_seconds_total[6s]))")
        assert result, "Prometheus never returned the rate"
        # every second of a GPU's time is in exactly one phase: the shares of all phases sum to one
        assert 0.6 <= float(result[0]["value"][1]) <= 1.4, result
        assert query("memtop_gpu_info * on(gpu, uuid, node) group_left memtop_gpu_sm_clock_hertz")
        # the shipped recording rules load and evaluate: one GPU's shares, keyed on instance, sum to one
        (shares,) = query("sum by (instance, gpu) (memtop:gpu_phase_share:rate5m)")
        assert (
            abs(float(shares["value"][1]) - 1) < 1e-6 and shares["metric"]["instance"] == f"127.0.0.1:{demo}"
        )
        # `memtop cluster --prom` reads the same server: one node, its GPU's shares and band
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "memtop",
                "cluster",
                "--prom",
                f"http://127.0.0.1:{port}",
                "--once",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        out = json.loads(r.stdout)
        assert r.returncode == 0 and len(out["nodes"]) == 1, r.stderr
        snap = out["nodes"][0]["snapshot"]
        jsonschema.validate(snap, SCHEMA)
        g = snap["gpus"][0]
        assert g["shares"] and set(g["shares"]) <= {*LABELS, "warmup"}
        assert g["band"].strip() and g["phase"] in LABELS
        assert g["name"].startswith("NVIDIA")
    finally:
        stop(prom)


def test_token_file_must_be_0600_and_is_required(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    tok.chmod(0o644)
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "serve", "--demo", "--token-file", str(tok)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "0600" in r.stderr
    tok.chmod(0o600)
    (port,) = free_ports(1)
    p = memtop("serve", "--demo", "--port", str(port), "--token-file", str(tok), stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc=p)  # readiness needs no token
        url = f"http://127.0.0.1:{port}/metrics"
        assert _get(url)[0] == 401
        assert _get(url, headers={"Authorization": "Bearer wrong"})[0] == 401
        assert _get(url, headers={"Authorization": "Bearer s3cret-token"})[0] == 200
    finally:
        stop(p)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    key.chmod(0o640)  # a key others can read is served, with a warning
    (port,) = free_ports(1)
    p = memtop(
        "serve", "--demo", "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        end = time.monotonic() + 30
        while True:
            try:
                code, body = _get(f"https://127.0.0.1:{port}/snapshot.json", context=ctx)
                break
            except OSError:
                assert time.monotonic() < end and p.poll() is None
                time.sleep(0.3)
        assert code in (200, 503) or json.loads(body)
        with pytest.raises(OSError):  # plain HTTP to a TLS port gets nothing useful
            _get(f"http://127.0.0.1:{port}/-/ready")
    finally:
        stop(p)
    err = p.stderr.read()
    assert p.returncode == 0 and "Traceback" not in err, err
    (warning,) = [line for line in err.splitlines() if "TLS key" in line]
    assert "0640" in warning and f"chmod 600 {key}" in warning


def test_textfile_is_atomic_and_readable_by_node_exporter(tmp_path):
    p = memtop("serve", "--demo", "--textfile", str(tmp_path), stderr=subprocess.PIPE, text=True)
    # the temporary name serve used to use, taken before its first write: it stopped serve (exit 70)
    planted = tmp_path / f".memtop.prom.{p.pid}.tmp"
    planted.symlink_to(tmp_path / "elsewhere")
    try:
        out = tmp_path / "memtop.prom"
        end = time.monotonic() + 30
        while not out.exists():
            assert time.monotonic() < end and p.poll() is None
            time.sleep(0.2)
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        assert 'node="' + platform.node() + '"' in out.read_text()
        names = {f.name for f in text_string_to_metric_families(out.read_text())}
        assert "memtop_gpu_phase_seconds" in names
        assert sorted(os.listdir(tmp_path)) == sorted([planted.name, "memtop.prom"])  # no temporary left
        assert not (tmp_path / "elsewhere").exists()
    finally:
        stop(p)
    assert p.returncode == 0 and p.stderr.read().count("\n") == 0


def test_only_loopback_is_quiet():
    assert not _exposes("127.0.0.1") and not _exposes("::1") and not _exposes("localhost")
    assert _exposes("0.0.0.0") and _exposes("::") and _exposes("10.1.2.3")


def test_docs_name_every_exported_metric(demo):
    """docs/CLUSTER.md names every metric the exporter serves; the Grafana dashboard and the
    Prometheus rules use only those and the rules' own records, and key nodes on instance (exporters
    may share a host name), never hostname."""
    import re

    fams = _families(demo)
    served = {s.name for f in fams.values() for s in f.samples}
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    for name in served:
        assert name in doc or name.removesuffix("_total") + "_total" in doc, name
    rules = (ROOT / "docs" / "prometheus-rules.yml").read_text()
    recorded = set(re.findall(r"- record: (\S+)", rules))
    assert recorded and all(r.startswith("memtop:") for r in recorded)
    names = re.compile(r"(?<![\w:])memtop[_:][\w:]*")
    assert set(names.findall(rules)) <= served | recorded, set(names.findall(rules)) - served - recorded
    dash = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    used = {n for e in exprs for n in names.findall(e)}
    # a family the exporter declares with no sample yet (the demo has no energy counter) counts too
    declared = {f.name + ("_total" if f.type == "counter" else "") for f in fams.values()}
    assert used <= served | declared | recorded, used - served - declared - recorded
    assert {"memtop_gpu_power_watts", "memtop_gpu_memory_used_bytes", "memtop_gpu_straggler"} <= used
    # energy by phase: every panel over the energy counter keeps the phase apart, in watts or kWh
    energy = [
        p for p in dash["panels"] if any("memtop_gpu_energy_joules_total" in t["expr"] for t in p["targets"])
    ]
    assert {p["fieldConfig"]["defaults"]["unit"] for p in energy} == {"watt", "kwatth"}
    assert all(re.search(r"sum by \([^)]*\bphase\b", t["expr"]) for p in energy for t in p["targets"])
    assert recorded & used  # the job panel reads the recording rules
    for e in exprs:
        assert not re.search(r"\bby \([^)]*hostname|on \([^)]*hostname", e), e


def test_textfile_ignores_what_others_planted_in_dir(tmp_path):
    """The temporary file's name is random (mkstemp): a symlink or file at the name the exporter used
    to use (`.memtop.prom.<pid>.tmp`, O_EXCL) no longer stops it, and no link is followed."""
    target = tmp_path / "target"
    target.write_text("untouched")
    (tmp_path / f".memtop.prom.{os.getpid()}.tmp").symlink_to(target)
    write_textfile(tmp_path, b"memtop_build_info 1\n")
    write_textfile(tmp_path, b"memtop_build_info 2\n")
    out = tmp_path / "memtop.prom"
    assert out.read_bytes() == b"memtop_build_info 2\n" and not out.is_symlink()
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 and target.read_text() == "untouched"
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["target", "memtop.prom", f".memtop.prom.{os.getpid()}.tmp"]
    )


def test_listen_backlog_holds_hundreds_of_clients(demo):
    """The kernel's view of the listening socket (ss: Send-Q is the backlog): socketserver's default
    of 5 sent the 300-client bench into SYN retries of 1, 3, 7, 15 s."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not installed")
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{demo}"], capture_output=True, text=True, timeout=10
    ).stdout
    backlog = int(out.split()[2])
    assert backlog >= min(1024, int(Path("/proc/sys/net/core/somaxconn").read_text())), out


def _reset(port: int, whole: bool) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends an RST
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + (b"\r\n" if whole else b""))
    s.close()


def test_resets_are_counted_not_traced():
    """Clients that reset (mid-request, or before reading the answer) are a counter and at most one
    line per thousand on stderr, never a traceback: any client could flood the journal."""
    (port,) = free_ports(1)
    p = memtop("serve", "--demo", "--port", str(port), stderr=subprocess.PIPE, text=True)

    def resets() -> float:
        fams = _families(port)["memtop_serve_connection_errors"].samples
        return next(s.value for s in fams if s.labels["kind"] == "reset")

    try:
        wait_ready(port, proc=p)
        for _ in range(10):  # clients that close cleanly, silent or after an answer, are no error
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            assert _raw(port, b"GET /-/ready HTTP/1.1\r\nConnection: close\r\n\r\n").endswith(b"ready\n")
        assert resets() == 0
        for i in range(200):
            _reset(port, whole=i % 2 == 1)
        end = time.monotonic() + 30
        while True:
            if resets() >= 100:  # every mid-request reset is one; a whole request may be answered first
                break
            assert time.monotonic() < end, resets()
            time.sleep(0.5)
    finally:
        stop(p)
    err = p.stderr.read()
    assert p.returncode == 0 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith("memtop serve: http://")]
    assert len(lines) <= 1 and "connection(s) ended by the client" in lines[0], lines


def _catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_sigterm_during_start_up_exits_0():
    """A service manager may stop serve while it loads its recording or starts NVML: from the moment
    Python can catch SIGTERM (serve's first statement) it exits 0, not 143."""
    (port,) = free_ports(1)
    p = memtop("serve", "--demo", "--port", str(port), stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 30
    while not _catches_sigterm(p.pid):
        assert p.poll() is None and time.monotonic() < end
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    assert "Traceback" not in p.stderr.read()


NO_DRIVER = ctypes.util.find_library("nvidia-ml") is None and not Path("/dev/nvidiactl").exists()


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver: the no-GPU path needs none")
def test_no_gpu_is_not_ready():
    """Live on a machine without an NVIDIA driver: /-/ready says 503 and why, one line on stderr,
    and /metrics says the node has 0 GPUs (what an alert keys on)."""
    (port,) = free_ports(1)
    p = memtop("serve", "--port", str(port), "--no-stacks", stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while True:
            try:
                code, body = _get(f"http://127.0.0.1:{port}/-/ready")
            except OSError:
                code, body = 0, b""
            if body.startswith(b"no GPU"):
                break
            assert p.poll() is None and time.monotonic() < end, (code, body)
            time.sleep(0.3)
        assert code == 503 and b"NVIDIA driver not found" in body
        (gpus,) = _families(port)["memtop_node_gpus"].samples
        assert gpus.value == 0 and gpus.labels["node"] == f"{platform.node()}:{port}"
        time.sleep(1.5)  # the watcher's next round must not say it again
    finally:
        stop(p)
    err = p.stderr.read()
    assert p.returncode == 0 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "no GPU" in x]
    assert "NVIDIA driver not found" in line and "503" in line


def _raw(port: int, data: bytes) -> bytes:
    """Sends data, returns all the server sends until it closes (or 5 s of silence)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        got = b""
        try:
            while chunk := s.recv(1 << 16):
                got += chunk
        except TimeoutError:
            pass
        return got


def test_http_keep_alive_pipelining_and_refusals(demo):
    """serve's own HTTP/1.1: pipelined keep-alive requests each answered in order; HEAD without a
    body; other methods refused (405); bodies and malformed lines refused and the connection closed; a
    head larger than 16 KiB dropped. Each answer says its length."""
    get = b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    got = _raw(
        demo,
        get
        + b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        + get.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"),
    )
    answers = got.split(b"HTTP/1.1 ")[1:]
    assert len(answers) == 3 and all(a.startswith(b"200 OK") for a in answers), got
    assert answers[0].endswith(b"\r\n\r\nready\n") and answers[1].endswith(b"\r\n\r\n")  # HEAD: no body
    length = int(answers[1].split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert length > 1000 and b"Connection: close" in answers[2]
    assert _raw(demo, b"GET / HTTP/1.0\r\n\r\n").count(b"HTTP/1.1 200") == 1  # 1.0: closed after one
    got = _raw(demo, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + get)  # whole, so the next one is read
    assert got.startswith(b"HTTP/1.1 405") and got.endswith(b"ready\n") and b"Allow: GET, HEAD" in got
    for bad, code in [
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", b"400"),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"GARBAGE\r\n\r\n", b"400"),
    ]:
        got = _raw(demo, bad + get)
        assert got.startswith(b"HTTP/1.1 " + code) and got.count(b"HTTP/1.1") == 1, (bad, got)
    assert _raw(demo, b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n") == b""
    assert _get(f"http://127.0.0.1:{demo}/-/ready")[0] == 200  # and it goes on serving


def test_idle_and_stalled_clients_are_no_fault_on_python_310(monkeypatch):
    """Python 3.10's asyncio.wait_for raises asyncio.TimeoutError, which is not the builtin
    TimeoutError there (one class from 3.11): an idle keep-alive connection closed at IDLE_S was
    counted "internal" and logged as memtop's fault. 3.10's classes are played here on any Python;
    the server and its clients are real sockets."""
    import asyncio

    from memtop.commands import serve

    class Py310Timeout(Exception):  # asyncio.exceptions.TimeoutError on 3.10
        pass

    wait_for = asyncio.wait_for

    async def wait_for_310(aw, timeout):
        try:
            return await wait_for(aw, timeout)
        except TimeoutError:
            raise Py310Timeout from None

    monkeypatch.setattr(asyncio, "TimeoutError", Py310Timeout)
    monkeypatch.setattr(asyncio, "wait_for", wait_for_310)
    monkeypatch.setattr(serve, "IDLE_S", 0.2)
    stats = serve.ServeStats()
    http = serve.Http(None, None, None, stats)

    async def main() -> None:
        server = await asyncio.start_server(http.connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for sent in (b"", b"GET /metrics HTTP/1.1\r\n"):  # idle, then a head that never ends
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(sent)
            assert await wait_for(reader.read(), 60) == b""  # closed by the server (60: a hang fails)
            writer.close()
        server.close()

    asyncio.run(main())
    assert stats.errors == {"reset": 1, "internal": 0}  # the stalled head is the client's, idle is none


def test_a_replay_damaged_past_what_it_can_skip_ends_serve_with_one_line(tmp_path):
    """A real recording with its pages after the first third scrambled: the replay thread meets the
    damage once the prefill is done; serve ends on it with one line and exit 2, no thread traceback."""
    bad = tmp_path / "damaged.memtop"
    data = bytearray((ROOT / "tests" / "data" / "jobs" / "heldout_shared_s302.memtop").read_bytes())
    for off in range(len(data) // 3, len(data) // 3 + 4096 * 4, 97):
        data[off] ^= 0x5A
    bad.write_bytes(data)
    (port,) = free_ports(1)
    proc = memtop("serve", "--replay", str(bad), "--port", str(port), stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 2, err
    assert "Traceback" not in err and "Exception in thread" not in err
    assert err.strip().splitlines()[-1].startswith(f"memtop: {bad} is damaged or truncated (")
