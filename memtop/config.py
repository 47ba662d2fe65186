"""The user's choices that outlive a run: $XDG_CONFIG_HOME/memtop/config.toml.

    theme = "nord"        # Textual theme (saved when changed from the command palette)
    paint_rate = 2.0      # UI repaints per second
    mouse = false         # no mouse tracking
    ascii = true          # ASCII-only drawing
    letters = true        # a letter per phase in the timeline's bands (saved when `l` is pressed)
    timeline_s = 300.0    # the timeline's span, 15-600 s (saved when `z` / `Z` zoom)

The layout choices made with keys (letters, zoom) are saved as they are made, as the theme is; the
selected GPU is not (GPU indices differ between nodes and runs). Command-line flags win over the
file. A file that cannot be read, a wrong value or a key memtop does not know is reported as one
line and otherwise ignored: a config must never stop the monitor from starting.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from memtop.core.sanitize import clean


@dataclass(frozen=True)
class Config:
    theme: str | None = None
    paint_rate: float | None = None
    mouse: bool = True
    ascii: bool = False
    letters: bool = False
    timeline_s: float | None = None


# the timeline's span: Timeline.zoom keeps it inside these
TIMELINE_S = (15.0, 600.0)
_RANGES = {"paint_rate": (0.1, 30.0), "timeline_s": TIMELINE_S}  # the numbers' valid ranges


def path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "memtop" / "config.toml"


def _read() -> dict:
    try:
        f = open(path(), "rb")  # noqa: SIM115  (closed below: tomllib loads only when there is a file)
    except FileNotFoundError:
        return {}
    except OSError as e:
        return _ignore(e)
    if sys.version_info >= (3, 11):  # here, not at import: report and export never read the file
        import tomllib
    else:  # pragma: no cover - 3.10
        import tomli as tomllib
    with f:
        try:
            return tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            return _ignore(e)


def _ignore(e: Exception) -> dict:
    print(f"memtop: ignoring {path()}: {clean(e, 200)}", file=sys.stderr)
    return {}


def load() -> Config:
    raw = _read()
    kw: dict[str, object] = {}
    bad: list[str] = []
    for f in fields(Config):
        if f.name not in raw:
            continue
        v = raw[f.name]
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**6:
            v = math.nan  # TOML integers are unbounded: 1e400 as an int overflows isfinite()
        if f.name == "theme" and isinstance(v, str) and v:
            kw[f.name] = v
        elif f.name in _RANGES and isinstance(v, (int, float)) and not isinstance(v, bool):
            lo, hi = _RANGES[f.name]
            if math.isfinite(v) and lo <= v <= hi:
                kw[f.name] = float(v)
            else:
                bad.append(f.name)
        elif f.name in ("mouse", "ascii", "letters") and isinstance(v, bool):
            kw[f.name] = v
        else:
            bad.append(f.name)
    if bad:
        print(f"memtop: ignoring bad value(s) in {path()}: {', '.join(bad)}", file=sys.stderr)
    known = [f.name for f in fields(Config)]
    unknown = [k for k in raw if k not in known]
    if unknown:  # a misspelt key did nothing, silently ("paint-rate", "theme " in a table)
        print(
            f"memtop: ignoring unknown key(s) in {path()}: {clean(', '.join(unknown), 200)} "
            f"(known: {', '.join(known)})",
            file=sys.stderr,
        )
    return Config(**kw)  # type: ignore[arg-type]


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)  # inf and nan are TOML too
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def save(**changes: object) -> Path | None:
    """Merge ``changes`` into the file (0600, written beside it and renamed: never through a link).
    Keys memtop does not know are kept only if they are plain values; None if it could not write."""
    raw: dict[str, object] = {
        k: v
        for k, v in _read().items()
        if isinstance(v, (str, bool, float)) or (isinstance(v, int) and abs(v) < 2**63)  # TOML's range
    }
    raw.update(changes)
    p = path()
    tmp = p.with_name(f".config.toml.{os.getpid()}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# memtop settings (see README); flags on the command line win\n")
            for k, v in raw.items():
                if all(c.isalnum() or c == "_" for c in k):
                    f.write(f"{k} = {_toml(v)}\n")
        os.replace(tmp, p)  # replaces a symlink at p, never writes through it
        return p
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
