"""The package's shape, read from its source: no module reaches another's private names, and the
modules of memtop import each other without a cycle (a function-level import counts: it is a cycle
deferred, not removed; `if TYPE_CHECKING:` imports do not run and do not count)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parent.parent
# the import name of each top-level source folder (pyproject's package-dir)
PACKAGES = {"memtop": "memtop", "tui": "memtop.tui", "collectors": "memtop.collectors"}


# Found when this test was written, in files other engineers are changing now; each is theirs to make
# public or move (the cluster library leaves commands/, which ends that cycle). Remove an entry when it
# goes: the test fails on an entry that no longer occurs, so the lists only shrink.
KNOWN_PRIVATE = {
    ("memtop/commands/snapshot.py", "_lock"),
    ("tui/cluster.py", "_visible"),
    ("tui/timeline.py", "_tiles"),
}
# cycles found and not yet removed, each as (a, b): a imports b and b imports a (none left: the last,
# store <-> parts, went when store's decoders moved to memtop/storage/decode.py)
KNOWN_CYCLES: set[tuple[str, str]] = set()


def _modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for folder, name in PACKAGES.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            parts = p.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((name, *parts)), p, ast.parse(p.read_text(encoding="utf-8"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _private_uses(tree: ast.Module, own: set[str], others: set[str]) -> Iterator[tuple[int, str]]:
    # modules from outside memtop (os._exit is the standard library's own public name)
    foreign = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if not a.name.startswith("memtop")
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("memtop"):
            yield from ((n.lineno, a.name) for a in n.names if _private(a.name))
        elif (
            isinstance(n, ast.Attribute)
            and _private(n.attr)
            and n.attr not in own
            and n.attr in others
            and not (isinstance(n.value, ast.Name) and n.value.id in foreign)
        ):
            yield n.lineno, n.attr  # another module's private method or attribute


def test_no_module_reaches_another_modules_private_names():
    mods = list(_modules())
    defined = {name: _defined(tree) for name, _, tree in mods}
    bad, known = [], set()
    for name, path, tree in mods:
        others = set().union(*(d for m, d in defined.items() if m != name))
        rel = str(path.relative_to(ROOT))
        for line, n in _private_uses(tree, defined[name], others):
            if (rel, n) in KNOWN_PRIVATE:
                known.add((rel, n))
            else:
                bad.append(f"{rel}:{line}: {n}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)
    assert known == KNOWN_PRIVATE, f"gone, remove from KNOWN_PRIVATE: {KNOWN_PRIVATE - known}"


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The memtop modules a module imports, wherever the import statement is, but under TYPE_CHECKING."""
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip |= {id(x) for b in n.body for x in ast.walk(b)}
    out = set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name in known}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out |= {m for a in n.names if (m := f"{n.module}.{a.name}") in known}
            out |= {n.module} & known
    return out - {name}


def test_memtop_modules_import_each_other_without_a_cycle():
    mods = {name: tree for name, _, tree in _modules()}
    graph = {name: _imports(name, tree, set(mods)) for name, tree in mods.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d) :] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for a, b in KNOWN_CYCLES:
        assert b in graph[a] and a in graph[b], f"gone, remove from KNOWN_CYCLES: {a} <-> {b}"
        graph[b] = graph[b] - {a}
    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_see_a_private_import_and_a_cycle():
    """The two checks above fail on what they forbid (else a walk that finds nothing passes)."""
    tree = ast.parse("from memtop.storage.store import _num\nimport memtop.b\nx = rec._q\n")
    assert [n for _, n in _private_uses(tree, set(), {"_q"})] == ["_num", "_q"]
    assert _imports("memtop.a", tree, {"memtop.a", "memtop.b", "memtop.storage.store"}) == {
        "memtop.b",
        "memtop.storage.store",
    }
