"""Health events, the hardware-first verdict and energy by phase.

Xids and uncorrectable ECC errors cannot be caused safely on a real GPU: these tests replay the NVML
replies a real H100 gave (tests/data/nvml_health_h100.json: its health counters, energy counter and an
empty Xid event set, recorded under a bf16 GEMM) with later replies changed the way the driver reports
such faults: the Xid numbers of NVIDIA's catalogue (48 double-bit ECC, 94 contained ECC, 79 fallen off
the bus), the ECC and row-remapper counters that move with them, NVML_ERROR_GPU_IS_LOST (15).
"""

from __future__ import annotations

import copy
import dataclasses
import json

import jsonschema
import numpy as np
import pytest
from conftest import DATA
from memtop.collectors.nvml import HEALTH_EVERY_S, NvmlCollector
from memtop.collectors.nvml_calls import ReplayNvml

from memtop.analysis import energy, health
from memtop.analysis.phases import LABELS
from memtop.analysis.verdict import Verdict
from memtop.core.model import Frame, GpuSample, PcieLink
from memtop.live.pipeline import Pipeline, Status
from memtop.outputs.report import build_report, render
from memtop.storage.store import Recording, Writer

FIXTURE = DATA / "nvml_health_h100.json"
LABELS_ALL = (*LABELS, "warmup", energy.UNLABELLED)


def _recorded() -> list[dict]:
    return json.loads(FIXTURE.read_text())["calls"]


def _baseline() -> dict:
    """The health reply the H100 gave (every counter it has, at its real values)."""
    return next(e["r"] for e in _recorded() if e["m"] == "health")


def _log(healths: list[dict], xids: list[list[int]], lost_after: int | None = None) -> list[dict]:
    """The recorded log with its health and Xid replies replaced by these, in order."""
    calls = [e for e in _recorded() if e["m"] not in ("health", "xids")]
    calls += [{"m": "health", "a": [0], "r": h} for h in healths]
    calls += [{"m": "xids", "a": [0], "r": x} for x in xids]
    if lost_after is not None:  # the utilization call fails with NVML_ERROR_GPU_IS_LOST from then on
        util = [e for e in calls if e["m"] == "utilization"]
        for e in util[lost_after:]:
            e.pop("r", None)
            e["e"] = [15, "GPU is lost"]
    return calls


def _run(log: list[dict], seconds: float, step: float = 0.1) -> list[GpuSample]:
    col = NvmlCollector(ReplayNvml(log), 0.1, offset=0.0, series=False)
    col.start()
    (r,) = col.readers
    out = []
    for k in range(int(seconds / step)):
        out += [p for p in r.sample(100.0 + k * step) if isinstance(p, GpuSample)]
    return out


def _with(base: dict, **changes: int) -> dict:
    h = copy.deepcopy(base)
    h.update(changes)
    return h


def test_the_recorded_h100_gives_its_health_counters_and_energy():
    base = _baseline()
    # an H100 remaps rows (no page retirement) and has ECC, PCIe replay and violation counters
    for k in (
        "ecc_dbe_volatile",
        "remap_uncorrectable",
        "remap_pending",
        "pcie_replay",
        "violation_power_ns",
    ):
        assert k in base
    gs = _run(_recorded(), 3.0)
    assert gs[0].health is not None and health.summary(gs[0].health) == base
    e = [g.energy_j for g in gs]
    assert all(v is not None for v in e) and e[-1] >= e[0] > 0
    assert not [ev for ev in health.health_events(gs) if ev.severity == "critical"]


def test_a_xid_brings_the_counters_forward_and_both_are_events_within_a_second():
    """Xid 48 (double-bit ECC) arrives at 100.0 + 2 s; the counters it moved are read the same second."""
    base = _baseline()
    bad = _with(base, ecc_dbe_volatile=base["ecc_dbe_volatile"] + 1, remap_uncorrectable=1, remap_pending=1)
    gs = _run(_log([base, bad], [[], [], [48], []]), 4.0)
    evs = health.health_events(gs)
    kinds = [e.kind for e in evs]
    assert kinds[0] == "xid" and "Xid 48: double-bit ECC error" in evs[0].text
    assert {"ecc_dbe_volatile", "remap_uncorrectable", "remap_pending"} <= set(kinds)
    xid_read = next(g.t for g in gs if g.health is not None and g.health.xids)
    assert all(e.t == xid_read for e in evs) and 102.0 <= xid_read < 103.0
    pending = next(e for e in evs if e.kind == "remap_pending")
    assert pending.severity == "critical" and pending.command == health.CMD_REMAP


def test_counters_are_read_every_few_seconds_not_every_sample():
    base = _baseline()
    gs = _run(_log([base, base, base], [[]]), 12.0)
    reads = sorted({g.health.t for g in gs if g.health is not None})
    assert len(reads) == 3 and reads[1] - reads[0] >= HEALTH_EVERY_S


