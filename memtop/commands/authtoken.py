"""The bearer token of `memtop serve` and `memtop cluster`: read from a file only its owner can read."""

from __future__ import annotations

import os
import stat

from memtop.errors import UserError


def read_token(path: str) -> str:
    """The bearer token; its file must be a regular file only its owner can read (0600 or 0400)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise UserError(f"cannot read --token-file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise UserError(f"--token-file {path} must be a regular file with mode 0600 (chmod 600 {path})")
        token = os.read(fd, 4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not token or any(c.isspace() for c in token):
        raise UserError(f"--token-file {path} must hold one token")
    return token
