"""A failed stack read does not blank the stacks panel: the pipeline shows the last good stack for
STACK_HOLD_S, dated, then the error. Real frames: a 2-GPU H200 recording where py-spy's non-blocking
read of a rank failed ("Failed to get stack traces") between good reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from memtop.tui import format as fmt

from memtop.live.pipeline import STACK_HOLD_S, Pipeline, Status
from memtop.storage.store import Recording

REC = Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop"


def _failed_read():
    """(frames up to and including the first frame whose read of a rank failed after a good read, pid)"""
    frames, good = [], set()
    for f in Recording(REC).frames():
        frames.append(f)
        for s in f.stacks:
            if s.threads:
                good.add(s.pid)
            elif s.error and "Failed to get stack traces" in s.error and s.pid in good:
                return frames, s.pid
    raise AssertionError("no failed read after a good one in the recording")


def test_a_failed_read_shows_the_last_good_stack_dated_then_the_error():
    frames, pid = _failed_read()
    p = Pipeline(Status("replay"))
    for f in frames:
        p.on_frame(f, tick=False)
    v = p.view()
    failed = next(s for s in v.frame.stacks if s.pid == pid)
    assert not failed.threads and failed.error
    held = v.stacks[pid]
    assert held.threads and held.t < v.frame.t  # the good read stands in
    text = fmt.stacks_text(held, v.frame.caps, pid, now=v.frame.t, failed=True).plain
    assert "Error" not in text and held.threads[0].name in text
    if v.frame.t - held.t >= 1.0:
        assert "the newest read failed" in text
    # a good stack as old, of a process dumped less often (a saturated GPU's): no read failed
    later = fmt.stacks_text(held, v.frame.caps, pid, now=held.t + 1.5).plain
    assert "stack from 1.5 s ago" in later and "failed" not in later
    # the same failure STACK_HOLD_S later: the error shows
    late = replace(v.frame, t=held.t + STACK_HOLD_S + 0.5)
    p.on_frame(late, tick=False)
    v2 = p.view()
    assert not v2.stacks[pid].threads and v2.stacks[pid].error
    assert any(
        "Error" in cell for row in fmt.proc_rows(v2) if row[0] == str(pid) for cell in map(str, row[1])
    )


def test_the_failed_read_is_not_listed_as_unavailable_while_a_stack_stands_in():
    """The first frame listing a failed read of a process whose last good stack is recent."""
    p = Pipeline(Status("replay"))
    last_good: dict[int, float] = {}
    for f in Recording(REC).frames():
        p.on_frame(f, tick=False)
        last_good.update({s.pid: s.t for s in f.stacks if s.threads})
        bad = [c for c in f.caps if c.source == "stacks" and not c.ok and c.name.startswith("pid ")]
        pid = next((int(c.name[4:]) for c in bad if f.t - last_good.get(int(c.name[4:]), -1e9) < 1.0), None)
        if pid is not None:
            break
    else:
        raise AssertionError("no failed read listed beside a recent good stack")
    v = p.view()
    name = f"pid {pid}"
    assert not [c for c in fmt.unheld(v.frame.caps, v.stacks) if c.source == "stacks" and c.name == name]
    assert [c for c in fmt.unheld(v.frame.caps, {}) if c.source == "stacks" and c.name == name]
