"""A cache of reports, so asking again about a long recording takes a moment, not another pass.

An entry is keyed by the recording file's identity (path, device, inode, size, modification time),
the question asked (GPU, range) and the source of every memtop module loaded when it is asked (the
classifier and stack rules included): a rule change or a rewritten file never reads a stale entry.
Entries are JSON (nothing in them is executed) in $XDG_CACHE_HOME/memtop (0700 and owned by this
user; otherwise nothing is cached), written 0600 beside and renamed into place; the newest ``KEEP``
are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import sys
from pathlib import Path

MIN_S = 2.0  # an answer quicker than this is not worth an entry
KEEP = 32


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


def key(path: Path, question: tuple) -> str | None:
    """The entry's name, or None when the file cannot be identified."""
    from memtop import __version__

    try:
        st = os.stat(path)
        h = hashlib.sha256()
        for name in sorted(n for n in sys.modules if n == "memtop" or n.startswith("memtop.")):
            f = getattr(sys.modules[name], "__file__", None)
            if f:
                h.update(name.encode() + Path(f).read_bytes())
    except OSError:
        return None
    h.update(
        repr((__version__, str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, question)).encode()
    )
    return h.hexdigest()[:40]


def load(k: str | None) -> dict | None:
    d = _dir() if k else None
    if d is None:
        return None
    try:
        fd = os.open(d / f"{k}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        try:
            v = json.load(fh)
        except ValueError:  # a partial entry: ask again
            return None
    return v if isinstance(v, dict) else None


def save(k: str | None, value: dict) -> None:
    d = _dir() if k else None
    if d is None:
        return
    tmp = d / f".{k}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(value, fh)
        os.replace(tmp, d / f"{k}.json")
        entries = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink()
    except (OSError, TypeError, ValueError):  # a full disk, a read-only home: only slower next time
        pass
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
