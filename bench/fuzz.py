"""The fuzz at full size: damaged copies of the real recordings (tests/fuzzing.py: byte-level damage,
SQL-level edits, zlib and JSON object-count bombs), the cases through `replay --summary`, `report`
(text, markdown, JSON) and `export --perfetto` in turn, every 100th also as a headless TUI replay.
Each run is a child process forked from a worker (tests/fuzzing.run_forked): its outcome, its
seconds and its peak RSS (with the pages it shares with the worker, ~100 MiB: an upper bound).

usage: nice python bench/fuzz.py [CASES] [SEED] [PROCS]   (default 5000 cases, seed 1, 2 workers;
prints JSON, then the figures as a markdown table)
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

HANG_S = 30
RSS_LIMIT_KIB = 500 << 10
FORMATS = ("text", "markdown", "json")


def worker(n: int, seed: int, log: Path) -> None:
    """Runs n cases of ``seed``, one JSON line per run appended to ``log`` (a run cut short leaves
    the lines of those before it)."""
    import memtop.tui.app  # noqa: F401
    from fuzzing import COMMANDS, cases, make_bases, run_forked

    import memtop.cli  # noqa: F401  (imported once here: each forked run starts warm)

    work = Path(tempfile.mkdtemp(prefix="memtop-fuzz-"))
    bases = make_bases(work / "bases")
    with open(log, "a") as out:
        for i, what, path, _rng in cases(seed, n, bases, work):
            for cmd in [COMMANDS[i % len(COMMANDS)]] + (["tui"] if i % 100 == 50 else []):
                o, seconds, rss = run_forked(path, cmd, work, HANG_S)
                row = {"case": f"{seed}/{i}", "what": what, "cmd": cmd, **o.__dict__}
                out.write(json.dumps({**row, "seconds": round(seconds, 2), "rss_kib": rss}) + "\n")
                out.flush()


def _mutation(what: str) -> str:
    first = what.split(" + ")[0]
    return ":".join(first.split(":")[:2]).split(" ")[0] if first.startswith("edit:") else first.split(":")[0]


def summarize(logs: list[Path], command: str, seconds: float | None) -> None:
    rows = [json.loads(line) for log in logs if log.exists() for line in log.read_text().splitlines()]
    outcomes = Counter(r["kind"] for r in rows)
    bad = Counter(f"{r['kind']}: {r['signature'] or r['detail'][:80]}" for r in rows if r["kind"] != "ok")
    examples = {}
    for r in rows:
        if r["kind"] != "ok":
            examples.setdefault(
                f"{r['kind']}: {r['signature'] or r['detail'][:80]}", f"{r['case']} {r['what']} / {r['cmd']}"
            )
    top = max(rows, key=lambda r: r["rss_kib"])
    slow = max(rows, key=lambda r: r["seconds"])
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "command": command,
        "cases": len({r["case"] for r in rows}),
        "runs": len(rows),
        "runs_by_command": dict(Counter(r["cmd"] for r in rows)),
        "outcomes": dict(outcomes),
        "by_signature": dict(bad),
        "examples": examples,
        "mutations": dict(Counter(_mutation(r["what"]) for r in rows if r["cmd"] != "tui")),
        "peak_rss_mib": top["rss_kib"] >> 10,
        "peak_rss_run": f"{top['case']} {top['what']} / {top['cmd']}",
        "runs_over_500_mib": [
            f"{r['case']} {r['what']} / {r['cmd']}" for r in rows if r["rss_kib"] > RSS_LIMIT_KIB
        ],
        "slowest_s": slow["seconds"],
        "slowest_run": f"{slow['case']} {slow['what']} / {slow['cmd']}",
        "seconds": seconds,
    }
    print(json.dumps(res, indent=2))
    print("\n| outcome | runs |\n|---|---:|")
    for k in ("ok", "traceback", "hang", "wrong-exit", "stopped"):
        print(f"| {k} | {outcomes.get(k, 0)} |")
    for k, v in bad.most_common():
        print(f"| {k} ({examples[k]}) | {v} |")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    procs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    t0 = time.monotonic()
    logs = [Path(tempfile.gettempdir()) / f"memtop-fuzz-{seed}-{k}.jsonl" for k in range(procs)]
    for log in logs:
        log.unlink(missing_ok=True)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(n // procs + (k < n % procs)),
                str(seed * 1000 + k),
                str(log),
            ]
        )
        for k, log in enumerate(logs)
    ]
    for c in children:
        c.wait()
    summarize(logs, f"nice python bench/fuzz.py {n} {seed} {procs}", round(time.monotonic() - t0, 1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    elif sys.argv[1:2] == ["--summarize"]:  # what the logs of a run (cut short or not) hold
        summarize([Path(a) for a in sys.argv[2:]], "nice python bench/fuzz.py (logs)", None)
    else:
        main()
