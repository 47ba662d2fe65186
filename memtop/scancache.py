"""A cache of report scans, so asking again about a long recording takes a moment, not a pass.

An entry is keyed by the recording file's identity (device, inode, size, modification time), the
scan's range and layout, and the source of every module that decides its result (the classifier
and stack rules included): a rule change or a rewritten file never reads a stale entry. Entries live
in $XDG_CACHE_HOME/memtop (0700, owned by this user; otherwise nothing is cached) as 0600 files
written beside and renamed into place, and only the newest ``KEEP`` are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import secrets
import stat
from pathlib import Path

MIN_S = 2.0  # a scan quicker than this is not worth an entry
KEEP = 16
_RESULT_MODULES = ("memtop.phases", "memtop.stackclass", "memtop.scan", "memtop.store", "memtop.model")


def _dir() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(base) / "memtop"
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return d


def key(path: Path, scan_args: tuple) -> str | None:
    import sys

    from memtop import __version__

    try:
        st = os.stat(path)
        h = hashlib.sha256()
        for name in _RESULT_MODULES:
            h.update(Path(sys.modules[name].__file__ or "").read_bytes())
    except (OSError, KeyError):
        return None
    h.update(repr((__version__, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, scan_args)).encode())
    return h.hexdigest()[:40]


def load(k: str | None):
    d = _dir() if k else None
    if d is None:
        return None
    try:
        fd = os.open(d / f"{k}.scan", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        try:
            return pickle.load(fh)  # only this user can have written it (checked above)
        except Exception:  # a partial or older entry: scan again
            return None


def save(k: str, result: object) -> None:
    d = _dir()
    if d is None:
        return
    tmp = d / f".{k}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{k}.scan")
        entries = sorted(d.glob("*.scan"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink()
    except OSError:  # a full disk or a read-only home: the report is still right, only slower
        pass
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
