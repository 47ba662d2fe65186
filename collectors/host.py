"""Host collector: per-core CPU, memory, NUMA, and the GPU processes with their children (all from
/proc and /sys: procfs.py)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from memtop.core.model import Capability, CapState, HostSample, ProcJob, ProcSample
from memtop.core.sanitize import clean

from . import jobid, numa, procfs
from .pidns import PidMap

WORKER_NAMES = ("pt_data_worker",)  # memtop.analysis.phases.DATA_WORKER_NAMES says the same
# NUMA counters, process placement, swap, children of non-main threads: slow-moving, and costly
NUMA_EVERY_S = 3.0


class HostCollector:
    name = "host"
    jitter = 0.0

    def __init__(
        self,
        interval: float = 0.5,
        root: Path = Path("/"),
        pids: tuple[int, ...] = (),
        pid_map: PidMap | None = None,
    ):
        self.interval = interval
        self.pid_map = pid_map  # says whose a process outside this PID namespace is
        self.root = root
        self.user_pids = tuple(pids)  # --pid: watched whether or not NVML lists them
        self.gpu_pids: dict[int, tuple[int, ...]] = {}  # from NVML via the sampler
        self.gpu_bus_ids: tuple[str, ...] = ()
        self._numa = numa.NumaReader(root)
        self._cpu = procfs.CpuTimes(root)
        self._cpu_used: dict[int, tuple[int, float, float]] = {}  # pid -> (start ticks, at, CPU s used)
        self._main_used: dict[int, tuple[float, float]] = {}  # GPU pid -> its main thread's (at, CPU s used)
        # per pid: what does not change while it lives (name, cmdline, user, start time), and its
        # placement (allowed CPUs/memory, CPUs its threads last ran on: one /proc read per thread),
        # refreshed with the NUMA counters rather than on every sample
        self._static: dict[int, tuple[str, str, str, float, tuple[str, ...]]] = {}
        self._placed: dict[int, tuple[str, str, tuple[int, ...], float]] = {}
        self._invisible: set[int] = set()
        self._numa_t = -1e9
        self._numa_nodes: tuple = ()
        self._jobs: dict[tuple[int, float], ProcJob] = {}  # (pid, start) -> its cgroup's identity
        self.jobs: tuple[ProcJob, ...] = ()  # those that have one, by pid
        self._swap = procfs.swap(root)
        self._tree: dict[int, int | None] = {}  # the process tree at the last walk of every thread
        self._gpu_nodes: tuple[int, ...] = ()
        self._offset = time.time() - time.monotonic()

    def start(self) -> None:
        self._cpu.sample()

    def set_gpu_processes(self, pids: dict[int, tuple[int, ...]], bus_ids: tuple[str, ...]) -> None:
        self.gpu_pids = pids
        if bus_ids != self.gpu_bus_ids:
            self.gpu_bus_ids = bus_ids
            self._gpu_nodes = tuple(numa.gpu_node(self.root, b) for b in bus_ids)

    def capabilities(self) -> tuple[Capability, ...]:
        caps = []
        nodes = self._numa_nodes
        if len(nodes) < 2:
            caps.append(
                Capability(
                    "numa",
                    "layout",
                    CapState.UNSUPPORTED,
                    f"{len(nodes)} NUMA node(s): placement checks do not apply",
                )
            )
        elif self._gpu_nodes and all(n < 0 for n in self._gpu_nodes):
            caps.append(
                Capability(
                    "numa",
                    "GPU node",
                    CapState.UNSUPPORTED,
                    "sysfs numa_node of the GPU is -1 (unknown)",
                    "common on VMs; placement cannot be judged",
                )
            )
        else:
            caps.append(Capability("numa", "layout", CapState.AVAILABLE, f"{len(nodes)} NUMA nodes"))
        for pid in sorted(self._invisible):
            caps.append(self._invisible_cap(pid))
        return tuple(caps)

    def _invisible_cap(self, pid: int) -> Capability:
        """What memtop can say of a GPU process outside its PID namespace: whose it is, where the
        host's /proc is mounted (pidns.PidMap), else how to see it."""
        pm = self.pid_map
        if pm is not None and pm.host_proc is not None:
            job = pm.foreign(pid)
            whose = ", ".join(f"{k} {v}" for k, v in sorted(job.items())) or "no container its cgroup names"
            return Capability(
                "host",
                f"pid {pid}",
                CapState.UNSUPPORTED,
                f"a GPU process of another PID namespace ({clean(whose, 160)})",
                "run memtop in that container, or in the host PID namespace, to see its stacks",
            )
        return Capability(
            "host",
            f"pid {pid}",
            CapState.UNSUPPORTED,
            "NVML reports a process this PID namespace cannot see (container)",
            "mount the host's /proc read-only (-v /proc:/host/proc:ro) to map its PID, or run memtop in "
            "the host PID namespace (docker --pid=host, hostPID: true)",
        )

    def _targets(self, all_threads: bool) -> dict[int, int | None]:
        """pid -> parent GPU pid (None for the GPU processes themselves). Children of the main
        thread each time (DataLoader workers are forked there); of every thread when asked."""
        roots = set(self.gpu_pids) | set(self.user_pids)
        out: dict[int, int | None] = {}
        if not roots:
            return out
        if all_threads:  # NVML's pids change rarely; a container hides the host's (/proc lacks them)
            pm = self.pid_map
            self._invisible = {
                pid
                for pid in self.gpu_pids
                if not os.path.exists(f"{self.root}/proc/{pid}") or (pm is not None and pm.outside(pid))
            }
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
        base = f"{self.root}/proc/{pid}/task"
        tasks = procfs.tasks(self.root, pid) if all_threads else [str(pid)]
        kids: list[int] = []
        for t in tasks:
            text = procfs.read(f"{base}/{t}/children")
            if text is None:
                if not os.path.exists(f"{base}/{t}"):
                    continue  # the thread (or process) has just exited
                # kernel without CONFIG_PROC_CHILDREN: one full scan
                return [
                    int(d)
                    for d in os.listdir(f"{self.root}/proc")
                    if d.isdigit() and (st := procfs.proc_stat(self.root, int(d))) and st[1] == pid
                ]
            kids += [int(x) for x in text.split()]
        return kids

    def _proc_sample(self, pid: int, parent: int | None, nodes: tuple, now: float) -> ProcSample | None:
        st = procfs.proc_stat(self.root, pid)
        if st is None:
            return None
        state, ppid, used_s, threads, start = st
        prev = self._cpu_used.get(pid)
        if prev is None or prev[0] != start:  # new, or the pid was reused: forget what was known
            self._static.pop(pid, None)
            self._placed.pop(pid, None)
            prev = (start, now, used_s)
        cpu = 100.0 * (used_s - prev[2]) / (now - prev[1]) if now > prev[1] else 0.0
        self._cpu_used[pid] = (start, now, used_s)
        static = self._static.get(pid)
        if static is None:
            static = self._static_of(pid, state, start)
            if static is None:
                return None
            self._static[pid] = static
        name, cmd, user, started, argv = static
        if parent is not None and name not in WORKER_NAMES:
            # torch names a DataLoader worker once its loop starts, maybe after we first saw it;
            # the phase classifier counts only workers so named (other children are just shown)
            comm = (procfs.read(f"{self.root}/proc/{pid}/comm") or "").strip()
            if comm in WORKER_NAMES:
                name = comm
                self._static[pid] = (name, cmd, user, started, argv)
        placed = self._placed.get(pid)
        if placed is None or now - placed[3] >= NUMA_EVERY_S:
            placed = (*numa.proc_allowed(self.root, pid), numa.last_cpus(self.root, pid), now)
            self._placed[pid] = placed
        cpus_allowed, mems_allowed, used, _ = placed
        gpus = self.gpu_pids.get(pid, ())
        owner = gpus if gpus else self.gpu_pids.get(parent or -1, ())
        gnode = self._gpu_nodes[owner[0]] if owner and owner[0] < len(self._gpu_nodes) else -1
        return ProcSample(
            pid,
            ppid,
            name,
            cmd,
            user,
            max(0.0, cpu),
            threads,
            state,
            cpus_allowed,
            mems_allowed,
            used,
            gpus,
            parent,
            numa.placement(gnode, nodes, used),
            started,
            argv,
        )

    def _static_of(
        self, pid: int, state: str, start: int
    ) -> tuple[str, str, str, float, tuple[str, ...]] | None:
        """Name, command line, user and start time, as psutil.Process gave them: the kernel's name,
        or argv[0]'s file name where that begins with a name the kernel cut at 15 characters; None
        once the process is gone (or a zombie without arguments)."""
        name = procfs.comm(self.root, pid)
        if name is None:
            return None
        args = procfs.cmdline(self.root, pid)
        if args is None:  # unreadable: gone, or not ours to read
            if not os.path.exists(f"{self.root}/proc/{pid}"):
                return None
            args = [name]
        elif not args and state == "Z":
            return None
        if len(name) >= 15 and args and os.path.basename(args[0]).startswith(name):
            name = os.path.basename(args[0])
        user = procfs.user(self.root, pid) or "?"
        argv = tuple(a[:1000] for a in args[:200])  # /proc/PID/cmdline split on NUL, bounded
        started = start / procfs.TICK + procfs.boot_time(self.root) - self._offset
        return name, " ".join(argv)[:500], user, started, argv

    def sample(self, now: float) -> list[object]:
        percore, iowait = self._cpu.sample()
        mem_total, mem_avail = procfs.meminfo(self.root)
        slow = now - self._numa_t >= NUMA_EVERY_S
        if slow:
            self._numa_t = now
            self._numa_nodes = self._numa.read(now)
            self._swap = procfs.swap(self.root)  # slow-moving: not each sample
        swap_used, swap_total = self._swap
        targets = self._targets(all_threads=slow)
        for cache in (self._cpu_used, self._static, self._placed):
            for gone in set(cache) - set(targets):
                del cache[gone]
        for gone in set(self._main_used) - set(targets):
            del self._main_used[gone]
        procs = self._with_waits(
            tuple(
                ps
                for pid, parent in targets.items()
                if (ps := self._proc_sample(pid, parent, self._numa_nodes, now)) is not None
            ),
            now,
        )
        self._identify(procs)
        return [
            HostSample(
                t=now,
                cpu_pct=percore,
                iowait_pct=iowait,
                load=os.getloadavg(),
                mem_used=mem_total - mem_avail,
                mem_total=mem_total,
                swap_used=swap_used,
                swap_total=swap_total,
                numa=self._numa_nodes,
                gpu_nodes=self._gpu_nodes,
                procs=procs,
            )
        ]

    def _with_waits(self, procs: tuple[ProcSample, ...], now: float) -> tuple[ProcSample, ...]:
        """Each GPU process with its main thread's CPU and wait and its busiest feeder: the input-bound
        evidence the phase rules read (a main thread that waits while another part of the job works),
        found by behaviour, whatever the parts are named."""
        out = []
        for p in procs:
            if p.worker_of is not None:
                out.append(p)
                continue
            got = procfs.thread_wait(self.root, p.pid, p.pid)
            if got is None:
                out.append(p)
                continue
            _, used, wait, target = got
            at, before = self._main_used.get(p.pid, (now, used))
            self._main_used[p.pid] = (now, used)
            main = max(0.0, 100.0 * (used - before) / (now - at)) if now > at else 0.0
            # the other threads together, against each child of the job (any name, any depth)
            feeder, fcpu = f"{p.pid} {p.name} (other threads)", max(0.0, p.cpu_pct - main)
            for c in procs:
                if c.worker_of == p.pid and c.cpu_pct > fcpu:
                    feeder, fcpu = f"{c.pid} {c.name}", c.cpu_pct
            out.append(
                dataclasses.replace(
                    p,
                    main_cpu=round(main, 1),
                    wait=wait,
                    wait_on=target,
                    feeder=feeder,
                    feeder_cpu=round(fcpu, 1),
                )
            )
        return tuple(out)

    def _identify(self, procs: tuple[ProcSample, ...]) -> None:
        """The main processes' identity from their cgroups, read once per process (a process moved to
        another cgroup keeps the first: schedulers place a job before it starts). ``jobs`` is replaced
        whole, so the sampler's thread reads it without a lock."""
        keys = {(p.pid, p.started): p.pid for p in procs if p.worker_of is None}
        for k in set(self._jobs) - set(keys):
            del self._jobs[k]
        for k, pid in keys.items():
            if k not in self._jobs:
                self._jobs[k] = ProcJob(pid, tuple(sorted(jobid.read_cgroup(pid, self.root).items())))
        self.jobs = tuple(sorted((j for j in self._jobs.values() if j.job), key=lambda j: j.pid))

    def stop(self) -> None:
        self._cpu_used.clear()
        self._main_used.clear()
