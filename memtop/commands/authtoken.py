"""The bearer token of `memtop serve` and `memtop cluster`: read from a file only its owner can read."""

from __future__ import annotations

from memtop.core.errors import UserError
from memtop.fleet.files import read_regular

MAX_TOKEN = 4096  # bytes; a longer token is refused, never cut (a cut token fails far from its cause)


def read_token(path: str) -> str:
    """The bearer token: the file must be a regular file of the user's own, mode 0600 or 0400, holding
    one token of at most MAX_TOKEN bytes (surrounding whitespace and a final newline are ignored)."""
    raw = read_regular(path, "--token-file", MAX_TOKEN + 2, private=True)  # + a CRLF after the token
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UserError(f"--token-file {path} must hold an ASCII token") from None
    if len(token) > MAX_TOKEN:
        raise UserError(f"--token-file {path}: the token is over {MAX_TOKEN} bytes")
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise UserError(f"--token-file {path} must hold one token")
    return token
