"""Positions in a run as people say them: "1:02:03" to show, "1:02:03", "62m", "90s" or "3723" to type."""

from __future__ import annotations

import math
import re

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([hms])")


def clock(seconds: float) -> str:
    """``h:mm:ss`` (whole seconds, rounded down; negatives and non-finite values as 0:00:00)."""
    s = int(seconds) if math.isfinite(seconds) and seconds > 0 else 0
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def length(seconds: float, digits: int = 0) -> str:
    """A stretch of time as people read it: "42 s" (``digits`` decimals) under two minutes, then
    h:mm:ss (an 8-hour report says "of the last 7:59:24", not "of the last 28764 s"); a stretch
    under a second keeps a decimal (a replay's first bin is "the last 0.5 s", not "the last 0 s")."""
    if 0 < seconds < 1:
        digits = max(digits, 1)
    return f"{seconds:.{digits}f} s" if seconds < 120 else clock(seconds)


def parse_clock(text: str) -> float:
    """Seconds from ``h:mm:ss``, ``m:ss``, ``1h2m3s``/``62m``/``90s`` or plain seconds; ValueError otherwise."""
    t = text.strip().lower().replace(" ", "")
    if not t:
        raise ValueError("empty time")
    if ":" in t:
        parts = t.split(":")
        if len(parts) > 3 or not all(re.fullmatch(r"\d+(\.\d*)?", p) for p in parts):
            raise ValueError(f"not a time: {text!r} (try 1:02:03, 62m or 3723)")
        if any(float(p) >= 60 for p in parts[1:]):
            raise ValueError(f"minutes and seconds run to 59: {text!r}")
        v = 0.0
        for p in parts:
            v = v * 60 + float(p)
        return v
    if re.fullmatch(r"\d+(\.\d*)?|\.\d+", t):
        return float(t)
    if not re.fullmatch(r"(?:(?:\d+(?:\.\d*)?|\.\d+)[hms])+", t):
        raise ValueError(f"not a time: {text!r} (try 1:02:03, 62m or 3723)")
    units = [u for _, u in _PART.findall(t)]
    if len(set(units)) != len(units):
        raise ValueError(f"a unit given twice: {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(t))
