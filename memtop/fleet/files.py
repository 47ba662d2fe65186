"""Small files the fleet reads on the user's behalf (the host list, the bearer token): regular files
only, opened without blocking (a FIFO would wait for a writer forever), bounded in bytes."""

from __future__ import annotations

import os
import stat

from memtop.core.errors import UserError


def read_regular(path: str, what: str, cap: int, private: bool = False) -> bytes:
    """The file's bytes, at most `cap` (a longer file is refused, never cut). `private`: like ssh with
    a key, the file must be the user's own and readable by no one else (it holds a credential)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if private else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{what} {path} is not a regular file")
        if private and st.st_uid != os.geteuid():
            raise UserError(f"{what} {path} belongs to another user (uid {st.st_uid}): it must be yours")
        if private and st.st_mode & 0o077:
            raise UserError(f"{what} {path} can be read by others: it must be mode 0600 (chmod 600 {path})")
        data = b""
        while len(data) <= cap:
            chunk = os.read(fd, cap + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise UserError(f"{what} {path} is over {cap} bytes")
    return data
