"""Which GPUs are one job: the grouping the peers (phases), the stragglers and the report share.

GPUs are one job when their processes have the same parent and command line (torchrun, srun and
mpirun start every rank so) or are one process driving several GPUs. The ranks' RANK / SLURM_JOB_ID
(collectors/jobid.py) are read for snapshots, not carried in Frames, so they are not used here. Two
copies of one command started from one shell look like one job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from memtop.core.model import Frame, ProcSample


class JobProc(Protocol):
    """What a process's job is known by (a ProcSample; the report reads these from column blocks)."""

    @property
    def ppid(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def cmdline(self) -> str: ...


def job_groups(frame: Frame) -> dict[int, str]:
    """GPU index -> job key, from a Frame's GPU processes and host sample."""
    if frame.host is None:
        return {}
    procs = {p.pid: p for p in frame.host.procs}
    return groups({g.index: [p.pid for p in g.processes] for g in frame.gpus}, procs)


def peers(
    gpus: Sequence[int], job: Sequence[object], away: Sequence[bool]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each of ``gpus``' peers (live mode's, the report's and the stragglers'): the others of its job
    (``job``: each GPU's key, None for none), and which of those are ``away`` (for the features: not
    in a collective)."""
    out = []
    for g, key in zip(gpus, job, strict=True):
        ps = [j for j, k in enumerate(job) if key is not None and k == key and gpus[j] != g]
        out.append((tuple(gpus[j] for j in ps), tuple(gpus[j] for j in ps if away[j])))
    return out


def jobs_of(procs: Mapping[int, ProcSample]) -> dict[int, str]:
    """job_groups over a whole recording: every process seen with a context on a GPU (a report reads
    the run after its ranks have exited)."""
    by_gpu: dict[int, list[int]] = {}
    for p in procs.values():
        for g in p.gpus:
            by_gpu.setdefault(g, []).append(p.pid)
    return groups(by_gpu, procs)


def proc_key(p: JobProc) -> str:
    """The job a process belongs to by its tree: its parent and command line (memtop.analysis.jobshare too)."""
    return f"{p.ppid} {p.cmdline or p.name}"


def jobs_on_gpus(procs: Mapping[int, ProcSample]) -> dict[int, dict[str, list[int]]]:
    """GPU index -> every job seen with a context on it -> its pids: several where jobs shared a GPU."""
    out: dict[int, dict[str, list[int]]] = {}
    for p in procs.values():
        for g in p.gpus:
            out.setdefault(g, {}).setdefault(proc_key(p), []).append(p.pid)
    return out


def groups(pids_by_gpu: Mapping[int, Sequence[int]], procs: Mapping[int, JobProc]) -> dict[int, str]:
    """GPU index -> job key, from each GPU's pids and the processes by pid (those not there: no job)."""
    out = {}
    for gpu, pids in pids_by_gpu.items():
        keys = sorted((p.ppid, p.cmdline or p.name, pid) for pid in pids if (p := procs.get(pid)))
        if keys:
            out[gpu] = proc_key(procs[keys[0][2]])
    return out
