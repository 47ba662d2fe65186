"""docs/prometheus-rules.yml: valid rules (`promtool check rules`) that do what their names say
(`promtool test rules` on docs/prometheus-rules.test.yml: input series for each rule, firing and not)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian: prometheus; .ci/run installs it)",
)


def _promtool(*argv: str) -> str:
    r = subprocess.run(["promtool", *argv], capture_output=True, text=True, timeout=120, cwd=DOCS)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_rules_are_valid():
    out = _promtool("check", "rules", "prometheus-rules.yml")
    assert "SUCCESS: 9 rules found" in out


def test_rules_fire_on_their_input_series():
    assert "SUCCESS" in _promtool("test", "rules", "prometheus-rules.test.yml")
