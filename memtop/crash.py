"""An unexpected exception: the traceback goes to a private log file, the user gets one line naming
it, and memtop exits 70 (EX_SOFTWARE) — never 0, never a traceback on a terminal that may be a TUI's."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

EXIT_CRASH = 70


def _log_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    d = Path(base) / "memtop"
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def write_log(exc: BaseException) -> Path | None:
    """Write the traceback to a new 0600 file (O_EXCL, never through a symlink); None if nowhere."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(100):
        path = _log_dir() / f"memtop-crash-{stamp}-{os.getpid()}-{attempt}.log"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        except OSError:
            return None
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(f"memtop {sys.argv[1:]!r}\n{text}")
        return path
    return None


def report_crash(exc: BaseException) -> int:
    """Log `exc`, print one line on stderr, return the exit code."""
    from memtop.core.sanitize import clean

    path = write_log(exc)
    where = f"; details in {path}" if path else ""
    print(f"memtop: internal error: {clean(type(exc).__name__)}: {clean(exc, 200)}{where}", file=sys.stderr)
    return EXIT_CRASH
