"""The network boundary of `memtop cluster` against hostile nodes and a hostile Prometheus on loopback
(real sockets, the real CLI where output is the point): no escape reaches any output, no token crosses
an origin, every read bounded in bytes, objects and time, one slow node never holds back another,
bad files refused with one line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hostile_net import (
    Server,
    bomb_60mb,
    jsonable,
    ports_of,
    prom_variants,
    redirect,
    send,
    snapshot_variants,
    trickle,
)

from memtop.analysis.phases import CHARS
from memtop.core.sanitize import is_clean
from memtop.fleet import wire
from memtop.fleet.sources import HttpPoller, PromSource
from memtop.fleet.view import NodeState, merged, print_text, rows

CONTROL = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))] + ["\u202e", "\u2066"]


def _clean_output(text: str) -> None:
    bad = sorted({repr(c) for c in text if c in CONTROL and c != "\n"})
    assert not bad, f"control characters in output: {bad}"


@pytest.fixture(scope="module")
def real() -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "snapshot", "--json", "--demo"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return json.loads(r.stdout)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def elsewhere():
    """127.0.0.2: another origin; whatever reaches it is recorded."""
    s = Server("127.0.0.2")
    yield s
    s.close()


# `python -m memtop` with its peak RSS (VmHWM, of this process image only: ru_maxrss from wait4 also
# counts the forked test process before exec) written to the file named first
_MEASURED = (
    "import sys\n"
    "from memtop.cli import main\n"
    "try:\n    rc = main(sys.argv[2:])\n"
    "finally:\n"
    "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0].split()[1]\n"
    "    open(sys.argv[1], 'w').write(hwm)\n"
    "sys.exit(rc)\n"
)


def _cli(*argv: str, timeout: float = 60) -> tuple[int, str, str, int]:
    """The real CLI: (exit code, stdout, stderr, its peak RSS in bytes)."""
    with tempfile.TemporaryDirectory() as d:
        hwm = Path(d) / "hwm"
        r = subprocess.run(
            [sys.executable, "-c", _MEASURED, str(hwm), "cluster", *argv],
            capture_output=True,
            timeout=timeout,  # a hang fails the test, never blocks it
            env={**os.environ, "NO_COLOR": "1"},
        )
        rss = int(hwm.read_text()) * 1024
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace"), rss


def test_the_takeover_through_a_gpu_index_is_refused_at_the_boundary(real, server):
    """The issue's finding: a node's GPU index carrying OSC 52 / OSC 0 / CSI was printed whole by
    `--once` text. Now a GPU index is a small int or the node is refused, with the reason."""
    v = snapshot_variants(real)
    ports = [server.add(send(jsonable(v[k]))) for k in ("index-osc52", "index-300-digits", "index-dict")]
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    rc, out, err, _ = _cli("--hosts", hosts, "--once")
    _clean_output(out + err)
    assert rc == 1 and out.count("index is not 0-1023") == 3, out
    rc, out, err, _ = _cli("--hosts", hosts, "--once", "--json")
    _clean_output(out + err)
    doc = json.loads(out)
    assert [n["snapshot"] for n in doc["nodes"]] == [None] * 3
    assert all("gpus[0].index is not 0-1023" in n["error"] for n in doc["nodes"])


def _outputs(nodes: list[NodeState], interval: float) -> str:
    """Every output the fleet has: --once text, --once --json, the TUI's rows and node screens."""
    from memtop.tui.cluster import node_text, row_cells

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_text(nodes, interval)
    parts = [buf.getvalue(), json.dumps(merged(nodes, interval), ensure_ascii=False)]
    for r in rows(nodes, interval):
        parts += [text for _, text in row_cells(r, interval, False)]
    for n in nodes:
        parts.append(node_text(n.target, n.snapshot, n.error).plain)
    return "\n".join(parts)


def _strings(v: object) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for k, x in v.items() for s in (*_strings(k), *_strings(x))]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return []


