"""`memtop cluster` over many nodes: CPU of the cluster process, bytes received, and how stale the
oldest row gets.

Nodes: up to --real real `memtop serve --replay` processes (as many as this machine holds), the
rest served by one lightweight endpoint process that answers /snapshot.json on many loopback ports
with real snapshots (taken from the shipped recordings with `memtop snapshot --replay`, cycled, the
time field refreshed). The measured process is either the headless poller (HttpPoller + the merge
into rows, as the TUI does every paint) or the real TUI under tmux.

usage: python bench/cluster_bench.py [--nodes 64 256] [--interval 5] [--seconds 60] [--real 16] [--tui [--no-poller]]
prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import netutil  # noqa: E402
from netutil import memtop, stop, wait_ready  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ERR = Path(os.environ.get("OUT", "/tmp")) / "serve_cost_stderr.txt"


def free_ports(n: int) -> list[int]:
    """n free loopback ports (up to 4 000), from a range the tests' helpers do not use."""
    return netutil.free_ports(n, range(43000, 47000))


def real_snapshots(n_per: int = 10) -> list[list[bytes]]:
    """A few real snapshots of each recording, 1 s apart in replay time."""
    out = []
    for rec in sorted((ROOT / "tests/data").glob("labelled_s*.memtop"))[:6]:
        r = subprocess.run(
            [sys.executable, "-m", "memtop", "snapshot", "--json", "--replay", str(rec), "--interval", "1",
             "--count", str(n_per)],
            capture_output=True, timeout=120, check=True,
        )  # fmt: skip
        out.append([ln for ln in r.stdout.splitlines() if ln])
    return out


def endpoint(ports: list[int], snaps_file: str, frames: list[int] | None = None) -> None:
    """One asyncio process answering GET /snapshot.json, and GET /compact.json with its compact form
    (`memtop serve`'s, made by the memtop this process imports), on every port (HTTP/1.1 keep-alive).

    Which of a recording's snapshots a node sends follows the requests on its connection, not the
    clock: the k-th answer is frame k (cycled), or `frames[k % len(frames)]` where given. (Chosen by
    the second, the frames a run saw hung on the phase of its rounds against the clock: at a 5 s
    interval one phase in five alternated frames 3 and 8, 342 straggler candidates on, then off,
    every round, which doubled the main thread's CPU for whole sittings.)"""
    from memtop.fleet.wire import COMPACT_PATH, compact

    snaps = [[s.encode() for s in group] for group in json.loads(Path(snaps_file).read_text())]
    compact_get = f"GET {COMPACT_PATH} ".encode()

    async def handle(reader, writer, i: int) -> None:
        try:
            for k in itertools.count():
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                group = snaps[i % len(snaps)]
                doc = json.loads(group[(frames[k % len(frames)] if frames else k) % len(group)])
                doc["time"] = round(time.time(), 3)
                if head.startswith(compact_get):
                    doc = compact(doc)
                body = json.dumps(doc, separators=(",", ":")).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        for i, p in enumerate(ports):
            await asyncio.start_server(lambda r, w, i=i: handle(r, w, i), "127.0.0.1", p)
        await asyncio.Event().wait()

    asyncio.run(main())


def poller(hosts: str, interval: float, seconds: float) -> None:
    """The headless cluster client: poll every interval, merge into rows once a second."""
    from memtop.fleet.sources import HttpPoller
    from memtop.fleet.view import NodeState, rows

    nodes = [NodeState(h) for h in hosts.split(",")]
    p = HttpPoller(nodes, 0, timeout=3.0)
    t0 = time.monotonic()
    c0 = time.process_time()
    next_poll = t0
    worst = 0.0
    rounds = []
    while time.monotonic() - t0 < seconds:
        now = time.monotonic()
        if now - t0 > 2 * interval:  # the oldest row just before a round refreshes it
            worst = max(worst, max((n.age() or 1e9) for n in nodes))
        if now >= next_poll:
            r0 = time.monotonic()
            p.poll_all()
            rounds.append(time.monotonic() - r0)
            next_poll += interval
        rows(nodes, interval)  # what the TUI computes every paint
        if now - t0 > 2 * interval:  # after the first rounds
            worst = max(worst, max((n.age() or 1e9) for n in nodes))
        time.sleep(min(1.0, max(0.0, next_poll - time.monotonic())))
    cpu = time.process_time() - c0
    wall = time.monotonic() - t0
    print(json.dumps({
        "cpu_pct": round(100 * cpu / wall, 2), "bytes_per_s": round(sum(n.received for n in nodes) / wall),
        "oldest_row_s": round(worst, 2), "round_s_max": round(max(rounds), 3),
        "round_s_mean": round(sum(rounds) / len(rounds), 3), "failures": sum(n.failures for n in nodes),
    }))  # fmt: skip
    p.close()