def test_a_growing_correctable_counter_is_a_warning_and_history_before_the_start_is_not_an_event():
    base = _with(_baseline(), ecc_sbe_aggregate=7, pcie_replay=3)  # the board's past: no event
    later = _with(base, pcie_replay=40)
    gs = _run(_log([base, later], [[]]), 6.0)
    (ev,) = health.health_events(gs)
    assert ev.kind == "pcie_replay" and ev.severity == "warning" and "+37" in ev.text
    assert ev.command == health.CMD_PCIE


def test_a_gpu_that_falls_off_the_bus_is_one_critical_event():
    gs = _run(_log([_baseline()], [[], [79]], lost_after=12), 3.0)
    evs = health.health_events(gs)
    assert [e.kind for e in evs] == ["xid", "lost"]
    assert "fallen off the bus" in evs[0].text and gs[-1].mode == "lost"


def test_a_narrowed_link_is_an_event_and_an_idle_generation_drop_is_not():
    tr = health.HealthTracker(0)
    full = PcieLink(5, 16, 5, 16, 63e9)
    idle_gen1 = PcieLink(1, 16, 5, 16, 4e9)
    x8 = PcieLink(5, 8, 5, 16, 31e9)
    g = GpuSample(1.0, 0, "u", "n", "gpm", util=0.0, link=full)
    assert tr.feed(g) == []
    assert tr.feed(GpuSample(2.0, 0, "u", "n", "gpm", util=0.0, link=idle_gen1)) == []
    (ev,) = tr.feed(GpuSample(3.0, 0, "u", "n", "gpm", util=99.0, link=x8))
    assert ev.kind == "link" and "Gen5 x8" in ev.text and "was Gen1 x16" in ev.text


def _verdict(**kw) -> Verdict:
    return Verdict(3, "input", 0.6, 60.0, "GPU 3 input-bound", "ev", ("a",), "nsys profile ...", **kw)


def test_hardware_first_names_the_event_and_its_command_instead_of_the_profiler():
    ev = health.HealthEvent(50.0, 3, "link", "warning", "PCIe link Gen5 x8 (max Gen5 x16)", health.CMD_PCIE)
    g = GpuSample(60.0, 3, "u", "n", "gpm", link=PcieLink(5, 8, 5, 16, 31e9))
    v = health.hardware_first(_verdict(straggler=True), [ev], g)
    assert "hardware first: PCIe link Gen5 x8" in v.headline and "10 s ago" in v.headline
    assert v.command == health.CMD_PCIE and v.advice[0].startswith("check the GPU before profiling")
    # a warning long before the window is not this problem's cause; a narrowed link now still is
    old = health.HealthEvent(-500.0, 3, "pcie_replay", "warning", "PCIe replays: +1", health.CMD_PCIE)
    assert health.hardware_first(_verdict(), [old], g).command == health.CMD_PCIE
    healthy_now = GpuSample(60.0, 3, "u", "n", "gpm", link=PcieLink(5, 16, 5, 16, 63e9))
    assert health.hardware_first(_verdict(), [old], healthy_now).command == "nsys profile ..."


def test_a_busy_healthy_gpu_keeps_its_verdict_unless_the_event_is_critical():
    busy = Verdict(0, "compute", 0.9, 60.0, "GPU 0 busy", "ev")
    warn = health.HealthEvent(
        55.0, 0, "ecc_sbe_volatile", "warning", "corrected ECC error: +1", health.CMD_ECC
    )
    g = GpuSample(60.0, 0, "u", "n", "gpm")
    assert health.hardware_first(busy, [warn], g) is busy
    xid = health.HealthEvent(55.0, 0, "xid", "critical", health.xid_text(94), health.CMD_REMAP)
    assert health.hardware_first(busy, [warn, xid], g).command == health.CMD_REMAP


def _write(tmp_path, gs: list[GpuSample]) -> Recording:
    path = tmp_path / "h.memtop"
    w = Writer(path, {"gpus": [{"index": 0, "name": gs[0].name, "uuid": gs[0].uuid, "mode": "gpm"}]})
    for g in gs:
        w.add(Frame(g.t, gpus=(g,)))
    w.close()
    return Recording(path)


def test_events_survive_the_recording_and_the_report_names_them_first(tmp_path):
    base = _baseline()
    bad = _with(base, ecc_dbe_volatile=base["ecc_dbe_volatile"] + 2, remap_uncorrectable=2, remap_pending=1)
    gs = _run(_log([base, bad], [[], [], [], [94], []]), 10.0)
    live = health.health_events(gs)
    rec = _write(tmp_path, gs)
    # the store keeps a read only when a counter or the Xids changed
    n = rec.query("SELECT count(*) FROM health").fetchone()[0]
    assert n == 3  # the baseline, the Xid read, the read after it (its Xids empty again)
    (stored,) = rec.health_samples(rec.t0, rec.t1).values()
    assert [(e.t, e.kind, e.text) for e in health.health_events(stored)] == [
        (e.t, e.kind, e.text) for e in live
    ]
    # Frames read back carry the same health reads
    assert [g.health for f in rec.frames() for g in f.gpus] == [g.health for g in gs]
    rep = build_report(rec)
    (g,) = rep["gpus"]
    assert [e["kind"] for e in g["health"]["events"]][0] == "xid"
    assert g["health"]["counters"]["remap_pending"] == 1
    assert (
        "hardware first: Xid 94" in g["verdict"]["headline"] and g["verdict"]["command"] == health.CMD_REMAP
    )
    text = render(rep, "text")
    assert "health: " in text and "(1 critical)" not in text and "Xid 94: contained ECC error" in text