def test_every_hostile_snapshot_is_data_or_refused_with_a_reason(real, server):
    answers = snapshot_variants(real)
    ports = dict(ports_of(server, answers))
    nodes = [NodeState(f"127.0.0.1:{p}") for p in ports.values()]
    healthy = NodeState(f"127.0.0.1:{server.add(send(jsonable(real)))}")
    poller = HttpPoller([*nodes, healthy], 0, timeout=10)
    try:
        poller.poll_all()
    finally:
        poller.close()
    by = dict(zip(ports, nodes))
    _clean_output(_outputs([*nodes, healthy], 2.0))
    for n in [*nodes, healthy]:
        assert n.polls == 1
        if n.snapshot is not None:  # kept: every string clean, every type the schema's
            assert all(is_clean(s) for s in _strings(n.snapshot))
            for g in n.snapshot["gpus"]:
                assert isinstance(g["index"], int) and 0 <= g["index"] <= wire.MAX_INDEX
                assert all(isinstance(x, float) and x < 1e300 for x in g["gauges"].values())
                assert not g["shares"] or abs(sum(g["shares"].values()) - 1) < 1e-3
    assert healthy.snapshot is not None and healthy.error is None
    kept = {k for k, n in by.items() if n.snapshot is not None}
    assert kept == {"escapes", "escape-keys", "types", "huge"}
    esc = by["escapes"].snapshot
    assert esc["hostname"].startswith("\\x1b]0;PWNED-TITLE") and esc["gpus"][0]["name"].startswith("\\x1b")
    assert esc["gpus"][0]["phase"] == "other" and set(esc["gpus"][0]["band"]) <= {*CHARS.values(), " "}
    assert by["escape-keys"].snapshot["gpus"][0]["gauges"] == {}
    assert by["escape-keys"].snapshot["gpus"][0]["job"] == {"pod": esc["hostname"][:62] + "…"}
    assert by["types"].snapshot["hostname"] == "" and by["types"].snapshot["processes"] == []
    assert by["huge"].snapshot["time"] == 0.0
    reasons = {k: n.error for k, n in by.items() if n.snapshot is None}
    assert reasons == {
        "index-osc52": "bad snapshot: gpus[0].index is not 0-1023",
        "index-300-digits": "bad snapshot: gpus[0].index is not 0-1023",
        "index-dict": "bad snapshot: gpus[0].index is not 0-1023",
        "index-float": "bad snapshot: gpus[0].index is not 0-1023",
        "many-gpus": "bad snapshot: over 64 GPUs",
        "deep": "bad response: over 20000 JSON objects",
        "deep-dict": "bad response: over 20000 JSON objects",
        "deep-under-cap": "bad response: not JSON",
        "object-bomb": "bad response: over 20000 JSON objects",
        "not-json": "bad response: not JSON",
        "long-digits": "bad response: not JSON",
    }


def test_bodies_are_capped_with_or_without_a_length(server):
    big = b" " * (wire.MAX_SNAPSHOT + 10)
    with_len, no_len = server.add(send(big)), server.add(send(big, length=False))
    nodes = [NodeState(f"127.0.0.1:{p}") for p in (with_len, no_len)]
    p = HttpPoller(nodes, 0, timeout=10)
    p.poll_all()
    p.close()
    assert [n.error for n in nodes] == ["bad response: over 1 MiB"] * 2


