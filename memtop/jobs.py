"""Which GPUs are one job: the grouping the peers (phases), the stragglers and the report share.

GPUs are one job when their processes have the same parent and command line (torchrun, srun and
mpirun start every rank so) or are one process driving several GPUs. The ranks' RANK / SLURM_JOB_ID
(collectors/jobid.py) are read for snapshots, not carried in Frames, so they are not used here. Two
copies of one command started from one shell look like one job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memtop.model import Frame, ProcSample


def job_groups(frame: Frame) -> dict[int, str]:
    """GPU index -> job key, from a Frame's GPU processes and host sample."""
    if frame.host is None:
        return {}
    procs = {p.pid: p for p in frame.host.procs}
    return _groups({g.index: [p.pid for p in g.processes] for g in frame.gpus}, procs)


def jobs_of(procs: Mapping[int, ProcSample]) -> dict[int, str]:
    """job_groups over a whole recording: every process seen with a context on a GPU (a report reads
    the run after its ranks have exited)."""
    by_gpu: dict[int, list[int]] = {}
    for p in procs.values():
        for g in p.gpus:
            by_gpu.setdefault(g, []).append(p.pid)
    return _groups(by_gpu, procs)


def jobs_on_gpus(procs: Mapping[int, ProcSample]) -> dict[int, dict[str, list[int]]]:
    """GPU index -> every job seen with a context on it -> its pids: several where jobs shared a GPU."""
    out: dict[int, dict[str, list[int]]] = {}
    for p in procs.values():
        for g in p.gpus:
            out.setdefault(g, {}).setdefault(_key(p.ppid, p.cmdline or p.name), []).append(p.pid)
    return out


def _key(ppid: int, command: str) -> str:
    return f"{ppid} {command}"


def _groups(pids_by_gpu: Mapping[int, Sequence[int]], procs: Mapping[int, ProcSample]) -> dict[int, str]:
    out = {}
    for gpu, pids in pids_by_gpu.items():
        keys = sorted((p.ppid, p.cmdline or p.name) for pid in pids if (p := procs.get(pid)))
        if keys:
            out[gpu] = _key(*keys[0])
    return out
