"""Packaging and the data boundary."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_collectors_and_model_never_import_textual():
    mods = _modules_after(
        "import memtop.model, memtop.phases, memtop.verdict, memtop.store, memtop.pipeline, memtop.report, "
        "memtop.export, memtop.sampler, memtop.doctor, memtop.score, memtop.stackclass\n"
        "import memtop.collectors.nvml, memtop.collectors.host, memtop.collectors.stacks, "
        "memtop.collectors.perf, memtop.collectors.numa"
    )
    assert not {m for m in mods if m == "textual" or m.startswith("textual.")}


def test_model_imports_neither_textual_nor_pynvml():
    mods = _modules_after("import memtop.model")
    assert "textual" not in mods and "pynvml" not in mods


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_do_not_load_textual(flag):
    mods = _modules_after(
        f"import sys; sys.argv=['memtop', '{flag}']\n"
        "from memtop.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert "textual" not in mods and "pynvml" not in mods


def test_python_dash_m_runs():
    r = subprocess.run([sys.executable, "-m", "memtop", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("memtop ")


@pytest.mark.slow
def test_wheel_holds_only_the_memtop_namespace(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (whl,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(whl).namelist()
    code = [n for n in names if not n.startswith("memtop_gpu-") or not n.split("/")[0].endswith(".dist-info")]
    assert code and all(n.startswith("memtop/") for n in code), [
        n for n in code if not n.startswith("memtop/")
    ]
    for needed in (
        "memtop/collectors/nvml.py",
        "memtop/tui/app.py",
        "memtop/tui/memtop.tcss",
        "memtop/data/demo.memtop",
    ):
        assert needed in names
