"""Packaging and the data boundary."""

from __future__ import annotations

import importlib.util
import json
import pkgutil
import re
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


# What importing each module may load (at import time, not lazily inside a function): the runtime
# twin of pyproject's import-linter contracts. Every module is checked, found by walking the packages.
CORE = ("memtop.collectors", "memtop.core.model", "memtop.core.metrics")
# (modules, except these, must not load)
RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], frozenset[str]], ...] = (
    (
        ("memtop.tui",),
        (),
        frozenset({"pynvml", "psutil", "sqlite3", "memtop.collectors", "memtop.live.sampler"}),
    ),
    (
        CORE,
        (),
        frozenset({"textual", "rich", "memtop.analysis.phases", "memtop.live.pipeline", "memtop.tui"}),
    ),
    (CORE[1:], (), frozenset({"pynvml", "psutil", "sqlite3", "numpy"})),
    (("memtop",), ("memtop.tui",), frozenset({"textual"})),  # only the TUI loads Textual, when it starts
)
# Heavy imports a module's child may find already loaded where that module is allowed to load them:
# a parent that imported them forks the children of every module they are allowed in (each child
# imported numpy, Textual, ... again). A preload that brings in something a module must not load shows
# in its child's list, and fails the test below: it can add a finding, never hide one.
PRELOAD = ("numpy", "rich", "textual.app", "textual.widgets", "sqlite3", "psutil", "pynvml")
STDLIB = ("argparse", "asyncio", "dataclasses", "datetime", "inspect", "json", "subprocess", "threading")
_WALK = """
import importlib, json, os, sys
job = json.loads(sys.stdin.read())


def forked(f):  # f() in a child: its sys.modules is the parent's plus what f imports, then gone
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        with os.fdopen(wr, "wb") as out:
            out.write(json.dumps(f()).encode())
        os._exit(0)
    os.close(wr)
    with os.fdopen(rd, "rb") as back:
        data = back.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def loads(name):  # the watched modules loaded once ``name`` is imported
    try:
        importlib.import_module(name)
        return [w for w in job["watch"] if any(m == w or m.startswith(w + ".") for m in sys.modules)]
    except BaseException as e:  # an import that fails is reported, not a silent empty list
        return ["import failed: " + repr(e)]


def group(preload, names):  # a fresh child per module, forked after the group's preloads
    for p in preload:
        importlib.import_module(p)
    return {name: forked(lambda: loads(name)) for name in names}


out = {}
for preload, names in job["groups"]:
    out.update(forked(lambda: group(preload, names)))
print(json.dumps(out))
"""


def _forbidden(name: str) -> frozenset[str]:
    return frozenset().union(
        *(
            f
            for modules, exempt, f in RULES
            if name.startswith(modules) and not name.startswith(exempt or ("-",))
        )
    )


def _groups(names: list[str]) -> list[tuple[list[str], list[str]]]:
    """The modules by the preloads each may find loaded (those none of its rules forbids)."""
    by: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        bad = _forbidden(name)
        ok = [p for p in PRELOAD if not any(p == f or p.startswith(f + ".") for f in bad)]
        by.setdefault((*STDLIB, *ok), []).append(name)
    return [(list(preload), group) for preload, group in by.items()]


def _modules(roots: list[str]) -> list[str]:
    """Every module of the packages, found from their specs (importing them would leak into the walk)."""
    names = []
    for r in roots:
        spec = importlib.util.find_spec(r)
        assert spec is not None and spec.submodule_search_locations is not None, r
        names += [r] + [m.name for m in pkgutil.walk_packages(spec.submodule_search_locations, r + ".")]
    return [
        n for n in dict.fromkeys(names) if not n.endswith("__main__")
    ]  # (a root's subpackages are roots too)


def _roots() -> list[str]:
    """The packages pyproject installs (memtop.collectors and memtop.tui live outside memtop/)."""
    text = (ROOT / "pyproject.toml").read_text()
    return re.findall(r'"(memtop[\w.]*)"', re.search(r"^packages = \[(.*?)\]$", text, re.M | re.S).group(1))


def test_every_module_imports_only_what_its_layer_may():
    watch = sorted({w for *_, ws in RULES for w in ws})
    out = subprocess.run(
        [sys.executable, "-c", _WALK],
        input=json.dumps({"watch": watch, "groups": _groups(_modules(_roots()))}),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loaded: dict[str, list[str]] = json.loads(out)
    assert {"memtop.core.model", "memtop.collectors.nvml", "memtop.tui.app", "memtop.storage.store"} <= set(
        loaded
    )
    failed = [g for got in loaded.values() for g in got if g.startswith("import failed")]
    assert not failed, failed
    bad = [
        f"{name} loads {sorted(hit)}" for name, got in loaded.items() if (hit := set(got) & _forbidden(name))
    ]
    assert not bad, bad


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
        "memtop/agent/site/sitecustomize.py",
    ):
        assert needed in names
    # every module of the source tree ships: a sub-package missing from pyproject's list imports in an
    # editable install (the tests') and not from the wheel (the users')
    tree = {"memtop": ROOT / "memtop", "memtop/collectors": ROOT / "collectors", "memtop/tui": ROOT / "tui"}
    sources = {f"{top}/{p.relative_to(d).as_posix()}" for top, d in tree.items() for p in d.rglob("*.py")}
    assert sources - set(names) == set()
