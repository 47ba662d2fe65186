"""NVML's PIDs are the host's (the driver knows no PID namespace); memtop in a container without
--pid=host sees its own. Given the host's procfs (mounted read-only, e.g. ``-v /proc:/host/proc:ro``,
found at ``$MEMTOP_HOST_PROC`` or /host/proc), a host PID maps to this namespace's through the NSpid
line of its /proc/PID/status there: the entry at this namespace's depth, checked against the local
process's start time (a sibling namespace at the same depth has its own PID N). A process in another
namespace entirely is named by its cgroup (the container, pod or Slurm job) instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import jobid, procfs

INIT_PID_NS = 0xEFFFFFFC  # the host's PID namespace's inode (the kernel's PROC_PID_INIT_INO)
HOST_PROC = Path("/host/proc")  # where node_exporter and all-smi expect the host's /proc


class PidMap:
    def __init__(self, root: Path = Path("/"), host_proc: str | None = None) -> None:
        self.local_proc = f"{root}/proc"
        outer = (
            host_proc
            or os.environ.get("MEMTOP_HOST_PROC")
            or (str(HOST_PROC) if HOST_PROC.is_dir() else None)
        )
        # this process's PIDs seen from there: more than one means a namespace below the host's
        me = procfs.nspid(outer, "self") if outer else ()
        self.host_proc = outer if len(me) > 1 else None
        self.depth = len(me) - 1  # this namespace's place in a host NSpid line
        self._cache: dict[int, tuple[int | None, int | None]] = {}  # host pid -> (its start, local pid)

    def local(self, pid: int) -> int:
        """NVML's ``pid`` as this namespace sees it; unchanged where there is nothing to map, or the
        process is not in this namespace (it then stays invisible: ``foreign`` says whose it is)."""
        if self.host_proc is None:
            return pid
        start = procfs.start_ticks(self.host_proc, pid)
        hit = self._cache.get(pid)
        if hit is None or hit[0] != start:
            if len(self._cache) > 4096:
                self._cache.clear()
            hit = (start, self._find(pid, start))
            self._cache[pid] = hit
        return hit[1] if hit[1] is not None else pid

    def outside(self, pid: int) -> bool:
        """Whether NVML's ``pid`` is a host process outside this namespace (a local process that
        happens to have the same number is not it)."""
        hit = self._cache.get(pid)
        return hit is not None and hit[0] is not None and hit[1] is None

    def _find(self, pid: int, start: int | None) -> int | None:
        chain = procfs.nspid(self.host_proc or "", pid)
        if start is None or len(chain) <= self.depth:
            return None
        mine = chain[self.depth]
        return mine if procfs.start_ticks(self.local_proc, mine) == start else None

    def foreign(self, pid: int) -> dict[str, str]:
        """The identity (jobid.parse_cgroup) of a host process outside this namespace; {} if unknown."""
        if self.host_proc is None:
            return {}
        return jobid.parse_cgroup((procfs.read(f"{self.host_proc}/{pid}/cgroup") or "")[:65536])
