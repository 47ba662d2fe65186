"""Job identity of a training process, from its /proc/PID/environ.

Only these variables are read, and only values of the expected shape are kept: a Slurm job id and
name, torchrun's rank / local rank / world size, and a Kubernetes pod name (set by the downward
API; `POD_NAME` by convention). They become labels of one info series per GPU, so they must stay
low in cardinality and free of secrets: nothing else from the environment is ever kept. The file
is readable only by the process's owner (or root): otherwise the identity is simply absent.
"""

from __future__ import annotations

import re
from pathlib import Path

from memtop.model import JOB_KEYS
from memtop.sanitize import clean

_DIGITS = re.compile(r"[0-9]{1,10}")
# variable -> (key in snapshots and labels, accepted shape)
FIELDS: dict[str, tuple[str, re.Pattern[str]]] = {
    "SLURM_JOB_ID": ("slurm_job_id", re.compile(r"[0-9]{1,12}(_[0-9]{1,8})?")),
    "SLURM_JOB_NAME": ("slurm_job_name", re.compile(r"[\w.+:@/-]{1,64}")),
    "RANK": ("rank", _DIGITS),
    "LOCAL_RANK": ("local_rank", _DIGITS),
    "WORLD_SIZE": ("world_size", _DIGITS),
    "POD_NAME": ("pod", re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?")),
}
KEYS = JOB_KEYS
assert tuple(k for k, _ in FIELDS.values()) == KEYS  # one list of names, for the model and clients
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


def read_job(pid: int, root: Path = Path("/")) -> dict[str, str]:
    try:
        return parse_environ((root / "proc" / str(pid) / "environ").read_bytes())
    except OSError:  # not ours to read (or gone): no identity
        return {}


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
