"""What a live memtop's resident memory is made of, step by step in one process (one JSON line):
the interpreter, NVML started, a GPM sample pair per GPU, Textual imported (with and without ssl,
which memtop's TUI keeps out), and memtop's TUI and collectors imported; then what a live memtop's
release_free_memory (gc.collect, glibc's malloc_trim) gives back, and what importing psutil would
add (memtop no longer does). Each step's RSS in MiB, and at the NVML and last steps also its
anonymous and file-backed parts.

usage: python bench/rss_parts.py [--no-ssl]   (on the GPU machine; without a driver NVML's steps are null)
"""

from __future__ import annotations

import json
import sys


def rss_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as fh:
        return next(int(x.split()[1]) for x in fh if x.startswith(field + ":")) / 1024


def parts(out: dict, step: str) -> None:
    out[step + "_anon"], out[step + "_file"] = rss_mib("RssAnon"), rss_mib("RssFile")


def main() -> None:
    out: dict[str, float | None] = {"interpreter": rss_mib()}
    if "--no-ssl" in sys.argv:
        sys.modules["ssl"] = None  # type: ignore[assignment]  # as memtop's TUI commands do
    try:
        import pynvml

        pynvml.nvmlInit()
        out["nvml_init"] = rss_mib()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        for h in handles:
            pynvml.nvmlDeviceGetPowerUsage(h)
            pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        out["nvml_first_reading"] = rss_mib()
        for h in handles:
            a, b = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
            pynvml.nvmlGpmSampleGet(h, a)
            pynvml.nvmlGpmSampleGet(h, b)
        out["gpm_pair"] = rss_mib()
        parts(out, "gpm_pair")
    except Exception as e:  # no driver here: the Python side is still measured
        out["nvml_error"] = str(e)  # type: ignore[assignment]
    import textual.app  # noqa: F401

    out["textual_app"] = rss_mib()
    import memtop.collectors.host  # noqa: F401
    import memtop.collectors.nvml  # noqa: F401
    import memtop.collectors.perf  # noqa: F401
    import memtop.collectors.stacks  # noqa: F401
    import memtop.tui.app  # noqa: F401

    import memtop.commands.local  # noqa: F401
    import memtop.live.sampler  # noqa: F401

    out["memtop_modules"] = rss_mib()
    parts(out, "memtop_modules")
    memtop.commands.local.release_free_memory()
    out["released"] = rss_mib()
    parts(out, "released")
    out["ssl_loaded"] = sys.modules.get("ssl") is not None  # type: ignore[assignment]
    if "psutil" not in sys.modules:  # memtop reads /proc itself now; what psutil would add (startup3)
        try:
            import psutil  # noqa: F401

            out["psutil_would_add"] = rss_mib() - out["released"]  # type: ignore[operator]
        except ImportError:
            pass
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
