"""`memtop cluster` against hostile nodes and a hostile Prometheus (issue 34's network targets).

One process (`--serve`) plays every hostile behaviour of tests/hostile_net.py on loopback ports: nodes
answering with escapes in every field, wrong types, huge numbers, deep nesting, object bombs, 60 MB
bodies (with and without a length), a 1 B/s trickle, redirects to 127.0.0.2 (another origin, which
counts every request and every Authorization header reaching it); Prometheus answers the same way.
The measured process is the client alone (its RSS holds none of the servers' bodies):
- the headless poller as the TUI drives it (the compact form asked first, poll_all(wait=False) every interval, the rows, every
  output: --once text, --once --json, the TUI's row cells and node screens) over R rounds;
- PromSource over every hostile Prometheus answer, cycled;
- the real CLI (`memtop cluster --once`, text and --json) against the hostile nodes, a few times.
Counts: answers handled, escape characters in any output, tokens that reached 127.0.0.2, the peak
RSS of the client and of each CLI run, and the healthy node's age at every sample while the trickling
node is in the list (in intervals).

usage: python bench/fleet_hostile.py [--rounds 40] [--interval 2] [--prom-rounds 200]
prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))
CONTROL = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\n"} | {"\u202e", "\u2066"}
TOKEN = "bench-s3cret"


def serve(real_file: str) -> None:
    """The hostile servers; prints {"nodes": {name: port}, "prom": {...}, "elsewhere": port}."""
    from hostile_net import (
        Server,
        bomb_60mb,
        jsonable,
        prom_variants,
        redirect,
        send,
        snapshot_variants,
        trickle,
    )

    real = json.loads(Path(real_file).read_text())
    here, away = Server(), Server("127.0.0.2")
    catch = away.add(send(b"{}"))
    bomb = bomb_60mb()
    nodes = {k: here.add(send(jsonable(v))) for k, v in snapshot_variants(real).items()}
    nodes["big-60mb"] = here.add(send(bomb))
    nodes["big-60mb-nolength"] = here.add(send(bomb, length=False))
    nodes["redirect-elsewhere"] = here.add(redirect(f"http://127.0.0.2:{catch}/snapshot.json"))
    nodes["redirect-other-port"] = here.add(redirect(f"http://127.0.0.1:{catch}/snapshot.json"))
    prom = {k: here.add(send(v)) for k, v in prom_variants().items()}
    prom["bomb-60mb"] = here.add(send(bomb))
    prom["bomb-45mb-nolength"] = here.add(send(bomb[: 45 << 20] + b"{}]}}", length=False))
    prom["redirect-elsewhere"] = here.add(redirect(f"http://127.0.0.2:{catch}/api/v1/query"))
    trickler = here.add(trickle(jsonable(real)))
    healthy = here.add(send(jsonable(real)))
    print(json.dumps({"nodes": nodes, "prom": prom, "trickle": trickler, "healthy": healthy}), flush=True)
    for line in sys.stdin:  # "seen": how many requests and tokens reached the other origin
        if line.strip() == "seen":
            auth = sum(1 for _, _, h in away.seen if "authorization" in h)
            print(json.dumps({"requests": len(away.seen), "tokens": auth}), flush=True)


def escapes(text: str) -> int:
    return sum(1 for c in text if c in CONTROL)


def outputs(nodes: list, interval: float) -> str:
    from memtop.tui.cluster import node_text, row_cells

    from memtop.fleet.view import merged, print_text, rows

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_text(nodes, interval)
    parts = [buf.getvalue(), json.dumps(merged(nodes, interval), ensure_ascii=False)]
    for r in rows(nodes, interval):
        parts += [t for _, t in row_cells(r, interval, False)]
    parts += [node_text(n.target, n.snapshot, n.error).plain for n in nodes]
    return "\n".join(parts)


def http_rounds(ports: dict, rounds: int, interval: float) -> dict:
    """The TUI's loop over every hostile node, the trickling one and a healthy one."""
    from memtop.fleet.sources import HttpPoller
    from memtop.fleet.view import NodeState

    hostile = [NodeState(f"127.0.0.1:{p}") for p in ports["nodes"].values()]
    slow, healthy = NodeState(f"127.0.0.1:{ports['trickle']}"), NodeState(f"127.0.0.1:{ports['healthy']}")
    nodes = [*hostile, slow, healthy]
    poller = HttpPoller(nodes, 0, timeout=3.0, token=TOKEN, compact=True)  # the TUI's, as it polls
    esc, ages = 0, []
    t0 = time.monotonic()
    for i in range(rounds):
        poller.poll_all(wait=False)
        tick = t0 + (i + 1) * interval
        while (now := time.monotonic()) < tick:
            if i >= 1:  # the first answer is in: the row's age from here on
                ages.append((healthy.age(now) or 1e9) / interval)
            time.sleep(0.05)
        esc += escapes(outputs(nodes, interval))
    poller.close()
    answers = sum(n.polls for n in hostile)
    return {
        "node_answers": answers,
        "node_refused": sum(n.failures for n in hostile),
        "node_escapes_in_output": esc,
        "healthy_age_max_intervals": round(max(ages), 2),
        "healthy_stale_ever": any(a > 3 for a in ages),
        "trickle_polls": slow.polls,
        "trickle_reason": slow.error,
    }


