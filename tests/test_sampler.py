"""The sampler on recorded H100 NVML answers: Frames at the GPU cadence, faults become notes."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from conftest import DATA
from memtop.collectors.nvml_calls import ReplayNvml

from memtop.live.sampler import Sampler, SamplerConfig


def _run(secs: float, breaker=None):
    frames = []
    s = Sampler(
        SamplerConfig(nvml=ReplayNvml.load(DATA / "nvml_h100.json"), stacks=False, perf=False),
        on_frame=frames.append,
    )
    if breaker:
        breaker(s)
    s.start()
    threading.Event().wait(secs)
    s.stop()
    return s, frames


def test_frames_at_ten_hertz_with_gpu_and_host_parts():
    s, frames = _run(1.5)
    assert 12 <= len(frames) <= 17
    assert all(f.gpus and f.gpus[0].name == "NVIDIA H100 80GB HBM3" for f in frames[2:])
    assert len({f.gpus[0].t for f in frames if f.gpus}) >= 5  # GPU samples keep coming, not one repeated
    assert any(f.host is not None for f in frames)
    ts = [f.t for f in frames]
    assert ts == sorted(ts)
    assert any(c.source == "gpm" and c.ok for c in frames[-1].caps)
    assert s.missed == 0


def test_a_failing_collector_becomes_a_note_and_the_run_goes_on():
    def breaker(s):
        def boom(now):
            raise OSError("disk on fire")

        s.host.sample = boom

    _, frames = _run(1.5, breaker)
    assert len(frames) >= 12 and frames[-1].gpus  # GPU sampling carried on
    assert any("host collector failed: OSError: disk on fire" in n for n in frames[-1].notes)


def test_jittered_collector_samples_at_random_intervals_around_its_rate():
    calls = []

    def breaker(s):
        real = s.host.sample
        s.host.interval, s.host.jitter = 0.05, 0.3

        def timed(now):
            calls.append(now)
            return real(now)

        s.host.sample = timed

    _run(1.5, breaker)
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(gaps) >= 15
    assert 0.04 <= sum(gaps) / len(gaps) <= 0.065  # the mean rate is kept
    assert max(gaps) - min(gaps) > 0.01  # but not a fixed period


def _stacks_sampler(pid: int, lean: bool = False) -> Sampler:
    """A sampler of ``pid``'s stacks at 0.5 s over the recorded H100's NVML; the test feeds its frames."""
    return Sampler(
        SamplerConfig(
            nvml=ReplayNvml.load(DATA / "nvml_h100.json"),
            stacks=True,
            perf=False,
            stack_interval=0.5,
            pids=(pid,),
            lean=lean,
        ),
        on_frame=lambda f: None,
    )


def test_stacks_speed_up_exactly_where_sync_and_cpu_bound_look_alike():
    """On the frames of a real H100 run: fast stack dumps in sync-stall phases (GPU partly busy,
    its process burning a core), normal ones in compute and idle phases."""
    from conftest import REC

    from memtop.storage.store import Recording

    rec = Recording(REC[6])
    marks = rec.markers()
    pid = next(p.pid for g in rec.seek(marks[0].t0 + 1).gpus for p in g.processes)
    s = _stacks_sampler(pid)
    fast: dict[str, list[bool]] = {}
    for f in rec.frames():
        m = next((m for m in marks if m.t0 + 1.5 <= f.t <= m.t1), None)
        if m is None or f.host is None or not f.gpus:
            continue
        s._gpus, s._host = {g.index: g for g in f.gpus}, f.host
        s._retarget()
        s._pace_stacks()
        fast.setdefault(m.label, []).append(s.stacks.interval == 0.25)
    assert sum(fast["sync"]) / len(fast["sync"]) > 0.9
    assert not any(fast["compute"]) and not any(fast["idle"])


def test_a_live_view_ends_the_fast_pace_once_its_stacks_read_a_steady_sync():
    """The same run's dumps fed to a live view's sampler: where the last dumps found the main thread in
    a sync wait often (SETTLED_RATIO x the rule's line) the pace goes back to normal, in a CPU-bound
    phase (no sync waits) it stays fast; a recording's sampler keeps the fast pace everywhere."""
    from conftest import REC

    from memtop.live.sampler import SETTLED_N
    from memtop.storage.store import Recording

    rec = Recording(REC[6])
    marks = rec.markers()
    pid = next(p.pid for g in rec.seek(marks[0].t0 + 1).gpus for p in g.processes)
    fast: dict[bool, dict[tuple[str, float], list[bool]]] = {}
    for lean in (True, False):
        s = _stacks_sampler(pid, lean)
        assert (s.sync is not None) == lean
        seen: set[float] = set()
        for f in rec.frames():
            s._absorb([x for x in f.stacks if x.t not in seen])
            seen.update(x.t for x in f.stacks)
            m = next((m for m in marks if m.t0 + 1.5 <= f.t <= m.t1), None)
            if m is None or f.host is None or not f.gpus:
                continue
            s._gpus, s._host = {g.index: g for g in f.gpus}, f.host
            s._retarget()
            s._pace_stacks(f.t)
            fast.setdefault(lean, {}).setdefault((m.label, m.t0), []).append(s.stacks.interval == 0.25)
    share = {lean: {k: sum(v) / len(v) for k, v in by.items()} for lean, by in fast.items()}
    decided = [k for k, v in share[False].items() if v == 1.0]  # fast for a recording
    assert {label for label, _ in decided} == {"sync", "cpu"}
    for k in decided:
        if k[0] == "cpu":
            assert share[True][k] >= 0.9  # no sync waits: every dump may decide
    sync = [share[True][k] for k in decided if k[0] == "sync"]
    assert min(sync) == 0.0  # a steady sync: normal pace once SETTLED_N dumps read it
    assert sum(sync) / len(sync) < 0.5
    assert SETTLED_N >= 8  # (half of them at the normal pace still read the rule's line thrice over)


def test_native_dumps_are_asked_for_in_opaque_waits_only_and_sparsely():
    """Replaying a real H100 run (train_torch_s50) through the sampler: a --native dump is asked for
    only where the main thread waited in native code without the GIL in no wait its Python stack
    names, beside an under-used GPU, and at most once per NATIVE_EVERY_S."""
    from memtop.collectors.stacks import NATIVE_EVERY_S

    from memtop.storage.store import Recording

    rec = Recording(DATA / "train_torch_s50.memtop")
    marks = rec.markers()
    pids = tuple({p.pid for f in rec.frames() for g in f.gpus for p in g.processes})
    s = Sampler(
        SamplerConfig(
            nvml=ReplayNvml.load(DATA / "nvml_h100.json"), stacks=True, native=True, perf=False, pids=pids
        ),
        on_frame=lambda f: None,
    )
    assert s.stacks is not None
    asked = []
    for f in rec.frames():
        if f.host is None or not f.gpus:
            continue
        s._gpus, s._host = {g.index: g for g in f.gpus}, f.host
        s._retarget()
        s._stacks = {x.pid: x for x in f.stacks}
        before = s.stacks.native_asked
        s._pace_stacks(f.t)
        if s.stacks.native_asked > before:
            main = s._stacks[pids[0]].main
            assert main is not None and main.klass == "other" and not main.owns_gil
            assert 10 <= f.gpus[0].engine < 80
            asked.append(f.t)
    assert 1 <= len(asked) <= rec.duration / NATIVE_EVERY_S + 1
    assert all(b - a >= NATIVE_EVERY_S for a, b in zip(asked, asked[1:]))
    phases = {next((m.label for m in marks if m.t0 <= t <= m.t1), "-") for t in asked}
    assert not phases & {"idle", "compute", "memory", "transfer"}, phases
    # without --native (the default): the same run asks for none (the dumps pause the process)
    s.cfg.native = False
    s.stacks._native_last.clear()
    for f in rec.frames():
        if f.host is not None and f.gpus:
            s._gpus, s._host, s._stacks = {g.index: g for g in f.gpus}, f.host, {x.pid: x for x in f.stacks}
            s._retarget()
            s._pace_stacks(f.t)
    assert s.stacks.native_asked == len(asked)


def test_config_from_the_command_line_and_a_missing_pid():
    import os

    import pytest

    from memtop.cli import build_parser
    from memtop.core.errors import UserError

    args = build_parser().parse_args(["record", "-o", "x.memtop", "--interval", "1", "--no-gpm"])
    cfg = SamplerConfig.from_args(args, recording=True)
    assert (cfg.gpu_interval, cfg.host_interval, cfg.use_gpm, cfg.series) == (1.0, 1.0, False, True)
    fast = SamplerConfig.from_args(build_parser().parse_args(["--interval", "0.1"]), recording=False)
    assert fast.host_interval == 0.5 and not fast.series and fast.stacks  # the host never above 2 Hz
    mine = build_parser().parse_args(["--pid", str(os.getpid())])
    assert SamplerConfig.from_args(mine, recording=False).pids == (os.getpid(),)
    gone = build_parser().parse_args(["--pid", "4194303"])
    with pytest.raises(UserError, match="no process with PID 4194303"):
        SamplerConfig.from_args(gone, recording=False)


def test_run_meta_names_the_recorded_gpu_and_no_environment():
    s = Sampler(
        SamplerConfig(nvml=ReplayNvml.load(DATA / "nvml_h100.json"), stacks=False, perf=False),
        on_frame=lambda f: None,
    )
    s.nvml.start()
    meta = s.run_meta()
    s.nvml.stop()
    assert meta["driver"] == "580.159.04"
    (g,) = meta["gpus"]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["mode"] == "gpm" and g["pci_bus_id"]
    assert meta["cadence"]["gpu_s"] == 0.1 and meta["cadence"]["stacks_s"] is None
    assert "env" not in meta and not any("PATH=" in str(v) for v in meta.values())


def test_the_first_frame_carries_the_first_gpu_reading():
    """The live view paints the first reading when it arrives; at --interval 1 a first Frame built before
    NVML answered would hold it back a whole second."""
    nv = ReplayNvml.load(DATA / "nvml_h100.json")
    power = nv.power_mw

    def slow_first_power(i):  # a real driver's first answers take a while
        if not calls:
            threading.Event().wait(0.2)
        calls.append(i)
        return power(i)

    calls: list[int] = []
    nv.power_mw = slow_first_power
    frames = []
    s = Sampler(SamplerConfig(nvml=nv, gpu_interval=1.0, stacks=False, perf=False), on_frame=frames.append)
    s.start()
    end = time.monotonic() + 60  # (the first Frame, however late a loaded machine runs the thread)
    while not frames and time.monotonic() < end:
        threading.Event().wait(0.05)
    s.stop()
    assert frames and frames[0].gpus and frames[0].gpus[0].power_w is not None


def test_a_native_dump_reaches_a_frame_though_a_plain_sample_follows_at_once():
    """On two H100s the ~1 s native dump made the stacks thread late; its next cycle's plain sample
    replaced the dump before the next Frame, so `s` showed nothing. Real recorded stacks stand in
    for both dumps (the order of arrival is what is tested; tests/test_stacks.py takes real ones)."""
    from dataclasses import replace

    from memtop.storage.store import Recording

    real = [x for f in Recording(DATA / "train_torch_s50.memtop").frames() for x in f.stacks if x.threads][:3]
    s = Sampler(
        SamplerConfig(nvml=ReplayNvml.load(DATA / "nvml_h100.json"), stacks=False, perf=False),
        on_frame=lambda f: None,
    )
    native = replace(real[0], native=True)
    s._absorb([native])
    s._absorb([real[1]])  # the next cycle, before any Frame
    first = s.snapshot(1.0)
    assert [x.native for x in first.stacks] == [True] and first.stacks[0] is native
    second = s.snapshot(1.1)
    assert second.stacks == (real[1],)  # then the plain samples go on as before
    s._absorb([real[2]])
    assert s.snapshot(1.2).stacks == (real[2],)


def test_a_live_view_reads_stacks_sparsely_on_saturated_gpus_only():
    """On the frames of a real H100 run: a live view (lean) marks the process as on a saturated GPU in
    its compute phases and never in a sync stall or an idle phase; a recording never does."""
    from conftest import REC

    from memtop.storage.store import Recording

    rec = Recording(REC[6])
    marks = rec.markers()
    pid = next(p.pid for g in rec.seek(marks[0].t0 + 1).gpus for p in g.processes)
    cfg = SamplerConfig(nvml=ReplayNvml.load(DATA / "nvml_h100.json"), perf=False, pids=(pid,), lean=True)
    live = Sampler(cfg, on_frame=lambda f: None)
    recorder = Sampler(replace(cfg, lean=False), on_frame=lambda f: None)
    sparse: dict[str, list[bool]] = {}
    for f in rec.frames():
        m = next((m for m in marks if m.t0 + 1.5 <= f.t <= m.t1), None)
        if m is None or f.host is None or not f.gpus:
            continue
        for s in (live, recorder):
            s._gpus, s._host = {g.index: g for g in f.gpus}, f.host
            s._retarget()
            s._pace_stacks()
        assert live.stacks is not None and recorder.stacks is not None
        sparse.setdefault(m.label, []).append(pid in live.stacks.sparse)
        assert not recorder.stacks.sparse
    assert sum(sparse["compute"]) / len(sparse["compute"]) > 0.8
    assert not any(sparse["sync"]) and not any(sparse["idle"])


def test_the_live_view_reads_the_gpu_at_5_hz_and_a_recording_at_10():
    from memtop.cli import build_parser
    from memtop.live.sampler import LIVE_GPU_S, RECORD_GPU_S

    def cfg(argv: list[str], recording: bool) -> SamplerConfig:
        return SamplerConfig.from_args(build_parser().parse_args(argv), recording=recording)

    assert (LIVE_GPU_S, RECORD_GPU_S) == (0.2, 0.1)
    live = cfg([], recording=False)
    assert (live.gpu_interval, live.lean) == (0.2, True)
    assert (cfg(["--record", "x.memtop"], recording=True).gpu_interval, cfg([], True).lean) == (0.1, False)
    assert cfg(["--interval", "0.1"], recording=False).gpu_interval == 0.1  # asked for: as asked
    assert cfg(["record", "-o", "x.memtop"], recording=True).gpu_interval == 0.1
