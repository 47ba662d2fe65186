"""The least a Textual app costs that does nvitop's job at its simplest (issue #39's floor): the
NVML library loaded and initialised as nvitop and memtop do, and one Static with a line per GPU.

usage: python bench/textual_floor.py {still,tick} [INTERVAL] [--lean] [--fake-nvml]
  still: the screen drawn once, never updated (Textual's and pynvml's resident memory, nothing else)
  tick:  every INTERVAL s (default 1) each GPU's utilisation, memory, power and clocks read through
         NVML and the Static's text replaced (nvitop's 1 Hz loop at its smallest: no processes' table)
  --lean: with the process-wide trims memtop's live view makes (ssl kept out, one malloc arena, no
         cyclic GC until the first paint, free heap pages given back 3 s in: memtop.commands.local)
  --fake-nvml: pynvml imported but its calls answered with constants (the VM has no driver)
Run it under bench/pty_bench.py beside nvitop and memtop (bench/floor_side.sh): what it costs is what
any Textual monitor pays before its own work, so memtop's RSS and 1 Hz CPU targets against nvitop
can be read against it. `q` quits.
"""

from __future__ import annotations

import gc
import sys

import pynvml

from memtop.commands.local import TRIM_AFTER_S, _lean_process, release_free_memory


def fake_nvml() -> None:
    """pynvml's module loaded (as memtop and nvitop load it) and the calls this floor makes answered
    with an H100's constants, for a machine with no driver."""
    from types import SimpleNamespace

    pynvml.nvmlInit = lambda: None
    pynvml.nvmlDeviceGetCount = lambda: 1
    pynvml.nvmlDeviceGetHandleByIndex = lambda i: i
    pynvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=97, memory=40)
    pynvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=61 << 30, total=80 << 30)
    pynvml.nvmlDeviceGetPowerUsage = lambda h: 612_000
    pynvml.nvmlDeviceGetClockInfo = lambda h, kind: 1980


def start(argv: list[str]) -> list[str]:
    """The process-wide set-up the floors share: --lean's trims, NVML started (--fake-nvml: faked);
    the other arguments returned."""
    if "--lean" in argv:
        _lean_process()
    if "--fake-nvml" in argv:
        fake_nvml()
    pynvml.nvmlInit()
    return [a for a in argv if a not in ("--lean", "--fake-nvml")]


def _reading() -> str:
    rows = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        w = pynvml.nvmlDeviceGetPowerUsage(h) / 1000
        sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        rows.append(f"GPU {i}  util {u.gpu:3d} %  mem {m.used / 2**30:6.1f} GiB  {w:5.0f}W  SM {sm} MHz")
    return "\n".join(rows)


def run(tick: float | None, lean: bool) -> None:
    from textual.app import App, ComposeResult  # (after the trims: Textual imports asyncio, asyncio ssl)
    from textual.widgets import Static

    class Floor(App):
        BINDINGS = [("q", "quit", "quit")]

        def compose(self) -> ComposeResult:
            yield Static(_reading(), id="screen")

        def on_mount(self) -> None:
            if tick:
                self.set_interval(tick, self._update)
            if lean:
                gc.enable()  # (memtop's app enables it at its first paint)
                self.set_timer(TRIM_AFTER_S, release_free_memory)

        def _update(self) -> None:
            self.query_one("#screen", Static).update(_reading())

    Floor().run()


def main(argv: list[str]) -> int:
    lean = "--lean" in argv
    if not argv or argv[0] not in ("still", "tick"):
        print(__doc__, file=sys.stderr)
        return 2
    argv = start(argv)
    run(float(argv[1]) if len(argv) > 1 else 1.0 if argv[0] == "tick" else None, lean)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