def test_energy_of_a_recording_is_the_counter_rise_and_its_split_sums_to_it(tmp_path):
    gs = _run(_recorded(), 8.0)
    rec = _write(tmp_path, gs)
    (g,) = build_report(rec)["gpus"]
    e = g["energy"]
    read = [x for x in gs if x.health is not None and x.health.t == x.t]
    last = read[-1].t  # the counter is read with the health counters, every HEALTH_EVERY_S
    rise = read[-1].energy_j - gs[0].energy_j
    tail = sum(x.power_w * (x.t - y.t) for y, x in zip(gs, gs[1:], strict=False) if x.t > last)
    assert rise > 0 and e["joules"] == pytest.approx(rise + tail, abs=1.0)  # (stored to 0.1 J, 0.1 W)
    assert sum(p["joules"] for p in e["by_phase"].values()) == pytest.approx(e["joules"], abs=0.5)
    assert sum(p["share"] for p in e["by_phase"].values()) == pytest.approx(1.0, abs=0.01)


def test_split_shares_each_rise_by_power_and_gives_unlabelled_bins_their_part():
    t = np.arange(0.0, 10.0, 0.1)
    p = np.where(t < 5.0, 600.0, 100.0)  # a busy half, then a quiet one
    e = np.where(t < 8.95, 1000.0, 1000.0 + 3500.0)  # read at the start and at 9.0 s
    bins = np.arange(0.0, 10.0, 0.5)
    labels = np.array(["compute" if b < 5.0 else "idle" for b in bins], dtype=object)
    got = energy.split(t, e, p, bins, labels, 0.5, tail=False)
    assert sum(got.values()) == pytest.approx(3500.0)
    # 600 W for ~4.9 s against 100 W for 4 s: the rise goes ~88 / 12
    assert got["compute"] / 3500.0 == pytest.approx(600 * 4.9 / (600 * 4.9 + 100 * 4.0), rel=0.02)
    # after the last read, power x time stands in (a report's end); live waits for the next read
    with_tail = energy.split(t, e, p, bins, labels, 0.5)
    assert with_tail["idle"] - got["idle"] == pytest.approx(100.0 * 0.9, rel=0.12)
    # bins without a label count as unlabelled; a counter that went back (a driver reload) gives nothing
    e2 = e.copy()
    e2[95:] = 10.0
    part = energy.split(t, e2, p, bins[:4], labels[:4], 0.5, tail=False)
    assert sum(part.values()) == pytest.approx(3500.0) and part[energy.UNLABELLED] > 0


def test_the_pipeline_marks_health_events_and_puts_the_hardware_first():
    base = _baseline()
    bad = _with(base, remap_pending=1)
    gs = _run(_log([base, bad], [[], [], [48], []]), 4.0)
    p = Pipeline(Status("live"))
    for g in gs:
        p.on_frame(Frame(g.t, gpus=(g,)), tick=False)
    v = p.view()
    assert [e.kind for e in v.health][:1] == ["xid"]
    assert any(e.kind == "health" and "Xid 48" in e.text for e in v.events)


def test_old_recordings_have_no_health_or_energy_and_still_report(tmp_path):
    rec = Recording(DATA / "labelled_s2.memtop")
    rep = build_report(rec)
    assert all("energy" not in g and "health" not in g for g in rep["gpus"]) and "energy_jobs" not in rep


def test_serve_and_snapshot_export_health_and_energy_by_phase(tmp_path):
    """`memtop serve --replay` over a recording of replayed replies with a Xid 94 early in it: the
    counters, the Xid and energy by phase come out of real HTTP, the snapshot against its schema."""
    import subprocess
    import time
    import urllib.request

    import jsonschema
    from netutil import free_ports, memtop, stop, wait_ready
    from prometheus_client.parser import text_string_to_metric_families

    base = _baseline()
    gs = _run(_log([base, _with(base, remap_pending=1)], [[]] * 8 + [[94], []]), 30.0)
    rec = _write(tmp_path, gs)
    (port,) = free_ports(1)
    p = memtop("serve", "--replay", str(rec.path), "--port", str(port), stderr=subprocess.PIPE)
    try:
        wait_ready(port, proc=p)
        end = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
            xids = [s for s in fams["memtop_gpu_health_events"].samples if s.labels["xid"] == "94"]
            joules = [s for s in fams["memtop_gpu_energy_joules"].samples if s.name.endswith("_total")]
            if (xids and joules) or time.monotonic() > end:
                break
            time.sleep(0.5)
        assert xids and xids[0].value >= 1 and xids[0].labels["kind"] == "xid"
        assert joules and all(s.value >= 0 for s in joules) and sum(s.value for s in joules) > 0
        assert {s.labels["phase"] for s in joules} <= {*LABELS_ALL}
        (pending,) = fams["memtop_gpu_row_remap_pending"].samples
        assert pending.value in (0, 1) and fams["memtop_gpu_ecc_dbe_volatile"].type == "counter"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot.json", timeout=30) as r:
            snap = json.loads(r.read())
        schema = json.loads((DATA.parent.parent / "docs" / "snapshot.schema.json").read_text())
        jsonschema.validate(snap, schema)
        (g,) = snap["gpus"]
        assert "remap_pending" in g["health"]["counters"] and g["energy"]["source"] == energy.SOURCE
    finally:
        stop(p)


