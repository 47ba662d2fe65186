"""What a Python thread is waiting on, from its stack: one rule table for classifier and UI.

Classes: sync (a CUDA synchronisation), copy (host<->device transfer), data (input
pipeline), other (Python/host work), idle (thread asleep).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memtop.model import StackFrame

CLASSES = ("sync", "copy", "data", "other", "idle")

# (class, what to match, pattern). Checked in order on the leaf (and the first frame in
# user code); "stack" rules look at every frame. First match wins.
RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # waiting on the input pipeline wins: the user line above it may well hold a .to(
    (
        "data",
        "stack",
        re.compile(r"torch/utils/data/(dataloader|_utils/(fetch|collate|worker|pin_memory))\.py$"),
    ),
    (
        "sync",
        "code",
        re.compile(r"\.(item|cpu|tolist|numpy|nonzero)\(|synchronize\(|\.wait\(\)\s*$|torch\.equal\("),
    ),
    (
        "sync",
        "func",
        re.compile(
            r"(^|\.)(synchronize|_local_scalar_dense|cudaStreamSynchronize|"
            r"cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize|item)$"
        ),
    ),
    ("copy", "code", re.compile(r"\.(to|cuda|copy_|pin_memory)\(|non_blocking=")),
    ("copy", "func", re.compile(r"(^|\.)(copy_|pin_memory|_pin_memory_loop|cudaMemcpy\w*)$")),
    ("data", "func", re.compile(r"(^|\.)(__getitem__|__getitems__|collate\w*|default_collate)$")),
)

# Files of the runtime itself: the "user" frame is the first one outside them.
_LIB = re.compile(r"(/torch/|/site-packages/|/dist-packages/|<frozen |/lib/python3\.\d+/)")


def user_frame(frames: Sequence[StackFrame]) -> StackFrame | None:
    for f in frames:
        if not _LIB.search(f.file):
            return f
    return None


def classify(frames: Sequence[StackFrame], active: bool) -> str:
    """Class of one thread's stack (frames leaf first)."""
    if not frames:
        return "idle" if not active else "other"
    heads = [frames[0]]
    uf = user_frame(frames)
    if uf is not None and uf is not frames[0]:
        heads.append(uf)
    for klass, what, pat in RULES:
        if what == "stack":
            if any(pat.search(f.file) for f in frames):
                return klass
        elif what == "code":
            if any(pat.search(f.code) for f in heads if f.code):
                return klass
        elif pat.search(frames[0].name):
            return klass
    return "other" if active else "idle"


def where(frames: Sequence[StackFrame]) -> str:
    """file:line of the frame a user would edit (first outside libraries), else the leaf."""
    return site(frames)[0]


def site(frames: tuple[StackFrame, ...]) -> tuple[str, str]:
    """(file:line, source text) of the frame a user would edit, else of the leaf."""
    f = user_frame(frames) or (frames[0] if frames else None)
    if f is None:
        return "?", ""
    code = re.sub(r"\s+#[^'\"]*$", "", f.code)[:80]  # a trailing comment explains nothing here
    return f"{f.file.rsplit('/', 1)[-1]}:{f.line}", code
