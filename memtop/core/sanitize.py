"""The one terminal-safety boundary: every string memtop did not write itself (recordings, watched
processes' function/file names, source lines, thread names, command lines, GPU and host names) passes
through `clean` before a terminal, a report or an error line sees it.

Controls are shown, never interpreted: C0 and C1 controls, ESC and DEL become visible escapes
(`\\x1b`), bidi overrides and isolates become `\\u202e`-style escapes (they reorder what follows),
lone surrogates (invalid UTF-8 decoded with surrogateescape) become U+FFFD. Plain text is unchanged.
Markup is a separate matter: the TUI builds Rich `Text` objects and never parses data as markup.
"""

from __future__ import annotations

import re

# C0 (with TAB/LF/CR handled by the caller's choice), DEL, C1, bidi embeddings/overrides/isolates,
# line/paragraph separators (break layouts), and lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_MULTILINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
ELLIPSIS = "…"


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    o = ord(c)
    if 0xD800 <= o <= 0xDFFF:
        return "\ufffd"
    if o == 0x09:
        return " "  # a tab would move the cursor by the terminal's tab stops, not one cell
    return f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}"


def clean(value: object, limit: int | None = None) -> str:
    """One line of untrusted text, safe to print: controls (newlines included) made visible, cut to
    `limit` characters with an ellipsis."""
    return _cleaned(_UNSAFE, value, limit)


def clean_multiline(value: object, limit: int | None = None) -> str:
    """Like `clean`, but newlines stay newlines (report bodies, help text built from data)."""
    return _cleaned(_UNSAFE_MULTILINE, value, limit)


def _cleaned(unsafe: re.Pattern[str], value: object, limit: int | None) -> str:
    s = unsafe.sub(_escape, value if isinstance(value, str) else str(value))
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 0)] + ELLIPSIS
    return s


def is_clean(s: str) -> bool:
    """True when `s` holds nothing a terminal would interpret (used by tests and assertions)."""
    return _UNSAFE.search(s) is None
