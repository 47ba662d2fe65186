"""Where a live memtop's start-up goes, event by event: one JSON line appended to LOG per start.

Each event: [name, ms since this script started, thread, main thread's CPU ms, process CPU ms].
Events: memtop's modules imported, the start-up thread, nvmlInit's begin and end, the pipeline's
first GPU frame, the TUI imported, compose, on_mount, the first three large writes to the terminal
(the first paint), and the garbage collector's passes so far. Python threads share the GIL before
the first paint, so the process CPU at the first write is what delays it. It wraps memtop's own
functions only; run it in a pty (bench/pty_bench.py), on the GPU machine, or with --fake for
bench/fake_nvml.py's recorded H100 replies:

  python bench/pty_bench.py 0.2 200x50 1.5 --until '[0-9]W' -- python -P bench/startup_trace.py LOG -- --no-mouse
"""

from __future__ import annotations

import functools
import gc
import importlib
import json
import sys
import threading
import time

T0 = time.monotonic()
MAIN = threading.main_thread().ident or 0
events: list[list] = []
seen: set[str] = set()
collections = [0, 0, 0]


def mark(name: str, once: bool = True) -> None:
    if once and name in seen:
        return
    seen.add(name)
    main_cpu = time.clock_gettime(time.pthread_getcpuclockid(MAIN))
    now_ms = (time.monotonic() - T0) * 1000
    events.append(
        [
            name,
            round(now_ms, 1),
            threading.current_thread().name,
            round(main_cpu * 1000, 1),
            round(time.process_time() * 1000, 1),
        ]
    )


def _gc(phase: str, info: dict) -> None:
    if phase == "stop":
        collections[info["generation"]] += 1


class _Tee:
    """The terminal (stderr, where Textual writes): marks the first three large writes."""

    def __init__(self, f) -> None:
        self._f, self.n = f, 0

    def write(self, s: str) -> int:
        if self.n < 3 and len(s) > 100:
            self.n += 1
            mark(f"write{self.n}")
            if self.n == 1:
                events.append(["gc passes (gen 0, 1, 2)", list(collections)])
        return self._f.write(s)

    def __getattr__(self, a: str):
        return getattr(self._f, a)


def _wrap(owner: type, name: str, event: str) -> None:
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapped(*a, **kw):
        mark(event)
        return orig(*a, **kw)

    setattr(owner, name, wrapped)


def _hook_pipeline() -> None:
    """Marks the first GPU frame; before the sampler takes the bound method (at start or attach)."""
    pipeline = sys.modules.get("memtop.live.pipeline")
    if pipeline is None or "hooked" in seen:
        return
    seen.add("hooked")
    frame = pipeline.Pipeline.on_frame

    def on_frame(self, f, tick=True):
        if f.gpus:
            mark("first GPU frame")
        return frame(self, f, tick)

    pipeline.Pipeline.on_frame = on_frame


def _instrument(local) -> None:
    from memtop.collectors import nvml_calls

    init = nvml_calls.RealNvml.init

    def traced_init(self):
        mark("nvmlInit begins")
        try:
            return init(self)
        finally:
            mark("nvmlInit ends")

    nvml_calls.RealNvml.init = traced_init
    controller = local.LiveController
    for meth in ("start", "attach"):
        if hasattr(controller, meth):  # attach: live starts NVML before the pipeline exists (startup3)
            orig = getattr(controller, meth)

            def hooked(self, *a, _orig=orig, _meth=meth):
                _hook_pipeline()
                mark("start-up thread starts" if _meth == "start" else "pipeline attached")
                return _orig(self, *a)

            setattr(controller, meth, hooked)
    run_app = local._run_app

    def traced_run_app(pipeline, controller, args):
        mark("app built")
        import memtop.tui.app as tui

        mark("TUI imported")
        for meth in ("compose", "on_mount"):
            _wrap(tui.MemtopApp, meth, meth)
        return run_app(pipeline, controller, args)

    local._run_app = traced_run_app


def main() -> None:
    log = sys.argv[1]
    rest = sys.argv[sys.argv.index("--") + 1 :]
    gc.callbacks.append(_gc)
    sys.__stderr__ = _Tee(sys.__stderr__)  # type: ignore[misc]
    if "--fake" in sys.argv[: sys.argv.index("--")]:
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
        import fake_nvml

        fake_nvml.install(0.2)
    import memtop.cli

    mark("cli imported")
    local = importlib.import_module("memtop.commands.local")
    mark("commands imported")
    _instrument(local)
    try:
        sys.exit(memtop.cli.main(rest))
    finally:
        with open(log, "a") as fh:
            fh.write(json.dumps(events) + "\n")


if __name__ == "__main__":
    main()
