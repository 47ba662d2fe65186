"""`memtop doctor`: what this machine can give, and for each "no" the fix. Exit 1 when a capability
memtop cannot run without (a driver, a GPU) is missing, so scripts can gate on it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from memtop import __version__
from memtop.collectors import numa, perf, procfs, stacks
from memtop.collectors.nvml import NvmlCollector, pcie_link
from memtop.collectors.nvml_calls import NvmlCallError
from memtop.collectors.pidns import INIT_PID_NS, PidMap

REQUIRED = frozenset({"NVIDIA driver", "GPUs"})  # without these there is nothing to monitor


@dataclass(frozen=True)
class Row:
    check: str
    ok: bool | None  # None: information, neither good nor bad
    detail: str
    fix: str = ""

    @property
    def required(self) -> bool:
        return self.check in REQUIRED

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "required": self.required}


def gpu_rows(nv=None) -> list[Row]:
    col = NvmlCollector(nv)
    col.start()
    rows = []
    drv = col.caps[0] if col.caps else None
    if drv is None or not drv.ok:
        return [Row("NVIDIA driver", False, drv.detail if drv else "unknown", drv.fix if drv else "")]
    rows.append(Row("NVIDIA driver", True, drv.detail))
    rows.append(
        Row(
            "GPUs",
            bool(col.readers),
            f"{len(col.readers)}: " + ", ".join(sorted({r.info["name"] for r in col.readers}))
            if col.readers
            else "none",
        )
    )
    for r in col.readers:
        g = f"GPU {r.index}"
        rows.append(
            Row(
                f"{g} GPM",
                r.gpm,
                "supported (10 Hz SM/tensor/DRAM/PCIe)" if r.gpm else r.gpm_reason,
                "" if r.gpm else "memtop falls back to NVML util + PCIe throughput (lower confidence)",
            )
        )
        try:
            n = len(col.nv.samples(r.index, "power_w", 0))
            rows.append(Row(f"{g} sample buffers", n > 0, f"{n} power samples buffered by the driver"))
        except NvmlCallError as e:
            rows.append(
                Row(f"{g} sample buffers", False, e.message, "util/power history falls back to polling")
            )
        try:
            link = pcie_link(col.nv.link(r.index))
            down = link.downtrained
            rows.append(
                Row(
                    f"{g} PCIe link",
                    not down,
                    f"{link.text} (max {link.max_text}), {link.bytes_per_s / 1e9:.1f} GB/s per direction"
                    + (" — DOWN-TRAINED" if down else ""),
                    "reseat the card or check the slot/riser; idle GPUs may drop the link gen to save power"
                    if down
                    else "",
                )
            )
        except NvmlCallError as e:
            rows.append(Row(f"{g} PCIe link", None, e.message))
    col.stop()
    return rows


def pyspy_rows() -> list[Row]:
    exe = stacks.find_pyspy()
    if exe is None:
        return [Row("py-spy", False, "not found", "pip install py-spy")]
    rows = [Row("py-spy", True, exe)]
    scope = stacks.ptrace_scope()
    rows.append(
        Row(
            "ptrace scope",
            scope in (None, 0, 1),
            "no Yama LSM" if scope is None else f"kernel.yama.ptrace_scope={scope}",
            "" if scope in (None, 0, 1) else "sysctl kernel.yama.ptrace_scope=1 (or run as root)",
        )
    )
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        time.sleep(0.3)
        p = subprocess.run(
            [exe, "dump", "--json", "--nonblocking", "--pid", str(child.pid)],
            capture_output=True,
            text=True,
            timeout=10,
            env={"RUST_BACKTRACE": "0", "PATH": os.environ.get("PATH", "")},
        )
        if p.returncode == 0:
            rows.append(Row("py-spy attach", True, "can read a same-user Python process"))
        else:
            _, reason, fix = stacks.explain_error(p.stderr, child.pid)
            rows.append(Row("py-spy attach", False, reason, fix))
    except subprocess.TimeoutExpired:
        rows.append(Row("py-spy attach", False, "py-spy hung"))
    finally:
        child.kill()
        child.wait()
    return rows


def perf_rows() -> list[Row]:
    level = perf.paranoid()
    rows = [
        Row(
            "perf_event_paranoid",
            level is not None and level <= 2,
            str(level),
            "" if level is not None and level <= 2 else "sysctl kernel.perf_event_paranoid=2",
        )
    ]
    try:
        libc = perf.Libc()
    except OSError as e:
        return rows + [Row("perf_event_open", False, str(e))]
    for label, events in (("software counters", perf.SOFTWARE), ("hardware counters (PMU)", perf.HARDWARE)):
        try:  # the whole group the live view opens: one event can open where the group cannot
            g = perf.EventGroup(libc, 0, events)
            g.close()
            rows.append(Row(label, True, "readable for own processes"))
        except OSError as e:
            _, reason, fix = perf.explain(e, events is perf.HARDWARE)
            rows.append(Row(label, False, reason, fix))
    return rows


def host_rows(root: Path = Path("/")) -> list[Row]:
    ids = numa.node_ids(root)
    rows = [
        Row(
            "NUMA layout",
            None,
            f"{len(ids)} node(s)" + (": placement checks do not apply" if len(ids) < 2 else ""),
        )
    ]
    container = any(Path(p).exists() for p in ("/.dockerenv", "/run/.containerenv"))
    with contextlib.suppress(OSError):
        cg = Path("/proc/1/cgroup").read_text()
        container = container or any(k in cg for k in ("docker", "kubepods", "containerd", "libpod"))
    levels = len(procfs.nspid("/proc", "self"))  # the PID namespaces this process is in
    # a container's own procfs shows one NSpid entry: the namespace's inode tells (the host's is fixed)
    with contextlib.suppress(OSError):
        levels += os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NS
    nested = levels > 1
    mapped = PidMap().host_proc
    rows.append(
        Row(
            "container / PID namespace",
            not nested or mapped is not None,
            ("in a container; " if container else "not in a container; ")
            + (
                "host PID namespace"
                if not nested
                else f"own PID namespace: NVML's host PIDs are mapped through {mapped}"
                if mapped
                else "own PID namespace: NVML may report host PIDs memtop cannot see"
            ),
            "mount the host's /proc read-only (-v /proc:/host/proc:ro), or run with --pid=host (docker) or "
            "hostPID: true (Kubernetes), to see training processes"
            if nested and not mapped
            else "",
        )
    )
    return rows


def collect() -> list[Row]:
    return [
        Row("memtop", True, f"{__version__} on Python {sys.version.split()[0]}"),
        *gpu_rows(),
        *pyspy_rows(),
        *perf_rows(),
        *host_rows(),
    ]


def exit_code(rows: list[Row]) -> int:
    return 1 if any(r.required and r.ok is False for r in rows) else 0


def doctor(as_json: bool = False) -> int:
    rows = collect()
    if as_json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
        return exit_code(rows)
    w = max(len(r.check) for r in rows)
    for r in rows:
        mark = {True: "yes", False: "NO ", None: " - "}[r.ok]
        print(f"{mark}  {r.check:<{w}}  {r.detail}")
        if r.fix and r.ok is False:
            print(f"{'':5}{'':<{w}}  fix: {r.fix}")
    if exit_code(rows):
        print("memtop cannot monitor a GPU here (exit 1); `memtop --demo` shows a recording")
    return exit_code(rows)


def run(args: argparse.Namespace) -> int:
    return doctor(as_json=args.json)
