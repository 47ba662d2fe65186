"""The fuzz at full size: damaged copies of the real recordings (tests/fuzzing.py) through
`replay --summary`, `report` in every format and `export --perfetto` in-process, every 100th case
also as a headless TUI replay and every 200th also as a real process.

usage: python bench/fuzz.py [CASES] [SEED]   (default 10000 cases, seed 1; prints JSON, then the
figures as a markdown table)
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from fuzzing import COMMANDS, cases, make_bases, run_case, run_subprocess, run_tui  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    work = Path(tempfile.mkdtemp(prefix="memtop-fuzz-"))
    bases = make_bases(work / "bases")
    runs: Counter = Counter()
    outcomes: Counter = Counter()
    by_signature: Counter = Counter()
    by_mutation: Counter = Counter()
    examples: dict[str, str] = {}
    t0 = time.monotonic()
    for i, what, path, _rng in cases(seed, n, bases, work):
        by_mutation[what.split(":")[0].split(" ")[0]] += 1
        checks = [("cli", COMMANDS[i % len(COMMANDS)])]
        if i % 100 == 50:
            checks.append(("tui", "replay"))
        if i % 200 == 99:
            checks.append(("process", COMMANDS[(i // 200) % len(COMMANDS)]))
        for how, cmd in checks:
            if how == "cli":
                o = run_case(path, cmd, work)
            elif how == "tui":
                o = run_tui(path, seconds=2.0)
            else:
                o = run_subprocess(path, cmd, work)
            runs[f"{how} {cmd}"] += 1
            outcomes[o.kind] += 1
            if o.kind != "ok":
                key = f"{o.kind}: {o.signature or o.detail[:80]}"
                by_signature[key] += 1
                examples.setdefault(key, f"case {i} seed {seed}: {what} / {how} {cmd}")
        if i % 500 == 0:
            print(f"{i} cases, {dict(outcomes)}, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.node()}, Python {platform.python_version()}",
        "cases": n,
        "seed": seed,
        "runs": sum(runs.values()),
        "runs_by_check": dict(runs),
        "outcomes": dict(outcomes),
        "by_signature": dict(by_signature),
        "examples": examples,
        "mutations": dict(by_mutation),
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(res, indent=2))
    print("\n| outcome | runs |\n|---|---:|")
    for k in ("ok", "traceback", "hang", "wrong-exit", "stopped"):
        print(f"| {k} | {outcomes.get(k, 0)} |")
    for k, v in by_signature.most_common():
        print(f"| {k} ({examples[k]}) | {v} |")


if __name__ == "__main__":
    main()