def _cpu_ticks(pid: int) -> int:
    return _task_ticks(Path(f"/proc/{pid}"))


def _thread_ticks(pid: int) -> dict[int, int]:
    """Each thread's utime + stime (a thread that ended meanwhile is left out)."""
    out = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(t.name)] = _task_ticks(t)
        except (OSError, ValueError):
            continue
    return out


def _task_ticks(task: Path) -> int:
    """utime + stime of a process (/proc/PID) or of one of its threads (/proc/PID/task/TID)."""
    f = (task / "stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def _per_thread(pid: int, a: dict[int, int], b: dict[int, int], seconds: float) -> dict[str, float]:
    """% of a core: the main thread (Textual and the paint), the busiest other (the poll loop), the rest."""
    d = {tid: b[tid] - a.get(tid, 0) for tid in b}
    main = d.pop(pid, 0)
    busiest = max(d.values(), default=0)
    ticks = {"main": main, "poll_loop": busiest, "rest": sum(d.values()) - busiest}
    return {k: round(100 * v / TICK / seconds, 2) for k, v in ticks.items()}


def tui(hosts: str, interval: float, seconds: float) -> dict:
    """The real TUI in a detached tmux session (200x50); CPU of the memtop process."""
    sock = f"cluster-bench-{os.getpid()}-{time.monotonic_ns()}"  # (a server just killed may linger)
    hf = Path(f"/tmp/cluster-bench-hosts-{os.getpid()}")
    hf.write_text(hosts.replace(",", "\n"))
    cmd = f"exec {sys.executable} -m memtop cluster --hostfile {hf} --interval {interval}"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "200", "-y", "50", cmd], check=True)
    try:
        pid = int(subprocess.run(["tmux", "-L", sock, "list-panes", "-F", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout.split()[0])  # fmt: skip
        time.sleep(2 * interval)  # start-up and the first rounds are not the steady state
        a, ta, t0 = _cpu_ticks(pid), _thread_ticks(pid), time.monotonic()
        time.sleep(seconds)
        b, tb, t1 = _cpu_ticks(pid), _thread_ticks(pid), time.monotonic()
        screen = subprocess.run(
            ["tmux", "-L", sock, "capture-pane", "-p"], capture_output=True, text=True
        ).stdout
        return {
            "tui_cpu_pct": round(100 * (b - a) / TICK / (t1 - t0), 2),
            "threads": _per_thread(pid, ta, tb, t1 - t0),
            "stale_on_screen": "stale" in screen,
        }
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], check=False)
        hf.unlink(missing_ok=True)


