"""Job identity of a training process, from its /proc/PID/environ and its /proc/PID/cgroup.

From the environment only these variables are read, and only values of the expected shape are kept:
a Slurm job id and name, torchrun's rank / local rank / world size, and a Kubernetes pod name and
namespace (set by the downward API; `POD_NAME` / `POD_NAMESPACE` by convention). They become labels
of one info series per GPU, so they must stay low in cardinality and free of secrets: nothing else
from the environment is ever kept, and none of it is recorded. The file is readable only by the
process's owner (or root): otherwise that part of the identity is simply absent.

From the cgroup path (readable by anyone, and written by the scheduler, not the job): the container
id and its runtime (docker, containerd, cri-o, podman), the Kubernetes pod UID and QoS class, and the
Slurm job and step. These need no cooperation from the job and no network call, and are recorded.
"""

from __future__ import annotations

import re
from pathlib import Path

from memtop.core.model import JOB_KEYS
from memtop.core.sanitize import clean

_DIGITS = re.compile(r"[0-9]{1,10}")
# variable -> (key in snapshots and labels, accepted shape)
FIELDS: dict[str, tuple[str, re.Pattern[str]]] = {
    "SLURM_JOB_ID": ("slurm_job_id", re.compile(r"[0-9]{1,12}(_[0-9]{1,8})?")),
    "SLURM_JOB_NAME": ("slurm_job_name", re.compile(r"[\w.+:@/-]{1,64}")),
    "RANK": ("rank", _DIGITS),
    "LOCAL_RANK": ("local_rank", _DIGITS),
    "WORLD_SIZE": ("world_size", _DIGITS),
    "POD_NAME": ("pod", re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?")),
    "POD_NAMESPACE": ("pod_namespace", re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")),
}
# what a cgroup path gives (parse_cgroup)
CGROUP_KEYS = ("pod_uid", "qos", "container", "runtime", "slurm_step")
KEYS = JOB_KEYS
# one list of names, for the model and clients (slurm_job_id comes from either)
assert (*(k for k, _ in FIELDS.values()), *CGROUP_KEYS) == KEYS
_WANTED = {name.encode() for name in FIELDS}


def parse_environ(data: bytes) -> dict[str, str]:
    """The allowed variables of a NUL-separated environment block, those of the expected shape."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if not eq or name not in _WANTED:
            continue
        key, shape = FIELDS[name.decode()]
        text = clean(value.decode("utf-8", "replace"), 64)
        if shape.fullmatch(text):
            out[key] = text
    return out


# A container's cgroup, by runtime: docker (cgroupfs /docker/ID, systemd docker-ID.scope), containerd
# (cri-containerd-ID.scope; under kubepods with the cgroupfs driver a bare ID), cri-o (crio-ID.scope;
# crio-conmon-ID is its monitor, not the container), podman (libpod-ID.scope, cgroupfs libpod-ID).
_CONTAINER = re.compile(r"(?:^|/)(?:(docker|cri-containerd|crio|libpod)-)?([0-9a-f]{64})(?:\.scope)?(?=/|$)")
_RUNTIME = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman"}
# kubepods/burstable/pod<uid> (cgroupfs) or kubepods-burstable-pod<uid with _>.slice (systemd)
_POD = re.compile(r"kubepods.*?[-/]pod([0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12})")
_QOS = re.compile(r"kubepods[-/](burstable|besteffort)")
# Slurm: /slurm/uid_U/job_J/step_S (v1), /system.slice/slurmstepd.scope/job_J/step_S (v2)
_SLURM = re.compile(r"/slurm[^/]*/(?:[^/]+/)*?job_([0-9]{1,12})(?:/step_([a-z0-9]{1,16}))?")


def parse_cgroup(text: str) -> dict[str, str]:
    """Identity from /proc/PID/cgroup (v1 lines "N:controllers:/path", v2 "0::/path"): the first path
    that names a container, a pod or a Slurm job gives it; unknown layouts give nothing."""
    out: dict[str, str] = {}
    for line in text.splitlines()[:64]:
        path = line.split(":", 2)[-1][:4096]
        if "container" not in out and (m := _CONTAINER.search(path)):
            prefix = m.group(1) or ("docker" if path.startswith("/docker/") else "")
            out["container"] = m.group(2)[:12]  # the short id, as `docker ps` and crictl show it
            if prefix in _RUNTIME:
                out["runtime"] = _RUNTIME[prefix]
        if "pod_uid" not in out and (m := _POD.search(path)):
            out["pod_uid"] = m.group(1).replace("_", "-")
            qos = _QOS.search(path)
            out["qos"] = qos.group(1) if qos else "guaranteed"  # guaranteed pods sit right under kubepods
        if "slurm_job_id" not in out and (m := _SLURM.search(path)):
            out["slurm_job_id"] = m.group(1)
            if m.group(2):
                out["slurm_step"] = m.group(2)
    return out


def read_cgroup(pid: int, root: Path = Path("/")) -> dict[str, str]:
    try:
        return parse_cgroup((root / "proc" / str(pid) / "cgroup").read_text(errors="replace")[:65536])
    except OSError:  # gone
        return {}


def read_job(pid: int, root: Path = Path("/")) -> dict[str, str]:
    """The identity from the cgroup, then the environment's (which wins where both say)."""
    job = read_cgroup(pid, root)
    try:
        return {**job, **parse_environ((root / "proc" / str(pid) / "environ").read_bytes())}
    except OSError:  # not ours to read (or gone): the cgroup's alone
        return job


class JobIds:
    """Per-process cache: a process's initial environment never changes, so each is read once."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self._cache: dict[tuple[int, float], dict[str, str]] = {}

    def get(self, pid: int, started: float) -> dict[str, str]:
        key = (pid, started)
        if key not in self._cache:
            if len(self._cache) > 4096:  # processes come and go over weeks of serving
                self._cache.clear()
            self._cache[key] = read_job(pid, self.root)
        return self._cache[key]