def test_a_trickling_node_never_holds_back_another(real, server):
    """A node still in flight is skipped, never waited for: the healthy node is polled on every
    tick while the trickling ones (1 byte a second; every 2 s, headers included) are still in their
    first request. Their deadline is an hour here, so nothing depends on how fast this machine is."""
    slow = NodeState(f"127.0.0.1:{server.add(trickle(jsonable(real)))}")
    slow_head = NodeState(f"127.0.0.1:{server.add(trickle(jsonable(real), every=2.0))}")
    healthy = NodeState(f"127.0.0.1:{server.add(send(jsonable(real)))}")
    poller = HttpPoller([slow, slow_head, healthy], 0, timeout=3600)
    try:
        for tick in range(1, 4):  # three ticks, each after the healthy node answered the last one
            poller.poll_all(wait=False)
            while healthy.polls < tick:  # the test's timeout catches a healthy node held back
                time.sleep(0.02)
            assert slow.polls == 0 and slow_head.polls == 0  # still in flight, never waited for
    finally:
        poller.close()
    assert healthy.error is None and healthy.snapshot is not None


def test_a_trickling_request_ends_at_its_deadline(real, server):
    """1 byte a second (every 2 s), headers included: the request ends at its deadline, whatever
    the per-recv timeout (a recv that times out does so at the deadline: its timeout is what was
    left). The trickle lasts hours: only the deadline can end it."""
    slow = NodeState(f"127.0.0.1:{server.add(trickle(jsonable(real)))}")
    slow_head = NodeState(f"127.0.0.1:{server.add(trickle(jsonable(real), every=2.0))}")
    poller = HttpPoller([slow, slow_head], 0, timeout=1)
    try:
        poller.poll_all()
    finally:
        poller.close()
    assert slow.error == slow_head.error == "timeout (deadline)"
    assert slow.snapshot is None and slow_head.snapshot is None


