"""NUMA layout from sysfs/procfs, the GPU's node, and a placement verdict per process.

Every function takes the filesystem root so tests run on synthetic trees (two nodes, GPU
on node 1) while the real machines here have one node and a GPU numa_node of -1.
"""

from __future__ import annotations

import re
from pathlib import Path

from memtop.core.model import NumaNode

from .procfs import read, tasks

NUMASTAT_KEYS = ("numa_hit", "numa_miss", "numa_foreign", "other_node")


def parse_cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        else:
            cpus.add(int(part))
    return cpus


def node_ids(root: Path) -> list[int]:
    base = root / "sys/devices/system/node"
    try:
        names = [p.name for p in base.iterdir()]
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names if re.fullmatch(r"node\d+", n))


def read_node(root: Path, n: int) -> tuple[str, int, int, dict[str, int]]:
    """cpulist, MemTotal and MemFree in bytes, raw numastat counters."""
    d = root / f"sys/devices/system/node/node{n}"
    cpus = (read(d / "cpulist") or "").strip()
    total = free = 0
    for line in (read(d / "meminfo") or "").splitlines():
        m = re.match(r"Node \d+ (MemTotal|MemFree):\s+(\d+) kB", line)
        if m:
            if m.group(1) == "MemTotal":
                total = int(m.group(2)) * 1024
            else:
                free = int(m.group(2)) * 1024
    stat = {}
    for line in (read(d / "numastat") or "").splitlines():
        k, _, v = line.partition(" ")
        if k in NUMASTAT_KEYS:
            stat[k] = int(v)
    return cpus, total, free, stat


class NumaReader:
    """Node list with numastat rates from the deltas between calls."""

    def __init__(self, root: Path = Path("/")):
        self.root = root
        self._prev: dict[int, tuple[float, dict[str, int]]] = {}

    def read(self, now: float) -> tuple[NumaNode, ...]:
        nodes = []
        for n in node_ids(self.root):
            cpus, total, free, stat = read_node(self.root, n)
            rates = dict.fromkeys(NUMASTAT_KEYS, 0.0)
            prev = self._prev.get(n)
            if prev and now > prev[0]:
                dt = now - prev[0]
                rates = {k: max(0, stat.get(k, 0) - prev[1].get(k, 0)) / dt for k in NUMASTAT_KEYS}
            self._prev[n] = (now, stat)
            nodes.append(
                NumaNode(
                    n,
                    cpus,
                    total,
                    free,
                    rates["numa_hit"],
                    rates["numa_miss"],
                    rates["numa_foreign"],
                    rates["other_node"],
                )
            )
        return tuple(nodes)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML bus ids carry an 8-hex-digit domain ("00000000:1A:00.0"); sysfs uses 4, lowercase."""
    dom, _, rest = nvml_bus_id.strip().partition(":")
    return f"{int(dom, 16):04x}:{rest.lower()}"


def gpu_node(root: Path, nvml_bus_id: str) -> int:
    """The GPU's NUMA node from sysfs; -1 when unknown (as on VMs)."""
    text = read(root / "sys/bus/pci/devices" / sysfs_bus_id(nvml_bus_id) / "numa_node")
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


def proc_allowed(root: Path, pid: int) -> tuple[str, str]:
    """Cpus_allowed_list and Mems_allowed_list from /proc/PID/status."""
    cpus = mems = ""
    for line in (read(root / f"proc/{pid}/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus = line.split(":", 1)[1].strip()
        elif line.startswith("Mems_allowed_list:"):
            mems = line.split(":", 1)[1].strip()
    return cpus, mems


def last_cpus(root: Path, pid: int) -> tuple[int, ...]:
    """CPUs the process's threads last ran on (field 39 of each task's stat)."""
    out = set()
    for t in tasks(root, pid):
        text = read(f"{root}/proc/{pid}/task/{t}/stat")
        if not text:
            continue
        # comm may hold spaces and parentheses: split after the last ')'
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 36:
            out.add(int(fields[36]))  # field 39 overall; 3 fields precede this slice
    return tuple(sorted(out))


def placement(gpu_node_id: int, nodes: tuple[NumaNode, ...], cpus_used: tuple[int, ...]) -> str:
    """local / remote / split relative to the GPU's node; n/a with one node or unknown node."""
    if len(nodes) < 2 or gpu_node_id < 0 or not cpus_used:
        return "n/a"
    node_of = {c: nd.node for nd in nodes for c in parse_cpulist(nd.cpus)}
    used = {node_of[c] for c in cpus_used if c in node_of}
    if not used:
        return "n/a"
    if used == {gpu_node_id}:
        return "local"
    return "remote" if gpu_node_id not in used else "split"
