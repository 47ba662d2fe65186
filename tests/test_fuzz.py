"""A fixed-seed subset of the fuzz (bench/fuzz.py runs >= 10,000 cases): damaged copies of the real
recordings through every reader. 0 tracebacks, 0 hangs, 0 wrong exit codes."""

from __future__ import annotations

from collections import Counter

import pytest
from fuzzing import COMMANDS, cases, make_bases, run_case, run_subprocess, run_tui

SEED = 20261124
N = 520
# a case still running after this long hangs: bound for a loaded machine (a real hang is a loop
# that never ends; bench/fuzz.py, on a quiet one, allows 30 s)
HANG_S = 60


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return make_bases(tmp_path_factory.mktemp("bases"))


def test_damaged_recordings_in_process(bases, tmp_path):
    bad, kinds = [], Counter()
    for i, what, path, _rng in cases(SEED, N, bases, tmp_path):
        cmd = COMMANDS[i % len(COMMANDS)]
        o = run_case(path, cmd, tmp_path, HANG_S)
        kinds[o.kind] += 1
        if o.kind != "ok":
            bad.append((i, what, cmd, o.kind, o.signature, o.detail))
    assert sum(kinds.values()) == N
    assert not bad, bad[:10]


def test_damaged_recordings_as_processes(bases, tmp_path):
    """A few end to end: the exit status a shell sees (2 and one line, or 0), never a traceback."""
    bad = []
    for i, what, path, _rng in cases(SEED + 1, 10, bases, tmp_path):
        o = run_subprocess(path, COMMANDS[i % len(COMMANDS)], tmp_path, HANG_S)
        if o.kind != "ok":
            bad.append((what, o))
    assert not bad


def test_damaged_recordings_in_the_tui(bases, tmp_path):
    """A headless replay of damaged files that still open: it plays on, no thread dies of anything
    but the store's clean error for damage found mid-file (which the replay must then show)."""
    bad = []
    for _i, what, path, _rng in cases(SEED + 2, 6, bases, tmp_path):
        o = run_tui(path, seconds=2.0, hang_s=HANG_S)
        if o.kind not in ("ok", "stopped"):
            bad.append((what, o))
    assert not bad
