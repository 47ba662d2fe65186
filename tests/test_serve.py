"""`memtop serve`: the exposition (prometheus_client's parser, promtool), a real Prometheus server
reading rate() of the phase counters back, /snapshot.json, token, TLS and the textfile."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import stat
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

from memtop.commands.serve import _exposes
from memtop.metrics import METRICS
from memtop.phases import LABELS

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "docs" / "snapshot.schema.json").read_text())
pytestmark = pytest.mark.slow


def _get(url: str, **kw) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=kw.pop("headers", {}))
    try:
        with urllib.request.urlopen(req, timeout=5, **kw) as r:
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
    assert set(clock.labels) == {"gpu", "uuid", "hostname"}
    phases = {
        s.labels["phase"] for s in fams["memtop_gpu_phase_seconds"].samples if s.name.endswith("_total")
    }
    assert set(LABELS) <= phases
    assert fams["memtop_gpu_phase_seconds"].type == "counter"
    assert fams["memtop_build_info"].samples[0].labels["mode"] == "demo"
    assert "name" in fams["memtop_gpu_info"].samples[0].labels


def test_phase_counters_only_grow(demo):
    def total() -> float:
        f = _families(demo)["memtop_gpu_phase_seconds"]
        return sum(s.value for s in f.samples if s.name.endswith("_total"))

    a = total()
    time.sleep(1.5)
    b = total()
    assert 0.5 <= b - a <= 3.0  # replayed at speed 1: about a second of bins per second


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
        assert query("memtop_gpu_info * on(gpu, uuid, hostname) group_left memtop_gpu_sm_clock_hertz")
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
    (port,) = free_ports(1)
    p = memtop(
        "serve", "--demo", "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key),
        stderr=subprocess.DEVNULL,
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


def test_textfile_is_atomic_and_readable_by_node_exporter(tmp_path):
    p = memtop("serve", "--demo", "--textfile", str(tmp_path), stderr=subprocess.DEVNULL)
    try:
        out = tmp_path / "memtop.prom"
        end = time.monotonic() + 30
        while not out.exists():
            assert time.monotonic() < end and p.poll() is None
            time.sleep(0.2)
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        names = {f.name for f in text_string_to_metric_families(out.read_text())}
        assert "memtop_gpu_phase_seconds" in names
        assert not [f for f in os.listdir(tmp_path) if f != "memtop.prom"]  # no temporary left behind
    finally:
        stop(p)


def test_only_loopback_is_quiet():
    assert not _exposes("127.0.0.1") and not _exposes("::1") and not _exposes("localhost")
    assert _exposes("0.0.0.0") and _exposes("::") and _exposes("10.1.2.3")


def test_docs_name_every_exported_metric(demo):
    """docs/CLUSTER.md and the Grafana dashboard name only metrics the exporter serves, and the docs
    name all of them."""
    import re

    fams = _families(demo)
    served = {s.name for f in fams.values() for s in f.samples}
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    for name in served:
        assert name in doc or name.removesuffix("_total") + "_total" in doc, name
    dash = (ROOT / "docs" / "grafana-dashboard.json").read_text()
    used = set(re.findall(r"\bmemtop_[a-z_]+", dash))
    assert used and used <= served, used - served