def prom_rounds(ports: dict, rounds: int) -> dict:
    from memtop.fleet.sources import PromSource

    names = list(ports["prom"])
    esc = answers = refused = 0
    for i in range(rounds):
        src = PromSource(f"http://127.0.0.1:{ports['prom'][names[i % len(names)]]}", timeout=5, token=TOKEN)
        src.poll_all()
        src.close()
        answers += 5 if src.error is None else 1  # five queries, or the first refused
        refused += src.error is not None
        esc += escapes(outputs(list(src.nodes.values()), 5.0) + (src.error or ""))
    return {"prom_answers": answers, "prom_refused_polls": refused, "prom_escapes_in_output": esc}


MEASURED = (
    "import sys\nfrom memtop.cli import main\ntry:\n    rc = main(sys.argv[2:])\nfinally:\n"
    "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0].split()[1]\n"
    "    open(sys.argv[1], 'w').write(hwm)\nsys.exit(rc)\n"
)


def cli_runs(ports: dict) -> dict:
    """The real CLI over every hostile node and every hostile Prometheus, text and JSON."""
    tok = Path(tempfile.mkdtemp()) / "token"
    tok.write_text(TOKEN + "\n")
    tok.chmod(0o600)
    hosts = ",".join(f"127.0.0.1:{p}" for p in [*ports["nodes"].values(), ports["healthy"]])
    runs = [["--hosts", hosts], ["--hosts", hosts, "--json"]]
    runs += [["--prom", f"http://127.0.0.1:{p}"] for p in ports["prom"].values()]
    esc, rss, codes = 0, 0, []
    for argv in runs:
        hwm = tok.parent / "hwm"
        r = subprocess.run(
            [sys.executable, "-c", MEASURED, str(hwm), "cluster", *argv, "--once", "--token-file", str(tok)],
            capture_output=True, timeout=120,
        )  # fmt: skip
        out = r.stdout.decode("utf-8", "replace") + r.stderr.decode("utf-8", "replace")
        esc += escapes(out)
        codes.append(r.returncode)
        rss = max(rss, int(hwm.read_text()) // 1024)
        assert "Traceback" not in out, out
    return {
        "cli_runs": len(runs),
        "cli_escapes": esc,
        "cli_exit_codes": sorted(set(codes)),
        "cli_peak_rss_mib": rss,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--prom-rounds", type=int, default=200)
    ap.add_argument("--serve", metavar="SNAPSHOT.json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve)
    real = subprocess.run(
        [sys.executable, "-m", "memtop", "snapshot", "--json", "--demo"], capture_output=True, check=True
    ).stdout
    snap = Path(tempfile.mkdtemp()) / "snapshot.json"
    snap.write_bytes(real)
    srv = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(snap)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert srv.stdout is not None and srv.stdin is not None
        ports = json.loads(srv.stdout.readline())
        out = {"date": time.strftime("%Y-%m-%d"), "nodes": len(ports["nodes"]) + 2, "interval_s": a.interval}
        out |= http_rounds(ports, a.rounds, a.interval)
        out |= prom_rounds(ports, a.prom_rounds)
        out |= cli_runs(ports)
        out["client_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        srv.stdin.write("seen\n")
        srv.stdin.flush()
        seen = json.loads(srv.stdout.readline())
        out |= {"requests_cross_origin": seen["requests"], "tokens_cross_origin": seen["tokens"]}
        out["hostile_answers"] = out["node_answers"] + out["prom_answers"]
        print(json.dumps(out))
    finally:
        srv.kill()
        srv.wait()
        with contextlib.suppress(OSError):
            os.unlink(snap)


if __name__ == "__main__":
    main()
