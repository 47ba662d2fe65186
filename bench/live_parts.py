"""Where a running Textual monitor's Python memory is, by structure (issue #39, RSS): run a command
in this process (memtop on the recorded H100 NVML replies, or a floor script) and at AT s write one
JSON line to OUT: RSS, the live objects by type (the 25 most numerous, with sys.getsizeof sums), the
widgets by class, Textual's caches (count, entries, capacity), threads, and the modules loaded by
package with their source lines. No tracemalloc (it doubles what it measures): run it beside
bench/pty_bench.py for RSS, and diff two runs (memtop and a floor) to see what memtop adds.
--calls: also, per memtop module loaded, its source lines and the lines of its functions that never
ran (a profile hook records the calls: slower, so not for RSS figures).

usage: python bench/pty_bench.py 14 200x50 4 -- python bench/live_parts.py OUT AT [--calls] memtop -- [memtop arguments]
       python bench/pty_bench.py 14 200x50 4 -- python bench/live_parts.py OUT AT script FILE [ARGS]
"""

from __future__ import annotations

import gc
import json
import runpy
import sys
import threading
import time
from collections import Counter


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        return next(int(x.split()[1]) for x in fh if x.startswith("VmRSS:")) / 1024


def _source_lines(modules: list[str]) -> dict[str, list[int]]:
    """Per top-level package (memtop's by subpackage): [modules, source lines]."""
    out: dict[str, list[int]] = {}
    for name in modules:
        path = getattr(sys.modules.get(name), "__file__", None) or ""
        if not path.endswith(".py"):
            continue
        key = ".".join(name.split(".")[:2]) if name.startswith("memtop.") else name.split(".")[0]
        with open(path, "rb") as fh:
            row = out.setdefault(key, [0, 0])
            row[0] += 1
            row[1] += fh.read().count(b"\n")
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1])[:30])


def _caches(objs: list[object]) -> dict[str, list[int]]:
    """Textual's FIFOCache/LRUCache: [instances, entries, capacity]."""
    from textual.cache import FIFOCache, LRUCache

    out: dict[str, list[int]] = {}
    for o in objs:
        if isinstance(o, FIFOCache | LRUCache):
            row = out.setdefault(type(o).__name__, [0, 0, 0])
            row[0] += 1
            row[1] += len(o)
            row[2] += o._maxsize
    return out


def _screen(objs: list[object]) -> dict[str, object]:
    """What memtop's panels show (their Strips as styled segments) and the footer's keys, for
    bench/widget_floor.py to draw the same screen with no memtop logic behind it."""
    from textual.app import App

    try:
        from memtop.tui.tiles import TiledLines
    except ImportError:
        return {}
    app = next((o for o in objs if isinstance(o, App)), None)
    if app is None:
        return {}
    panels = {}
    for w in app.screen.walk_children():
        if isinstance(w, TiledLines) and w.id:
            panels[w.id] = {
                "class": type(w).__name__,
                "plan": w._plan,
                "lines": [[(seg.text, str(seg.style or "")) for seg in strip] for strip in w._lines],
            }
    from textual.widgets._footer import FooterKey

    keys = [(k.key, k.description) for k in app.screen.walk_children(FooterKey)]
    return {"panels": panels, "footer": keys}


def _deep(obj: object, seen: set[int]) -> int:
    """Bytes of obj and what it holds (each object once across calls sharing ``seen``; classes,
    modules and functions are not followed)."""
    stack, size = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type | type(sys) | type(_deep)):
            continue
        seen.add(id(o))
        size += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset) or type(o).__name__ == "deque":
            stack.extend(o)
        else:
            stack.extend(getattr(o, "__dict__", {}).values())
            stack.extend(getattr(o, s) for s in getattr(type(o), "__slots__", ()) if hasattr(o, s))
    return size