def test_roofline_point_is_pipe_activity_times_the_datasheet_peak_at_the_clock_run():
    from memtop.analysis.roofline import PEAKS, point

    name = "NVIDIA H100 80GB HBM3"
    peak = PEAKS[name]
    g = GpuSample(0.0, 0, "u", name, "gpm", tensor=50.0, fp32=10.0, dram=40.0, sm_clock=peak.boost_mhz / 2)
    p = point(g)
    assert p is not None and p.roof == "tensor"
    assert p.flops == pytest.approx(0.25 * peak.tensor + 0.05 * peak.fp32)
    assert p.bandwidth == pytest.approx(0.4 * peak.dram) and p.bandwidth_roof == pytest.approx(0.4)
    assert p.compute_roof == pytest.approx(0.25) and p.intensity == pytest.approx(p.flops / p.bandwidth)
    assert "(estimate)" in p.text
    # a GPU memtop has no peaks for, or no GPM, has no point: never a guessed peak
    assert point(GpuSample(0.0, 0, "u", "NVIDIA A10", "gpm", tensor=50.0, dram=40.0)) is None
    assert point(GpuSample(0.0, 0, "u", name, "nvml", util=90.0)) is None


def test_report_places_a_known_gpu_on_the_roofline_and_says_so_for_an_unknown_one():
    from memtop.analysis.roofline import report_section

    rec = Recording(DATA / "labelled_s2.memtop")
    rf = build_report(rec)["gpus"][0]["roofline"]
    assert rf["roof"] == "tensor" and 0 < rf["compute_roof"] < 1 and rf["estimate"].startswith("estimate")
    assert "no datasheet peaks for NVIDIA A10" in report_section("NVIDIA A10", {"samples": 3})["unknown"]


def test_the_detail_screen_lists_health_and_draws_the_roofline():
    from memtop.tui.hardware import hardware_text

    base = _baseline()
    gs = _run(_log([base, _with(base, remap_pending=1)], [[]]), 6.0)
    p = Pipeline(Status("live"))
    for g in gs:
        p.on_frame(Frame(g.t, gpus=(g,)), tick=False)
    g = gs[-1]
    text = hardware_text(p.view(), g, ascii_only=True).plain
    # the counters by their names for people, not the store's field names
    assert "row remap pending 1; 10 others 0" in text and "remap_pending" not in text
    assert "critical: remapped rows pending" in text
    assert "roofline" in text and ("% of the" in text or "n/a" in text)
    assert text.isascii()
    unknown = GpuSample(0.0, 0, "u", "NVIDIA A10", "gpm", tensor=5.0, dram=5.0)
    assert "no datasheet peaks for NVIDIA A10" in hardware_text(p.view(), unknown, True).plain


def test_the_detail_screen_says_a_recording_has_no_health_counters_and_live_has_none_yet():
    """An old recording (labelled_s2: made before memtop read health counters) is not 'not read yet'."""
    from memtop.tui.hardware import hardware_text

    rec = Recording(DATA / "labelled_s2.memtop")
    frame = next(iter(rec.frames()))
    g = frame.gpus[0]
    assert g.health is None
    for mode, said in (
        ("replay", "none in this recording (made before memtop read them)"),
        ("demo", "none in this recording"),
        ("live", "no health counters read yet"),
    ):
        p = Pipeline(Status(mode))
        p.on_frame(frame, tick=False)
        assert said in hardware_text(p.view(), g, ascii_only=False).plain
    # a power cap's time is in seconds, and all-zero counters are counted
    gs = _run(_recorded(), 1.0)
    v = Pipeline(Status("live")).view()
    h = gs[-1].health
    assert h is not None
    capped = dataclasses.replace(gs[-1], health=dataclasses.replace(h, violation_power_ns=9_912_620_896))
    assert "power-capped 9.9 s; 10 others 0" in hardware_text(v, capped, True).plain
    assert "11 counters, all zero" in hardware_text(v, gs[-1], True).plain