def test_no_token_crosses_an_origin(real, server, elsewhere, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    tok.chmod(0o600)
    catch = elsewhere.add(send(b"{}"))
    away = f"http://127.0.0.2:{catch}/api/v1/query"
    prom = server.add(redirect(away))
    rc, out, err, _ = _cli("--prom", f"http://127.0.0.1:{prom}", "--token-file", str(tok), "--once", "--json")
    assert rc == 2 and err.count("\n") == 1 and "redirect to another origin refused" in err, err
    # a node's /snapshot.json redirected elsewhere (another host; the same host on another port)
    node = server.add(redirect(f"http://127.0.0.2:{catch}/snapshot.json"))
    other_port = server.add(redirect(f"http://127.0.0.1:{catch}/snapshot.json"))
    rc, out, err, _ = _cli(
        "--hosts", f"127.0.0.1:{node},127.0.0.1:{other_port}", "--token-file", str(tok), "--once", "--json"
    )
    assert rc == 1 and all("another origin" in n["error"] for n in json.loads(out)["nodes"])
    assert elsewhere.seen == []
    # the same origin: followed, with the token (a Prometheus behind a path, a node's proxy)
    target = server.add(send(jsonable(real)))
    hop = server.add(redirect("/moved/snapshot.json"))
    hop_server_seen = len(server.seen)
    poller = HttpPoller([NodeState(f"127.0.0.1:{hop}")], 0, token="s3cret-token")
    poller.poll_all()
    poller.close()
    assert poller.nodes[0].error == "more than 3 redirects"  # it redirects every path, forever
    followed = server.seen[hop_server_seen:]
    assert [line for _, line, _ in followed] == ["GET /snapshot.json HTTP/1.1"] + [
        "GET /moved/snapshot.json HTTP/1.1"
    ] * 3
    assert all(h.get("authorization") == "Bearer s3cret-token" for _, _, h in followed)
    assert target  # (a plain node on the same server answers as before)


def test_non_ascii_paths_are_percent_encoded(real, server):
    """A --prom URL with a non-ASCII path, and a same-origin redirect to one (its Location in raw
    UTF-8), reach the server percent-encoded: sent as they are, they are no request line (http.client,
    memtop's client before, raised on them: a traceback and exit 70 with --once; a dead poll thread)."""
    empty = b'{"status":"success","data":{"resultType":"vector","result":[]}}'

    def behind(body: bytes):
        """Redirects every request into /ä/..., and answers there."""
        here = send(body)
        return lambda sock, p: (here if p.startswith("/%C3%A4") else redirect("/ä" + p))(sock, p)

    port = server.add(send(empty))
    rc, out, err, _ = _cli("--prom", f"http://127.0.0.1:{port}/prométhée", "--once", "--json")
    assert rc == 0 and err == "" and json.loads(out)["nodes"] == [], err
    prom = server.add(behind(empty))
    rc, out, err, _ = _cli("--prom", f"http://127.0.0.1:{prom}", "--once", "--json")
    assert rc == 0 and err == "", err
    node = NodeState(f"127.0.0.1:{server.add(behind(jsonable(real)))}")
    poller = HttpPoller([node], 0, timeout=30)
    poller.poll_all()
    poller.close()
    assert node.error is None and node.snapshot is not None
    lines = [line for _, line, _ in server.seen]
    assert any(ln.startswith("GET /prom%C3%A9th%C3%A9e/api/v1/query?") for ln in lines), lines
    assert any(ln.startswith("GET /%C3%A4/api/v1/query?") for ln in lines), lines
    assert "GET /%C3%A4/snapshot.json HTTP/1.1" in lines
    # a host name the resolver cannot encode: the reason, as a node's would be said, and exit 1
    rc, out, err, _ = _cli("--prom", "http://a..b:9/", "--once")
    assert rc == 1 and err.count("\n") == 1 and ": bad address: encoding with 'idna' codec" in err, err


def test_the_60mb_prometheus_bomb_is_refused_in_bounded_memory(server):
    bomb = bomb_60mb()
    with_len = server.add(send(bomb))
    no_len = server.add(send(bomb[: 45 << 20] + b"{}]}}", length=False))
    for port, why in ((with_len, "over 48 MiB"), (no_len, "over 2000000 JSON objects")):
        rc, out, err, rss = _cli("--prom", f"http://127.0.0.1:{port}", "--once", "--json")
        assert rc == 2 and err.count("\n") == 1 and why in err, err
        assert "Traceback" not in err
        assert rss < 200 << 20, f"peak RSS {rss >> 20} MiB"


def test_hostile_prometheus_answers(server):
    answers = prom_variants()
    got = {}
    for name, body in answers.items():
        src = PromSource(f"http://127.0.0.1:{server.add(send(body))}", timeout=10)
        src.poll_all()
        src.close()
        nodes = list(src.nodes.values())
        _clean_output(_outputs(nodes, 5.0) + (src.error or ""))
        got[name] = (src.refused, src.error.split(": ", 1)[1] if src.error else None, len(nodes))
    assert got["escapes"] == (False, None, 1)
    assert got["gpu-label-osc"][2] == 1  # the node is there, refused with its reason
    assert got["labels-list"] == (True, "bad Prometheus answer: a label that is not a string", 0)
    assert got["labels-dict"] == (True, "bad Prometheus answer: a label that is not a string", 0)
    assert got["no-value"] == (True, "bad Prometheus answer: a series without samples", 0)
    assert got["value-types"][0] and got["result-not-list"][0] and got["deep"][0]
    assert got["empty-dicts"] == (True, "bad Prometheus answer: a series without labels", 0)
    assert got["error"][0] and got["error"][1].startswith("query failed: \\x1b]0;PWNED")
    assert got["value-nan"] == (False, None, 1) and got["huge-values"] == (False, None, 1)
    # the real CLI: labels of the wrong type are one line and exit 2
    port = server.add(send(answers["labels-list"]))
    rc, out, err, _ = _cli("--prom", f"http://127.0.0.1:{port}", "--once")
    assert rc == 2 and err.count("\n") == 1 and "not a string" in err and out == ""


def test_escaped_prometheus_labels_key_nodes_by_instance(server):
    """One node per scrape instance (never merged by hostname), shares normalised per GPU."""
    series = []
    for inst in ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"):
        for phase, v in (("compute", 0.7), ("sync", 0.5)):  # a partial window's rate sums to 1.2
            m = {"instance": inst, "hostname": "vm", "gpu": "0", "uuid": "GPU-1", "phase": phase}
            series.append({"metric": m, "value": [time.time(), str(v)]})
    body = json.dumps({"status": "success", "data": {"result": series}}).encode()
    src = PromSource(f"http://127.0.0.1:{server.add(send(body))}")
    src.poll_all()
    src.close()
    assert sorted(src.nodes) == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    for n in src.nodes.values():
        (g,) = n.snapshot["gpus"]
        assert n.snapshot["hostname"] == "vm" and g["shares"] == {"compute": 0.5833, "sync": 0.4167}


def _fifo(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    os.mkfifo(p, 0o600)
    return p


def test_bad_files_are_one_line_and_exit_2(tmp_path):
    tok = tmp_path / "tok"
    cases: list[tuple[list[str], str]] = []
    cases.append((["--hosts", "a", "--token-file", str(_fifo(tmp_path, "tokfifo"))], "not a regular file"))
    cases.append((["--hostfile", str(_fifo(tmp_path, "hostfifo"))], "not a regular file"))
    cases.append((["--hostfile", str(tmp_path)], "not a regular file"))
    bad_utf8 = tmp_path / "hosts"
    bad_utf8.write_bytes(b"node1\nnode\xff2\n")
    cases.append((["--hostfile", str(bad_utf8)], "is not UTF-8 text"))
    tok.write_text("t" * 4097)
    tok.chmod(0o600)
    cases.append((["--hosts", "a", "--token-file", str(tok)], "over 4096 bytes"))
    wide = tmp_path / "wide"
    wide.write_text("token\n")
    wide.chmod(0o640)
    cases.append((["--hosts", "a", "--token-file", str(wide)], "can be read by others"))
    if os.geteuid() == 0:  # only root can give a file to another user
        theirs = tmp_path / "theirs"
        theirs.write_text("token\n")
        theirs.chmod(0o600)
        os.chown(theirs, 65534, 65534)
        cases.append((["--hosts", "a", "--token-file", str(theirs)], "belongs to another user"))
    for argv, why in cases:
        rc, out, err, _ = _cli(*argv, "--once", timeout=20)  # a FIFO opened blocking would hang here
        assert rc == 2 and err.count("\n") == 1 and why in err and "Traceback" not in err, (argv, err)
    tok.write_text("t" * 4096 + "\n")
    from memtop.commands.authtoken import read_token

    assert read_token(str(tok)) == "t" * 4096


def test_ssh_lines_are_bounded(real):
    """An ssh stream's line over the cap is refused and skipped; the next line is read."""
    from memtop.fleet.sources import SshStreams

    n = NodeState("ssh-node")
    r, w = os.pipe()
    lines = b"x" * (wire.MAX_SNAPSHOT + 100) + b"\n" + jsonable(real) + b"\n"
    writer = threading.Thread(target=lambda: (os.write(w, lines), os.close(w)))
    writer.start()
    with os.fdopen(r, "rb") as f:
        SshStreams._read_lines(n, f)
    writer.join()
    assert n.polls == 2 and n.failures == 1 and n.snapshot is not None


def test_closing_the_poller_ends_a_request_in_flight(real, server):
    """The TUI closes the poller on q while a trickling node's request reads: closing only the socket
    left that read blocked, and the interpreter's exit waited for its worker forever."""
    slow = NodeState(f"127.0.0.1:{server.add(trickle(jsonable(real)))}")
    poller = HttpPoller([slow], 0, timeout=3600)  # the deadline would never end it here
    poller.poll_all(wait=False)
    while not server.seen:  # the request is in flight
        time.sleep(0.02)
    poller.close(wait=True)  # returns once the worker's read has ended
    assert slow.polls == 1 and slow.snapshot is None