def _pid_cpu(argv: list[str], warmup: float, seconds: float) -> float:
    """CPU % of one core of a memtop process over `seconds`, after `warmup` (its stderr to ERR)."""
    with open(ERR, "ab") as err:
        p = memtop(*argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        time.sleep(warmup)
        a, t0 = _cpu_ticks(p.pid), time.monotonic()
        time.sleep(seconds)
        if p.poll() is not None:
            raise RuntimeError(f"memtop {argv[0]} exited {p.returncode}: see {ERR}")
        return 100 * (_cpu_ticks(p.pid) - a) / TICK / (time.monotonic() - t0)
    finally:
        stop(p)


def serve_cost(seconds: float, rounds: int) -> None:
    """On the GPU machine: `memtop serve` at defaults (scraped every 15 s, as Prometheus would) vs
    `memtop record` at defaults, alternated; then the latency of scrapes of /metrics and
    /snapshot.json (fresh connection each, like a first scrape; and keep-alive)."""
    import http.client
    import threading

    (port,) = free_ports(1)
    res: dict[str, list[float]] = {"record": [], "serve": []}
    for _ in range(rounds):
        res["record"].append(
            _pid_cpu(["record", "-o", f"/tmp/cost-{os.getpid()}.memtop", "--force"], 10, seconds)
        )
        stop_scrape = threading.Event()

        def scrape(stop_scrape: threading.Event = stop_scrape) -> None:
            while not stop_scrape.wait(15):
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    c.request("GET", "/metrics")
                    c.getresponse().read()
                    c.close()
                except OSError:
                    pass

        t = threading.Thread(target=scrape, daemon=True)
        t.start()
        res["serve"].append(_pid_cpu(["serve", "--port", str(port)], 10, seconds))
        stop_scrape.set()
        print(json.dumps({"round": {k: v[-1] for k, v in res.items()}}), flush=True)
    lat: dict[str, list[float]] = {}
    with open(ERR, "ab") as err:
        p = memtop("serve", "--port", str(port), stderr=err)
    try:
        wait_ready(port, proc=p, timeout=60)
        time.sleep(5)
        keep = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for path in ("/metrics", "/snapshot.json"):
            for mode in ("fresh", "keepalive"):
                xs = []
                for _ in range(100):
                    t0 = time.perf_counter()
                    c = (
                        keep
                        if mode == "keepalive"
                        else http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    )
                    c.request("GET", path)
                    body = c.getresponse().read()
                    xs.append(1000 * (time.perf_counter() - t0))
                    if mode == "fresh":
                        c.close()
                    time.sleep(0.05)
                xs.sort()
                lat[f"{path} {mode}"] = [round(xs[50], 2), round(xs[98], 2), round(xs[-1], 2), len(body)]
    finally:
        stop(p)
    mean = {k: round(sum(v) / len(v), 3) for k, v in res.items()}
    print(json.dumps({"seconds": seconds, "rounds": res, "mean_cpu_pct": mean,
                      "serve_minus_record_pct": round(mean["serve"] - mean["record"], 3),
                      "scrape_ms_p50_p99_max_bytes": lat}))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--real", type=int, default=16)
    ap.add_argument("--tui", action="store_true")
    ap.add_argument("--no-poller", action="store_true", help="with --tui: the TUI alone")
    ap.add_argument(
        "--serve-cost", action="store_true", help="on a GPU machine: serve vs record, scrape latency"
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--_endpoint", nargs="+", help=argparse.SUPPRESS)  # PORTS SNAPS [FRAMES]
    ap.add_argument("--_poller", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._endpoint:
        frames = [int(f) for f in a._endpoint[2].split(",")] if len(a._endpoint) > 2 else None
        return endpoint([int(p) for p in a._endpoint[0].split(",")], a._endpoint[1], frames)
    if a._poller:
        return poller(a._poller[0], float(a._poller[1]), float(a._poller[2]))
    if a.serve_cost:
        return serve_cost(a.seconds, a.rounds)
    snaps = Path(f"/tmp/cluster-bench-snaps-{os.getpid()}.json")
    snaps.write_text(json.dumps([[s.decode() for s in g] for g in real_snapshots()]))
    recs = sorted((ROOT / "tests/data").glob("labelled_s*.memtop"))
    try:
        for n in a.nodes:
            ports = free_ports(n)
            real, fake = ports[: min(a.real, n)], ports[min(a.real, n) :]
            procs = [memtop("serve", "--replay", str(recs[i % len(recs)]), "--port", str(p),
                            stderr=subprocess.DEVNULL) for i, p in enumerate(real)]  # fmt: skip
            if fake:
                procs.append(subprocess.Popen([sys.executable, __file__, "--_endpoint",
                                               ",".join(map(str, fake)), str(snaps)]))  # fmt: skip
            try:
                for p, port in zip(procs, ports):
                    wait_ready(port, proc=p, timeout=120)
                if fake:
                    time.sleep(2)  # the endpoint answers no /-/ready: give it its start-up
                hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
                res = {"nodes": n, "real_serve": len(real), "interval_s": a.interval, "seconds": a.seconds}
                if not (a.tui and a.no_poller):
                    r = subprocess.run([sys.executable, __file__, "--_poller", hosts, str(a.interval), str(a.seconds)],
                                       capture_output=True, text=True, timeout=a.seconds + 120)  # fmt: skip
                    res.update(json.loads(r.stdout))
                if a.tui:
                    res.update(tui(hosts, a.interval, a.seconds))
                print(json.dumps(res), flush=True)
            finally:
                stop(*procs)
    finally:
        snaps.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