def test_the_roofline_has_units_and_an_idle_gpu_is_drawn_on_its_floor():
    from memtop.tui.hardware import CHART_H, chart

    from memtop.analysis.roofline import Point

    name = "NVIDIA H100 80GB HBM3"
    busy = chart(Point(600e12, 800e9, 0.6, 0.24, "tensor"), name, ascii_only=True).plain.splitlines()
    assert busy[0].strip() == "FLOP/s (log)" and "989 TFLOP/s" in busy[1] and "1.0 TFLOP/s" in busy[CHART_H]
    assert "1e4 FLOP/B" in busy[CHART_H + 2] and "FLOP per DRAM byte (log)" in busy[CHART_H + 3]
    assert "*" in busy[1] and "* now" in busy[-1]
    idle = chart(Point(0.0, 0.0, 0.0, 0.0, "tensor"), name, ascii_only=True).plain.splitlines()
    floor = idle[CHART_H].split("|", 1)[1]
    assert floor.startswith("o") and "*" not in "".join(idle[1:CHART_H])  # the left end of the floor
    assert "o now: 0 FLOP/s, drawn on the floor" in idle[-1]
    # copying, no FLOPs: on the floor at its (zero) intensity's end, still hollow
    copy = chart(Point(0.0, 2e12, 0.0, 0.6, "tensor"), name, ascii_only=False).plain.splitlines()
    assert copy[CHART_H].split("|", 1)[1].startswith("○")


def test_the_energy_line_of_the_detail_screen_is_for_people():
    from memtop.tui.app import detail_text
    from memtop.tui.palette import look

    from memtop.core.metrics import BY_NAME

    gs = _run(_recorded(), 1.0)
    p = Pipeline(Status("live"))
    for g in gs:
        p.on_frame(Frame(g.t, gpus=(g,)), tick=False)
    line = next(x for x in detail_text(p.view(), 0, look(None)).plain.splitlines() if "energy" in x)
    assert line.split()[1:3] == [f"{gs[-1].energy_j:.0f}", "J"] and "since driver load" in line
    assert "joules_total" not in BY_NAME["energy_j"].help  # (it was serve's family name)


def test_a_damaged_health_row_is_missing_data_not_an_exception(tmp_path):
    import sqlite3

    gs = _run(_recorded(), 2.0)
    rec = _write(tmp_path, gs)
    rec.close()
    db = sqlite3.connect(rec.path)
    db.execute("INSERT INTO health VALUES (?, 0, ?)", (gs[-1].t, "[" * 5000))  # too large, and no JSON
    db.execute("INSERT INTO health VALUES (?, 0, ?)", (gs[-1].t + 0.01, '{"xids": "not a list"}'))
    db.execute("INSERT INTO health VALUES (?, 0, ?)", (gs[-1].t + 0.02, '{"pcie_replay": -5, "xids": [79]}'))
    db.commit()
    db.close()
    rec = Recording(rec.path)
    (samples,) = rec.health_samples(rec.t0, rec.t1 + 1).values()
    assert samples[-1].health.pcie_replay is None and samples[-1].health.xids == (79,)
    assert "damaged health data skipped" in rec.damage
    assert list(rec.frames())  # Frames read past it


def _mig_reader():
    """MIG cannot be turned on here (memtop never changes a card's mode): the recorded H100 replies with
    the device in MIG mode and two MIG devices, written as nvmlDeviceGetMigDeviceHandleByIndex and
    nvmlDeviceGetMemoryInfo would give them (synthetic)."""
    log = _log([_baseline()], [[]])
    for e in log:
        if e["m"] == "device":
            e["r"] = {**e["r"], "mig": True}
    devs = [
        {"index": 0, "gi": 1, "ci": 0, "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "uuid": "MIG-a",
         "mem_used": 2 << 30, "mem_total": 40 << 30},
        {"index": 1, "gi": 2, "ci": 0, "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-b",
         "mem_used": None, "mem_total": None},
    ]  # fmt: skip
    log.append({"m": "mig_devices", "a": [0], "r": devs})
    col = NvmlCollector(ReplayNvml(log), 0.1, offset=0.0, series=False)
    col.start()
    (r,) = col.readers
    return r


def test_mig_instances_on_synthetic_replies():
    """On synthetic MIG replies (_mig_reader)."""
    from memtop.tui.hardware import hardware_text

    r = _mig_reader()
    assert not r.gpm and "MIG" in r.gpm_reason  # GPM stays off under MIG
    g = next(p for p in r.sample(100.0) if isinstance(p, GpuSample))
    assert [(m.gi, m.name.rsplit(" ", 1)[-1], m.mem_total) for m in g.mig_instances] == [
        (1, "3g.40gb", 40 << 30),
        (2, "1g.10gb", None),
    ]
    text = hardware_text(Pipeline(Status("live")).view(), g, True).plain
    assert "GI 1 CI 0" in text and "2.0 / 40.0 GiB" in text and "memory n/a" in text


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_each_mig_instance_is_a_row_under_its_gpu(size):
    """The GPU table on synthetic MIG replies (_mig_reader): the instances the collector read, put on
    the recorded H100 run's frames (a replay keeps no MIG instances: they are read live only); each is
    a row under GPU 0 with its profile and memory, and selecting one is selecting its GPU."""
    from memtop.tui.app import MemtopApp
    from memtop.tui.table import RowTable
    from test_tui_view import _frames, _pipeline, _screen, _settle

    g = next(p for p in _mig_reader().sample(100.0) if isinstance(p, GpuSample))
    frames = [
        dataclasses.replace(
            f, gpus=tuple(dataclasses.replace(x, mig_instances=g.mig_instances) for x in f.gpus)
        )
        for f in _frames()[:901]
    ]
    app = MemtopApp(_pipeline(1, frames=frames), hangup_guard=False, ascii_only=True)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot, app)
        screen = _screen(app)
        top = next(k for k, row in enumerate(screen) if row.lstrip("│| ").startswith("0 "))
        assert "`0" in screen[top + 1] and "3g.40gb" in screen[top + 1] and "2.0/40.0G" in screen[top + 1]
        if size[1] >= 32:  # below that the table scrolls (at most height // 5 rows)
            assert "`1" in screen[top + 2] and "1g.10gb" in screen[top + 2]
        table = app.query_one("#gpus", RowTable)
        assert table.keys == ["0", "0.0", "0.1"]
        table.focus()
        await pilot.press("down")
        await pilot.pause(0.3)
        assert table.cursor_key == "0.0" and app.gpu == 0


