"""`memtop report --format json` of every recording in tests/data, tests/data/multi and the demo, by
this tree and another checkout (one process per tree: ``build_report`` + ``render`` in a loop); prints
the recordings whose JSON differs and exits 1 if any does.

usage: python bench/same_reports.py BEFORE_CHECKOUT
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trees import prelude

ROOT = Path(__file__).parent.parent
EACH = """
import hashlib, json
from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording
from memtop.core.errors import UserError
out = {}
for p in json.loads(sys.argv[1]):
    try:
        text = render(build_report(Recording(p)), "json")
    except UserError as e:
        text = "UserError: " + str(e)
    out[p] = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps(out))
"""


def recordings() -> list[str]:
    data = ROOT / "tests" / "data"
    found = sorted(data.glob("*.memtop")) + sorted((data / "multi").glob("*.memtop"))
    return [str(p) for p in [*found, ROOT / "memtop" / "data" / "demo.memtop"]]


def digests(tree: str, paths: list[str]) -> dict[str, str]:
    code = prelude(tree) + EACH
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(paths)], check=True, capture_output=True, text=True
    )
    return json.loads(run.stdout.splitlines()[-1])


def main() -> None:
    paths = recordings()
    before, after = digests(sys.argv[1], paths), digests(str(ROOT.resolve()), paths)
    differ = [p for p in paths if before[p] != after[p]]
    for p in differ:
        print("differs:", p)
    print(f"{len(paths) - len(differ)} of {len(paths)} the same bytes")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
