"""Words said with a count, for every output (no textual: the CLI's lines use it too)."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``1 node``, ``2 nodes``, ``0 nodes``: the count and its noun, plural unless exactly one
    (nouns that take a plain ``s``)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