def test_a_counter_change_is_on_the_timeline_and_in_the_report_at_the_sample_that_read_it(tmp_path):
    """Recorded replies whose third health read (no Xid: the 5 s schedule) shows an uncorrectable ECC
    error and a pending row remap. memtop learns of a change only when it reads the counter, so "within
    one sample interval of the change" holds from that read: the timeline's event and the report's are
    at the sample whose read first returned the new values (0 samples late), and a change waits at
    most HEALTH_EVERY_S for its read (a Xid brings the read forward to the next second: above)."""
    base = _baseline()
    bad = _with(base, ecc_dbe_volatile=base["ecc_dbe_volatile"] + 1, remap_pending=1)
    gs = _run(_log([base, base, bad, bad], [[]]), 14.0)
    first_bad = next(g for g in gs if g.health is not None and g.health.remap_pending == 1)
    before = gs[gs.index(first_bad) - 1]
    assert before.health is not None and before.health.remap_pending == 0
    assert 100.0 + 2 * HEALTH_EVERY_S <= first_bad.t < 100.0 + 2 * HEALTH_EVERY_S + 1.0
    p = Pipeline(Status("live"))
    for g in gs:
        p.on_frame(Frame(g.t, gpus=(g,)), tick=False)
    marks = [e for e in p.view().events if e.kind == "health"]
    assert [e.t for e in marks] == [first_bad.t, first_bad.t]
    assert {e.text for e in marks} == {
        "uncorrectable (double-bit) ECC error: +1",
        "remapped rows pending: drain the GPU and reset it",
    }
    rec = _write(tmp_path, gs)
    (g,) = build_report(rec)["gpus"]
    at = {e["kind"]: e["at_s"] for e in g["health"]["events"]}
    assert at == {
        "ecc_dbe_volatile": round(first_bad.t - rec.t0, 1),
        "remap_pending": round(first_bad.t - rec.t0, 1),
    }
    text = render(build_report(rec), "text")
    assert "health: 2 events (2 critical); counters (since driver load): uncorrected ECC 1" in text
    assert "row remap pending 1" in text and "at 0:00:10 critical: remapped rows pending" in text


def _procs_with_energy(tmp_path, keep_proc_util: bool) -> Recording:
    """The real recording of two jobs on one H100 (tests/data/procs: pid 467 compute-heavy, pid 468
    input-bound; its processes and the driver's per-process SM figures as recorded) rewritten with an
    energy counter, which that recording predates: synthetic, the recorded power integrated and read
    every HEALTH_EVERY_S as the driver's counter would be."""
    src = Recording(DATA / "procs" / "procs_h100.memtop")
    path = tmp_path / "shared.memtop"
    w = Writer(path, {"gpus": src.meta["gpus"]})
    joules, last_read, prev_t, read = 5.0e6, -1e9, None, 5.0e6
    for f in src.frames():
        g = f.gpus[0]
        if prev_t is not None:
            joules += (g.power_w or 0.0) * (g.t - prev_t)
        prev_t = g.t
        if g.t - last_read >= HEALTH_EVERY_S:
            last_read, read = g.t, joules
        g = dataclasses.replace(g, energy_j=read, proc_util=g.proc_util if keep_proc_util else ())
        w.add(dataclasses.replace(f, gpus=(g,)))
    w.close()
    return Recording(path)


