"""A node without an NVIDIA driver is not healthy to scripts: `snapshot` exits 4 and says why (the
JSON still printed, with the reason), `record` warns. Run for real on a machine with no driver (the CI
VM); `serve`'s side is in test_serve.py."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from memtop.commands.snapshot import NO_GPU_EXIT

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "docs" / "snapshot.schema.json").read_text())
NO_DRIVER = ctypes.util.find_library("nvidia-ml") is None and not Path("/dev/nvidiactl").exists()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver: the no-GPU path needs none"),
]


def _memtop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memtop", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_snapshot_exits_4_and_says_why():
    r = _memtop("snapshot", "--json", "--no-stacks", "--interval", "0.5", "--count", "2")
    assert r.returncode == NO_GPU_EXIT == 4, r.stderr
    snaps = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(snaps) == 2
    for s in snaps:
        jsonschema.validate(s, SCHEMA)
        assert s["gpus"] == [] and "NVIDIA driver not found" in s["no_gpu"]
    assert r.stderr.splitlines() == [f"memtop: no GPU: {snaps[0]['no_gpu']}"]  # once, not per snapshot
    text = _memtop("snapshot", "--no-stacks", "--interval", "0.5", "--count", "1")
    assert text.returncode == 4 and text.stderr.count("\n") == 1 and "no GPU" in text.stderr


def test_no_gpu_outranks_fail_on():
    r = _memtop(
        "snapshot", "--json", "--no-stacks", "--interval", "0.5", "--count", "1", "--fail-on", "sync:0.1"
    )
    assert r.returncode == 4


def test_record_warns_in_one_line(tmp_path):
    out = tmp_path / "r.memtop"
    r = _memtop("record", "-o", str(out), "--duration", "1", "--no-stacks")
    assert r.returncode == 0 and out.is_file(), r.stderr
    (warning,) = [line for line in r.stderr.splitlines() if "no GPU" in line]
    assert "NVIDIA driver not found" in warning and "host, processes and stacks only" in warning
    assert "Traceback" not in r.stderr
