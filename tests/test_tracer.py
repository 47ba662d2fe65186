"""Captures from the live view (memtop.agent.tracer): the TUI's `x` key and --trace-on, with a real
`memtop run` job whose agent drives a stand-in for PyTorch's profiler (tests/stubs/torch), a real
recorder beside it, real SQLite recordings and the real report. The stand-in proves the wiring only:
real captures are checked on the device (bench/trace_tui.sh, docs/TRACE.md)."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from memtop.tui.app import KEYS, MemtopApp
from pilots import until

from memtop.agent.tracer import TraceOptions, Tracer
from memtop.analysis.verdict import Verdict
from memtop.commands.local import LiveController, demo_path
from memtop.live.pipeline import Pipeline, Status
from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording, Writer

STUBS = Path(__file__).parent / "stubs"
LOOP = """
    import json, os, sys, time
    import torch
    print(json.dumps({"pid": os.getpid()}), flush=True)
    while not os.path.exists(sys.argv[1]):
        with torch.profiler.record_function("step"):
            time.sleep(0.002)
"""


@pytest.fixture
def job(tmp_path):
    """A `memtop run --no-tui` job that imported (the stand-in) torch; its pid."""
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": str(STUBS)}
    p = subprocess.Popen(
        [sys.executable, "-m", "memtop", "run", "--no-tui", "--", sys.executable, "-c", textwrap.dedent(LOOP)]
        + [str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, p.communicate(timeout=30)
    yield json.loads(line)["pid"]
    stop.touch()
    p.communicate(timeout=60)
    assert p.returncode == 0


def _pipeline(frames: int, writer: Writer | None = None) -> Pipeline:
    """A live pipeline fed the demo's first ``frames`` frames, and on to the first with a GPU process
    and a watched one."""
    rec = Recording(demo_path())
    p = Pipeline(Status("live"), meta=rec.meta, writer=writer)
    for i, f in enumerate(rec.frames()):
        p.on_frame(f, tick=False)
        if i >= frames and f.gpus and f.gpus[0].processes and f.host is not None and f.host.procs:
            break
    return p


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_capture_from_the_live_view_is_written_and_recorded(tmp_path, job):
    rec_path = tmp_path / "run.memtop"
    writer = Writer(rec_path, Recording(demo_path()).meta)
    pipeline = _pipeline(40, writer)
    heard: list[tuple[str, str]] = []
    tracer = Tracer(
        TraceOptions(seconds=0.5, directory=tmp_path), pipeline, lambda s, line: heard.append((s, line))
    )
    assert tracer.capture(job)
    assert not tracer.capture(os.getpid())  # no agent here: one line, and the view goes on
    writer.close()
    stages = [s for s, _ in heard]
    assert stages[0] == "progress" and "done" in stages and stages[-1] == "failed"
    assert "memtop run" in heard[-1][1] and "\n" not in heard[-1][1]
    done = next(line for s, line in heard if s == "done")
    (out,) = tmp_path.glob("memtop-trace-*.json.gz")
    assert str(out) in done and "clocks aligned" in done
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = json.loads(gzip.decompress(out.read_bytes()))
    # the job's own CPU ranges are not asked for from the live view (--cpu-ops is memtop trace's)
    assert not [e for e in doc["traceEvents"] if e.get("name") == "step"]
    (cap,) = doc["metadata"]["captures"]
    assert cap["clock_residual_us"] is not None
    # the recording lists both captures, and so does its report
    rec = Recording(rec_path)
    first, second = rec.meta["captures"]
    assert first["outcome"] == "ok" and first["pids"] == [job] and first["file"] == str(out)
    assert second["outcome"] == "failed" and second["file"] is None
    rep = build_report(rec)
    assert [c["outcome"] for c in rep["captures"]] == ["ok", "failed"]
    text = render(rep, "text")
    assert "traces captured" in text and str(out) in text


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("cpu_ops", [False, True])
def test_the_jobs_cpu_ops_come_only_when_asked_and_on_memtops_clock(tmp_path, job, cpu_ops):
    """Without --cpu-ops the profiler (started from the agent's thread) records that thread's
    ranges only, memtop's clock marks; with it, the training thread's too, on memtop's clock."""
    from memtop.agent import injob
    from memtop.agent.capture import capture_trace
    from memtop.agent.client import hello

    out = tmp_path / "t.json.gz"
    result = capture_trace([hello(job)], 0.5, out, stacks=False, cpu_ops=cpu_ops)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    steps = [e for e in doc["traceEvents"] if e.get("name") == "step"]
    marks = [e for e in doc["traceEvents"] if str(e.get("name")).startswith(injob.MARK)]
    assert len(marks) == 2 * injob.CLOCK_MARKS and result.summary["captures"][0]["clock_residual_us"] >= 0
    if not cpu_ops:
        assert steps == []
        return
    (cap,) = doc["metadata"]["captures"]
    lo, hi = (t * 1e6 for t in cap["window_s"])
    # on memtop's clock: each step overlaps the window memtop noted (a step may begin before it)
    assert steps and all(e["ts"] + e["dur"] >= lo - 1e3 and e["ts"] <= hi + 1e3 for e in steps)


def test_a_report_of_a_recording_without_captures_has_no_captures_key():
    assert "captures" not in build_report(Recording(demo_path()))


def _verdicts(**labels: str) -> dict[int, Verdict]:
    return {int(g[3:]): Verdict(int(g[3:]), lab, 1.0, 60.0, "", "") for g, lab in labels.items()}


def test_trace_on_fires_when_a_verdict_turns_and_not_again_within_the_interval():
    pipeline = _pipeline(40)
    frame = pipeline.frame
    assert frame is not None and frame.gpus[0].processes
    pid = frame.gpus[0].processes[0].pid
    t = Tracer(TraceOptions(on=frozenset({"sync"}), every_s=300), pipeline)
    bare = replace(frame, gpus=tuple(replace(g, processes=()) for g in frame.gpus))
    assert t.due(_verdicts(gpu0="sync"), bare) == []  # no process on it yet: the turn waits for one
    assert t.due(_verdicts(gpu0="sync"), frame) == [(0, pid, "sync")]
    t = Tracer(TraceOptions(on=frozenset({"sync"}), every_s=300), pipeline)
    assert t.due(_verdicts(gpu0="compute"), frame) == []
    assert t.due(_verdicts(gpu0="sync"), frame) == [(0, pid, "sync")]
    assert t.due(_verdicts(gpu0="sync"), frame) == []  # no turn: nothing
    t.due(_verdicts(gpu0="compute"), frame)
    assert t.due(_verdicts(gpu0="sync"), frame) == []  # turned again, within --trace-every
    t._last = {p: v - 301 for p, v in t._last.items()}  # (as if 301 s had passed)
    t.due(_verdicts(gpu0="compute"), frame)
    assert t.due(_verdicts(gpu0="sync"), frame) == [(0, pid, "sync")]


def test_the_x_key_is_offered_live_only_and_free():
    keys = [k for k in KEYS if k.action == "trace"]
    assert [k.keys for k in keys] == ["x"] and keys[0].modes == frozenset({"live"})
    assert sum("x" in k.keys.split(",") for k in KEYS) == 1


class _NoSampler:
    stacks = None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_x_captures_the_selected_process_and_says_where_the_file_went(tmp_path, job):
    import argparse

    p = _pipeline(40)
    assert p.frame is not None and p.frame.host is not None
    host = p.frame.host
    me = replace(host.procs[0], pid=job)
    p.on_frame(replace(p.frame, host=replace(host, procs=(me, *host.procs[1:]))), tick=False)
    args = argparse.Namespace(trace_seconds=0.5, trace_dir=str(tmp_path))
    app = MemtopApp(p, LiveController(args, p, _NoSampler()), hangup_guard=False)
    # every stage's line as the app takes it: each replaces the one shown before, and a look at the
    # screen's notices every 0.2 s missed the capture's stage on a loaded machine (merging came first)
    seen: list[str] = []
    say = app._trace_say
    app._trace_say = lambda note: (seen.append(note.line), say(note))[-1]  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        assert await until(pilot, lambda: app.selected_pid == job)  # the first paint selects it
        assert "trace" in {k.action for k in app.enabled_keys()}
        await pilot.press("x")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            await pilot.pause(0.2)
            if any("wrote" in n.message for n in app._notifications):
                break
        said = [n.message for n in app._notifications]
        assert any(m.startswith("trace: capturing 0.5 s of pid") for m in seen), seen
        (out,) = tmp_path.glob("memtop-trace-*.json.gz")
        # one notice for the capture (and its warnings): each stage replaced the one before, the outcome stays
        # (the app's other notices, none of the capture's, are not counted)
        shown = [m for m in said if m.startswith("trace:") and not m.startswith("trace: warning:")]
        assert len(shown) == 1, said
        (done,) = shown
        assert str(out) in done and "clocks aligned" in done, said


async def test_a_capture_stage_is_replaced_though_the_next_came_before_it_was_shown(tmp_path):
    """The tracer's thread posts its stages faster than the app shows them (a loaded machine): every
    note is queued before the first is handled, so a stage's notice is still on its way when the next
    stage replaces it. Only the outcome and the warnings stay (a 'capturing' notice once stayed beside
    the 'wrote' one: the full suite's loaded run 2, 2026-11-28)."""
    import argparse

    from memtop.tui.app import TraceNote

    p = _pipeline(40)
    args = argparse.Namespace(trace_seconds=0.5, trace_dir=str(tmp_path))
    app = MemtopApp(p, LiveController(args, p, _NoSampler()), hangup_guard=False)
    async with app.run_test(size=(160, 45)) as pilot:
        for stage, line in (
            ("progress", "trace: asking the agent"),
            ("progress", "trace: capturing 0.5 s"),
            ("warning", "trace: warning: no CUDA"),
            ("progress", "trace: merging"),
            ("done", "trace: wrote F"),
        ):
            app.post_message(TraceNote(stage, line))
        assert await until(pilot, lambda: any(n.message == "trace: wrote F" for n in app._notifications))
        await pilot.pause()
        assert sorted(n.message for n in app._notifications) == ["trace: warning: no CUDA", "trace: wrote F"]


def test_the_report_lists_the_recordings_captures_and_skips_damaged_entries(tmp_path):
    rec = Recording(demo_path())
    path = tmp_path / "r.memtop"
    w = Writer(path, rec.meta)
    for i, f in enumerate(rec.frames()):
        w.add(f)
        if i > 50:
            break
    good = {
        "t": rec.t0 + 3,
        "pids": [7, 8],
        "trigger": "sync on GPU 0",
        "outcome": "ok",
        "file": "/x/t.json.gz",
    }
    w.set_meta("captures", [good, {"t": "soon", "pids": [1]}, {"t": 1.0, "pids": [True]}, "junk"])
    w.close()
    rep = build_report(Recording(path))
    (c,) = rep["captures"]
    assert c["pids"] == [7, 8] and c["at_s"] == 3.0 and c["outcome"] == "ok" and c["file"] == "/x/t.json.gz"
    md = render(rep, "markdown")
    assert "## traces captured" in md and "- at 0:00:03 (sync on GPU 0) pid 7, 8: /x/t.json.gz" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace-on", "sync,nap"], "unknown label 'nap'"),
        (["--trace-every", "5"], "must be between 30 s and a year"),
        (["--trace-dir", "/nonexistent/dir"], "--trace-dir /nonexistent/dir: no such directory"),
        (["run", "--no-tui", "--trace-on", "sync", "--", "true"], "--trace-on needs the live view"),
    ],
)
def test_bad_trace_flags_are_one_line_and_exit_2(args, message):
    r = subprocess.run([sys.executable, "-m", "memtop", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") <= 1, r.stderr


class _VirtualClock:
    """injob's `time` on a virtual clock: each sleep moves it on, and ``at_sleep(n)`` runs on the
    n-th sleep (the steps of a wait in order, with no wall clock in the test)."""

    def __init__(self, at_sleep) -> None:
        self.now, self.sleeps, self.at_sleep = 100.0, 0, at_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        self.at_sleep(self.sleeps)


def _importing_thread(tmp_path, monkeypatch, name: str):
    """A thread of this process inside an import until the returned function is called (the module
    reads one byte from a pipe the test writes), once it is seen inside it."""
    import threading

    from memtop.agent import injob

    r, w = os.pipe()
    (tmp_path / f"{name}.py").write_text(f"import os\nos.read({r}, 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importer = threading.Thread(target=__import__, args=(name,), daemon=True)
    importer.start()
    deadline = time.monotonic() + 60  # (a bound for a loaded machine: the thread reaches its import)
    while not injob._importing(threading.get_ident()):
        assert time.monotonic() < deadline and importer.is_alive()
        time.sleep(0.01)

    def end() -> None:
        os.write(w, b"x")
        importer.join()
        os.close(r)
        os.close(w)

    return importer, end


def test_a_capture_waits_while_the_job_is_importing(tmp_path, monkeypatch):
    """The profiler's start imports parts of torch; the job importing them at the same moment got a
    half-initialised module on the H100 (its optimizer's first use imports torch._dynamo). On a
    virtual clock: the window starts SETTLE_S after the job's import ends, not before."""
    from memtop.agent import injob

    importer, end = _importing_thread(tmp_path, monkeypatch, "slow_module_for_settle")
    ended: list[float] = []

    def at_sleep(n: int) -> None:
        if n == 5:  # during the fifth 50 ms sleep of the wait, the job's import ends
            end()
            ended.append(clock.now - 0.05)  # (the last check that saw it importing)

    clock = _VirtualClock(at_sleep)
    monkeypatch.setattr(injob, "time", clock)
    warnings = injob._settle(clock.now)
    assert not importer.is_alive() and ended  # the window starts after the import ended
    assert clock.now - ended[0] >= injob.SETTLE_S and warnings and "importing" in warnings[0]


def test_a_capture_is_refused_while_the_job_keeps_importing(tmp_path, monkeypatch):
    from memtop.agent import injob

    _, end = _importing_thread(tmp_path, monkeypatch, "slow_module_for_settle_2")
    clock = _VirtualClock(lambda n: None)
    monkeypatch.setattr(injob, "time", clock)
    try:
        with pytest.raises(injob.CaptureError, match="kept importing"):
            injob._settle(clock.now)
    finally:
        end()
    assert clock.now - 100.0 >= injob.SETTLE_MAX_S


def test_x_on_one_rank_takes_every_rank_of_its_job():
    """Two DDP ranks on two GPUs (heldout_ddp_s13 at 44 s): each rank's peers are the other rank;
    its DataLoader workers hold no GPU and are not asked."""
    from memtop.agent.tracer import _job_peers

    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop")
    *_, frame = rec.frames(end=rec.t0 + 44.5)
    ranks = sorted({p.pid for g in frame.gpus for p in g.processes})
    assert len(ranks) == 2
    assert _job_peers(ranks[0], frame) == [ranks[1]] and _job_peers(ranks[1], frame) == [ranks[0]]
    assert _job_peers(12345678, frame) == []