def test_energy_per_job_on_a_shared_gpu_goes_by_its_sm_time_to_its_own_phases(tmp_path):
    rep = build_report(_procs_with_energy(tmp_path, keep_proc_util=True))
    (g,) = rep["gpus"]
    jobs = {tuple(j["pids"]): j for j in rep["energy_jobs"]}
    assert set(jobs) == {(467,), (468,)} and "energy_not_per_job" not in rep
    share = {p["pid"]: p["sm_share"] for p in g["processes"]}  # memtop.analysis.procshare's figures
    for (pid,), j in jobs.items():  # each instant's energy by the jobs' SM shares then: near the mean's
        assert j["gpus"] == [0] and j["gpu_share"]["0"] == pytest.approx(share[pid], abs=0.02)
        assert j["joules"] == pytest.approx(g["energy"]["joules"] * j["gpu_share"]["0"], rel=0.01)
    # the jobs' parts sum to the GPU's energy
    assert sum(j["joules"] for j in jobs.values()) == pytest.approx(g["energy"]["joules"], abs=1.0)
    # ...and each job's goes to its own phases (the report's rows for the jobs), not the GPU's: the GPU
    # reads compute-bound throughout, the job of 468 (its work waits on the other's) almost never
    own = {r["pid"]: r["phases"] for r in g["jobs"]}
    assert max(g["energy"]["by_phase"], key=lambda k: g["energy"]["by_phase"][k]["joules"]) == "compute"
    for (pid,), j in jobs.items():
        top = max(j["by_phase"], key=lambda k: j["by_phase"][k]["joules"])
        assert top == max(own[pid], key=lambda k: own[pid][k]["seconds"])
        assert set(j["by_phase"]) <= {*own[pid], "warmup", *g["energy"]["by_phase"]}
    assert jobs[468,]["by_phase"].get("compute", {"share": 0.0})["share"] < 0.2
    jsonschema.validate(
        json.loads(json.dumps(rep)), json.loads((DATA.parent.parent / "docs/report.schema.json").read_text())
    )
    text = render(rep, "text")
    assert (
        f"energy of the job of pid 467 ({100 * jobs[467,]['gpu_share']['0']:.0f} % of GPU 0's energy by SM time)"
        in text
    )


def test_a_shared_gpus_energy_by_job_follows_each_instants_shares_and_the_jobs_own_labels():
    """energy.job_split on a GPU two jobs took turns on: each instant's joules go by the jobs' SM shares
    then, each job's to its own label, the GPU's where the job has none."""
    t = np.arange(0.0, 10.0, 0.1)
    p = np.full(len(t), 400.0)
    e = 1000.0 + 400.0 * np.floor(t)  # read every second
    shares_a = [(0.0, 1.0), (5.0, 0.0)]  # A alone for 5 s, then B alone
    shares_b = [(0.0, 0.0), (5.0, 1.0)]
    bins = np.arange(0.0, 10.0, 0.5)
    a_labels = ["compute" if b < 5.0 else "idle" for b in bins]
    b_bins = bins[bins < 8.0]  # B's labels end at 8 s (a job's come late): the GPU's stand in after
    b_labels = ["idle" if b < 5.0 else "input" for b in b_bins]
    gpu = (bins, ["compute" if b < 5.0 else "memory" for b in bins])
    got = energy.job_split(
        (list(t), list(e), list(p)),
        0.5,
        {"a": (shares_a, bins, a_labels), "b": (shares_b, b_bins, b_labels)},
        gpu,
    )
    total = sum(energy.per_sample(t, e, p))
    assert sum(sum(v.values()) for v in got.values()) == pytest.approx(total)
    assert set(got["a"]) == {"compute"} and set(got["b"]) == {"input", "memory"}
    assert got["a"]["compute"] == pytest.approx(got["b"]["input"] + got["b"]["memory"], rel=0.1)
    assert got["b"]["memory"] == pytest.approx(2 / 5 * (got["b"]["input"] + got["b"]["memory"]), rel=0.1)


def test_a_shared_gpus_energy_without_per_process_figures_is_not_given_to_any_job(tmp_path):
    rep = build_report(_procs_with_energy(tmp_path, keep_proc_util=False))
    assert rep["gpus"][0]["energy"]["joules"] > 0 and rep["energy_jobs"] == []
    assert rep["energy_not_per_job"] == [{"gpu": 0, "jobs": 2, "why": "no per-process SM figures"}]
    jsonschema.validate(
        json.loads(json.dumps(rep)), json.loads((DATA.parent.parent / "docs/report.schema.json").read_text())
    )
    assert "energy of GPU 0 is not attributable per job: 2 jobs shared it" in render(rep, "markdown")


