"""Host collector: per-core CPU, memory, NUMA, and the GPU processes with their children."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from memtop.model import Capability, CapState, HostSample, ProcSample

from . import numa

WORKER_NAMES = ("pt_data_worker",)
# NUMA counters, process placement, swap, children of non-main threads: slow-moving, and costly
NUMA_EVERY_S = 3.0


class HostCollector:
    name = "host"
    jitter = 0.0

    def __init__(self, interval: float = 0.5, root: Path = Path("/"), pids: tuple[int, ...] = ()):
        self.interval = interval
        self.root = root
        self.user_pids = tuple(pids)  # --pid: watched whether or not NVML lists them
        self.gpu_pids: dict[int, tuple[int, ...]] = {}  # from NVML via the sampler
        self.gpu_bus_ids: tuple[str, ...] = ()
        self._numa = numa.NumaReader(root)
        self._procs: dict[int, psutil.Process] = {}
        # per pid: what does not change while it lives (name, cmdline, user, start time), and its
        # placement (allowed CPUs/memory, CPUs its threads last ran on: one /proc read per thread),
        # refreshed with the NUMA counters rather than on every sample
        self._static: dict[int, tuple[str, str, str, float]] = {}
        self._placed: dict[int, tuple[str, str, tuple[int, ...], float]] = {}
        self._invisible: set[int] = set()
        self._numa_t = -1e9
        self._numa_nodes: tuple = ()
        self._swap = psutil.swap_memory()
        self._tree: dict[int, int | None] = {}  # the process tree at the last walk of every thread
        self._gpu_nodes: tuple[int, ...] = ()
        self._offset = time.time() - time.monotonic()

    def start(self) -> None:
        psutil.cpu_percent(percpu=True)
        psutil.cpu_times_percent()

    def set_gpu_processes(self, pids: dict[int, tuple[int, ...]], bus_ids: tuple[str, ...]) -> None:
        self.gpu_pids = pids
        if bus_ids != self.gpu_bus_ids:
            self.gpu_bus_ids = bus_ids
            self._gpu_nodes = tuple(numa.gpu_node(self.root, b) for b in bus_ids)

    def capabilities(self) -> tuple[Capability, ...]:
        caps = []
        nodes = self._numa_nodes
        if len(nodes) < 2:
            caps.append(Capability("numa", "layout", CapState.UNSUPPORTED,
                                   f"{len(nodes)} NUMA node(s): placement checks do not apply"))
        elif self._gpu_nodes and all(n < 0 for n in self._gpu_nodes):
            caps.append(Capability("numa", "GPU node", CapState.UNSUPPORTED,
                                   "sysfs numa_node of the GPU is -1 (unknown)",
                                   "common on VMs; placement cannot be judged"))
        else:
            caps.append(Capability("numa", "layout", CapState.AVAILABLE, f"{len(nodes)} NUMA nodes"))
        for pid in sorted(self._invisible):
            caps.append(Capability("host", f"pid {pid}", CapState.UNSUPPORTED,
                                   "NVML reports a process this PID namespace cannot see (container)",
                                   "run memtop in the host PID namespace (docker --pid=host) to see it"))
        return tuple(caps)

    def _proc(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # prime the delta
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return None
            self._procs[pid] = p
        return p

    def _targets(self, all_threads: bool) -> dict[int, int | None]:
        """pid -> parent GPU pid (None for the GPU processes themselves). Children of the main
        thread each time (DataLoader workers are forked there); of every thread when asked."""
        roots = set(self.gpu_pids) | set(self.user_pids)
        out: dict[int, int | None] = {}
        if not roots:
            return out
        self._invisible = {pid for pid in self.gpu_pids if not psutil.pid_exists(pid)}
        for r in sorted(roots - self._invisible):
            out[r] = None
            stack = self._children(r, all_threads)
            while stack:
                c = stack.pop()
                if c not in out:
                    out[c] = r
                    stack.extend(self._children(c, all_threads))
        if all_threads:
            self._tree = dict(out)
        else:  # those found through other threads at the last full walk stay until the next
            out.update((c, r) for c, r in self._tree.items() if c not in out and r in out)
        return out

    def _children(self, pid: int, all_threads: bool) -> list[int]:
        """Child pids from /proc/PID/task/*/children (cheap: no scan of all of /proc)."""
        base = self.root / f"proc/{pid}/task"
        try:
            tasks = list(base.iterdir()) if all_threads else [base / str(pid)]
        except OSError:
            return []
        kids: list[int] = []
        for t in tasks:
            try:
                kids += [int(x) for x in (t / "children").read_text().split()]
            except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: one full scan
                return [p.pid for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == pid]
            except (OSError, ValueError):
                continue
        return kids

    def _proc_sample(self, pid: int, parent: int | None, nodes: tuple, now: float) -> ProcSample | None:
        p = self._proc(pid)
        if p is None:
            return None
        try:
            with p.oneshot():
                cpu = p.cpu_percent(None)
                status = p.status()
                threads = p.num_threads()
                ppid = p.ppid()
                static = self._static.get(pid) or self._static_of(p)
        except psutil.NoSuchProcess:
            self._procs.pop(pid, None)
            return None
        except psutil.AccessDenied:
            return None
        self._static[pid] = static
        name, cmd, user, started = static
        placed = self._placed.get(pid)
        if placed is None or now - placed[3] >= NUMA_EVERY_S:
            placed = (*numa.proc_allowed(self.root, pid), numa.last_cpus(self.root, pid), now)
            self._placed[pid] = placed
        cpus_allowed, mems_allowed, used, _ = placed
        gpus = self.gpu_pids.get(pid, ())
        owner = gpus if gpus else self.gpu_pids.get(parent or -1, ())
        gnode = self._gpu_nodes[owner[0]] if owner and owner[0] < len(self._gpu_nodes) else -1
        return ProcSample(pid, ppid, name, cmd, user, cpu, threads, _STATE.get(status, "?"),
                          cpus_allowed, mems_allowed, used, gpus, parent,
                          numa.placement(gnode, nodes, used), started)

    def _static_of(self, p: psutil.Process) -> tuple[str, str, str, float]:
        name = p.name()
        try:
            user = p.username()
        except (KeyError, psutil.Error):
            user = "?"
        try:
            cmd = " ".join(p.cmdline())
        except psutil.AccessDenied:
            cmd = name
        return name, cmd[:500], user, p.create_time() - self._offset

    def sample(self, now: float) -> list[object]:
        percore = tuple(psutil.cpu_percent(percpu=True))
        times = psutil.cpu_times_percent()
        vm = psutil.virtual_memory()
        slow = now - self._numa_t >= NUMA_EVERY_S
        if slow:
            self._numa_t = now
            self._numa_nodes = self._numa.read(now)
            self._swap = psutil.swap_memory()  # parses /proc/vmstat too: slow-moving, not each sample
        sw = self._swap
        targets = self._targets(all_threads=slow)
        for gone in set(self._procs) - set(targets):
            del self._procs[gone]
        for cache in (self._static, self._placed):
            for gone in set(cache) - set(targets):
                del cache[gone]
        procs = tuple(ps for pid, parent in targets.items()
                      if (ps := self._proc_sample(pid, parent, self._numa_nodes, now)) is not None)
        return [HostSample(
            t=now, cpu_pct=percore, iowait_pct=getattr(times, "iowait", 0.0),
            load=os.getloadavg(), mem_used=vm.total - vm.available, mem_total=vm.total,
            swap_used=sw.used, swap_total=sw.total, numa=self._numa_nodes,
            gpu_nodes=self._gpu_nodes, procs=procs,
        )]

    def stop(self) -> None:
        self._procs.clear()


_STATE = {
    psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T", psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_IDLE: "I",
    psutil.STATUS_TRACING_STOP: "t", psutil.STATUS_DEAD: "X",
}