def _pipeline(objs: list[object]) -> dict[str, object]:
    """The live pipeline's kept structures, KiB each (and how many entries): the history grows
    for HISTORY_S, so these are read again late in a run to get a per-second rate."""
    try:
        from memtop.live.pipeline import Pipeline
    except ImportError:
        return {}
    pipe = next((o for o in objs if isinstance(o, Pipeline)), None)
    if pipe is None:
        return {}
    seen: set[int] = set()
    out: dict[str, object] = {}
    for name in ("_kept", "history", "classifier", "jobshare", "trail", "events", "health", "_trackers"):
        value = getattr(pipe, name, None)
        if value is not None:
            n = len(value) if hasattr(value, "__len__") else None
            out[name] = [_deep(value, seen) >> 10, n]
    return out


CALLED: set[object] = set()  # code objects of memtop's that ran (--calls)


def _profile(frame, event, arg):  # noqa: ANN001, ANN202  (sys.setprofile's hook)
    if event == "call":
        CALLED.add(frame.f_code)


def _unrun(modules: list[str]) -> dict[str, list[int]]:
    """Per memtop module loaded: [source lines, lines of its functions that never ran] (--calls)."""
    import inspect

    out: dict[str, list[int]] = {}
    for name in modules:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None) or ""
        if not name.startswith("memtop") or not path.endswith(".py"):
            continue
        with open(path, "rb") as fh:
            lines = fh.read().count(b"\n")
        idle = 0
        seen: set[object] = set()
        for obj in vars(mod).values():
            funcs = [obj] if inspect.isfunction(obj) else []
            if inspect.isclass(obj) and obj.__module__ == name:
                funcs = [f for f in vars(obj).values() if inspect.isfunction(f)]
            for f in funcs:
                code = f.__code__
                if code in seen or code.co_filename != path:
                    continue
                seen.add(code)
                if code not in CALLED:
                    idle += len({ln for _, _, ln in code.co_lines() if ln is not None})
        out[name] = [lines, idle]
    return dict(sorted(out.items(), key=lambda kv: -kv[1][1]))


def report(out: str, at: float) -> None:
    time.sleep(at)
    gc.collect()
    objs = gc.get_objects()
    from textual.widget import Widget

    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    widgets: Counter[str] = Counter()
    for o in objs:
        t = type(o)
        name = f"{t.__module__}.{t.__qualname__}"
        count[name] += 1
        size[name] += sys.getsizeof(o)
        if isinstance(o, Widget):
            widgets[name] += 1
    with open(out, "w") as fh:
        json.dump(
            {
                "at_s": at,
                "rss_mib": round(_rss_mib(), 1),
                "gc_objects": len(objs),
                "types": {k: [n, size[k] >> 10] for k, n in count.most_common(25)},
                "widgets": dict(widgets.most_common()),
                "widget_count": sum(widgets.values()),
                "caches": _caches(objs),
                "threads": [t.name for t in threading.enumerate()],
                "module_count": len(sys.modules),
                "source_lines": _source_lines(sorted(sys.modules)),
                "screen": _screen(objs),
                "pipeline_kib": _pipeline(objs),
                **({"memtop_unrun_lines": _unrun(sorted(sys.modules))} if CALLED else {}),
            },
            fh,
        )
        fh.write("\n")


def _report_or_error(out: str, at: float) -> None:
    """The TUI owns stderr: a failure is written to OUT instead."""
    try:
        report(out, at)
    except Exception:  # noqa: BLE001
        import traceback

        with open(out, "w") as fh:
            fh.write(traceback.format_exc())


def main() -> None:
    out, at, kind, *rest = sys.argv[1:]
    if kind == "--calls":  # which of memtop's functions run (slows it: not for RSS figures)
        kind, *rest = rest
        sys.setprofile(_profile)
        threading.setprofile(_profile)
    threading.Thread(target=_report_or_error, args=(out, float(at)), daemon=True, name="live_parts").start()
    if kind == "memtop":
        sys.argv = ["fake_nvml.py", *rest]
        import fake_nvml

        fake_nvml.main()
    else:
        sys.argv = rest
        runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()