def test_the_roofline_trail_is_the_per_bin_estimate_of_the_recorded_samples():
    """The recorded two-job H100 run (GPM) replayed through the pipeline: each trail point is the
    estimate of its 0.5 s bin's mean GPM reads, the last TRAIL_BINS bins, oldest first."""
    from memtop.analysis import roofline

    rec = Recording(DATA / "procs" / "procs_h100.memtop")
    p = Pipeline(Status("replay"), rec.meta)
    reads: dict[float, list[GpuSample]] = {}
    for f in rec.frames():
        p.on_frame(f, tick=False)
        reads.setdefault(f.gpus[0].t // 0.5 * 0.5, []).append(f.gpus[0])
    trail = p.view().roofline_trail[0]
    starts = [b for b, _ in trail]
    assert len(trail) == roofline.TRAIL_BINS and np.allclose(np.diff(starts), 0.5)
    assert starts[-1] == sorted(reads)[-2]  # the newest bin is still open: its point comes at its end
    for b, q in trail:
        gs = reads[b]
        flops = [roofline.point(g).flops for g in gs]  # per sample: point() is linear in pipe activity
        assert q.flops == pytest.approx(float(np.mean(flops)), rel=0.02)
        assert q.bandwidth == pytest.approx(float(np.mean([g.dram for g in gs])) / 100 * 3.35e12, rel=1e-6)
    # a paused view shows the trail as it stood
    p.freeze(f.t - (starts[10] + 0.5))
    assert p.view().roofline_trail[0][-1][0] == starts[10]


def test_the_roofline_draws_its_trail_fainter_the_older_and_the_point_over_it():
    from memtop.tui.hardware import TRAIL_STYLES, chart
    from rich.console import Console

    from memtop.analysis.roofline import Point

    name = "NVIDIA H100 80GB HBM3"
    now = Point(600e12, 800e9, 0.6, 0.24, "tensor")
    trail = (  # oldest first, each higher on the chart: drawn top-down, the newest comes first
        Point(1e12, 3e12, 0.001, 0.9, "tensor"),  # streaming memory
        Point(60e12, 2e12, 0.06, 0.6, "tensor"),
        Point(300e12, 1e12, 0.3, 0.3, "tensor"),
    )
    t = chart(now, name, ascii_only=True, trail=trail)
    cells = [(s.text, str(s.style)) for s in t.render(Console(color_system="truecolor"))]
    assert [style for text, style in cells if text == "."] == list(reversed(TRAIL_STYLES))
    assert ("*", "bold") in cells and "its last 3 bins, the older the fainter" in t.plain
    # a bin where the GPU runs now: the point is drawn over its mark
    over = list(chart(now, name, ascii_only=True, trail=(*trail, now)).render(Console()))
    assert sum(s.text == "." for s in over) == 3 and sum(s.text == "*" for s in over) == 1
    # without a trail (a live view's first bin) the chart is as it was
    plain = chart(now, name, ascii_only=True).plain
    assert "." not in "".join(x.split("|", 1)[1] for x in plain.splitlines()[1:8]) and "bins" not in plain


def test_snapshot_gives_energy_per_job_as_the_report_splits_it(tmp_path):
    """`memtop snapshot --replay` of the two-job recording with its (synthetic) energy counter: energy
    since memtop started per job, a shared GPU's by each instant's SM shares and each job's own labels."""
    import subprocess
    import sys

    import jsonschema

    rec = _procs_with_energy(tmp_path, keep_proc_util=True)
    out = subprocess.run(
        [sys.executable, "-m", "memtop", "snapshot", "--replay", str(rec.path), "--json", "--no-stacks"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    snap = json.loads(out.stdout)
    jsonschema.validate(snap, json.loads((DATA.parent.parent / "docs" / "snapshot.schema.json").read_text()))
    gpu = sum(v["joules"] for v in snap["gpus"][0]["energy"]["by_phase"].values())
    jobs = {tuple(j["pids"]): j for j in snap["energy_jobs"]}
    assert set(jobs) == {(467,), (468,)} and "energy_not_per_job" not in snap
    assert sum(j["joules"] for j in jobs.values()) == pytest.approx(gpu, abs=1.0)
    # pmon gave 78.8 / 19.4 % SM over the whole run (tests/data/procs/README.md)
    assert jobs[467,]["gpu_share"]["0"] == pytest.approx(0.8, abs=0.05)
    # each job's energy by its own phases: the GPU reads compute-bound, the job of 468 waits on syncs
    top = {pid: max(j["by_phase"], key=lambda k: j["by_phase"][k]["joules"]) for (pid,), j in jobs.items()}
    assert top == {467: "compute", 468: "sync"}


def test_a_chunked_scan_reads_energy_and_the_lost_time_as_one_read_of_the_rows(tmp_path, monkeypatch):
    """The report's energy series, busy means and first lost sample come from its scan's chunks'
    reads of the GPU rows, joined in order: what one read of every row gives (a 40 s recording cut
    into 5 s chunks; the GPU lost in the second, 7.8 s in)."""
    from memtop.analysis import colscan, roofline

    gs = _run(_log([_baseline()] * 20, [[]] * 20, lost_after=78), 40.0)
    rec = _write(tmp_path, gs)
    spans = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=8, chunk_s=4.0)[2].rows
    assert len(spans) == 8 and spans[1][0] < min(g.t for g in gs if g.mode == "lost") <= spans[1][1]
    assert [a for a, _, _ in spans[1:]] == [b for _, b, _ in spans[:-1]]
    one = rec.gpu_reads(rec.t0, rec.t1, roofline.READS)
    monkeypatch.setattr(rec, "gpu_reads", None)  # the spans must join: no second read to fall back on
    got = rec.spans_read(spans, rec.t0, rec.t1, roofline.READS)
    assert got.lost == one.lost == {0: min(g.t for g in gs if g.mode == "lost")}
    assert got.busy == one.busy
    assert got.energy.keys() == one.energy.keys() == {0}
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got.energy[0], one.energy[0], strict=True))
