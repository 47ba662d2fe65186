"""One moment, one answer: the demo (the recording shipped in the package) walked position by position at
80x24, 120x40 and 200x50. On every screen the verdict line names one label, and every line under it
explains that label: the evidence's numbers fit its rule, the advice is its advice, the command writes
`-o memtop-<label>`, and `c` copies that command. The line above names the phase now and the window's
largest phase first.

The screen once said `now: sync-stall · last 60 s: CPU-bound: input pipeline 24 %` above the input
pipeline's evidence and command, and `now: compute-bound` above `graphics 15 %, SM 13 %`."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import notified
from memtop.tui.app import FilterScreen, MemtopApp, SignalScreen
from memtop.tui.format import PROC_ORDERS, fit_command, share_cells, shown_procs
from pilots import opened, refreshed, steady, until

from memtop.analysis.phases import TITLES
from memtop.commands.local import LiveController, demo_path
from memtop.live.pipeline import Pipeline, Status
from memtop.storage.store import Recording

STEP_S = 4.0  # the demo is 141 s of labelled phases, each 8-20 s long

# what the evidence of a bin with each label must show (the rules in memtop.analysis.phases, give or take the
# rounding of the numbers printed)
FITS = {
    "compute": lambda g, sm, text: g >= 74 and (sm is None or sm >= 59),
    "memory": lambda g, sm, text: g >= 74 and "DRAM" in text,
    "sync": lambda g, sm, text: 14 <= g < 81,
    "input": lambda g, sm, text: g < 81,
    "cpu": lambda g, sm, text: g < 81,
    "transfer": lambda g, sm, text: "PCIe" in text,
    "idle": lambda g, sm, text: g < 6,
    "comm": lambda g, sm, text: "collective" in text or "NVLink" in text,
}
ADVICE = {
    "compute": "",
    "memory": "memory-bound",
    "sync": "sync",
    "input": "DataLoader",
    "cpu": "",
    "transfer": "PCIe|cop",
    "idle": "idle",
    "comm": "collective",
}


def verdict_label(line: str) -> str:
    """The label a verdict line names (its title, after `busy:` for a healthy one)."""
    about = line.split("verdict:", 1)[1].strip()
    if about.startswith("the straggler"):
        return "straggler"
    for prefix in ("busy: ", "mixed: "):
        about = about.removeprefix(prefix)
    return next(
        k for k, title in sorted(TITLES.items(), key=lambda kv: -len(kv[1])) if about.startswith(title)
    )


def check_screen(rows: list[str], where: str) -> tuple[str, str]:
    """The verdict's label and the command shown (`` when none), after checking every line under it."""
    i = next((i for i, r in enumerate(rows) if r.strip().startswith("verdict:")), None)
    if i is None:  # the first seconds: nothing judged yet, and nothing explained
        assert "now: warming up" in rows[1] and not any(r.strip().startswith("$ ") for r in rows[:8]), (
            f"{where}: no verdict line\n" + "\n".join(rows)
        )
        return "", ""
    now = rows[i - 1].strip()
    assert now.startswith("GPU ") and " now: " in now and "last " in now, f"{where}: {now!r}"
    label = verdict_label(rows[i])
    evidence = rows[i + 1].strip()
    if label != "straggler" and label in FITS:
        g = re.search(r"graphics (\d+) %", evidence)
        sm = re.search(r"SM (\d+) %", evidence)
        assert g, f"{where}: {evidence!r}"
        assert FITS[label](int(g[1]), int(sm[1]) if sm else None, evidence), (
            f"{where}: the evidence under {label!r} is another label's: {evidence!r}"
        )
    advice = rows[i + 2].strip()
    if advice.startswith(("→", "->")) and label in ADVICE:
        assert re.search(ADVICE[label], advice), f"{where}: advice under {label!r}: {advice!r}"
    cmd = next((r.strip() for r in rows[i + 2 : i + 4] if r.strip().startswith("$ ")), "")
    if cmd:
        want = "straggler-rank" if label == "straggler" else label
        assert f"-o memtop-{want}" in cmd, f"{where}: command under {label!r}: {cmd!r}"
    return label, cmd


def _screen(app: MemtopApp) -> list[str]:
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)])
async def test_every_line_under_a_verdict_explains_that_verdict(size):
    rec = Recording(demo_path())
    frames = list(rec.frames())
    p = Pipeline(Status("demo", duration=rec.duration, paused=True), meta=rec.meta)
    app = MemtopApp(p, hangup_guard=False)
    said = notified(app)
    labels: set[str] = set()
    copied = 0
    async with app.run_test(size=size) as pilot:
        assert await until(pilot, lambda: "memtop" in _screen(app)[0])  # the first paint
        k = 0
        stop = rec.t0 + STEP_S
        while k < len(frames):
            while k < len(frames) and frames[k].t <= stop:
                p.on_frame(frames[k], tick=False)
                k += 1
            p.set_status(position=stop - rec.t0)
            app._paint()
            app._relayout()
            assert await steady(pilot, lambda: _screen(app))  # (the layout it asked for is on screen)
            where = f"{size[0]}x{size[1]} at {stop - rec.t0:.0f} s"
            label, cmd = check_screen(_screen(app), where)
            labels.add(label)
            if cmd and copied < 4:  # `c` copies the command of the verdict on screen, whole
                n = len(said)
                await pilot.press("c")
                assert await until(pilot, lambda n=n: len(said) > n)  # the copy's notice: the key was taken
                assert app.clipboard.startswith(cmd[2:].split(" ")[0]) and f"memtop-{label}" in app.clipboard
                copied += 1
            stop += STEP_S
    # the walk met verdicts of the window's past and of now, healthy and not
    assert {"compute", "sync", "input", "cpu", "transfer"} <= labels, labels
    assert copied == 4


def test_an_evidence_line_of_another_label_is_caught():
    """The check itself: the screen of the bug (compute above a GPU 15 % busy, input's command under
    sync-stall) fails it."""
    rows = [
        " GPU 0 now: compute │ last 60 s ████ compute 43 % · cpu 24 %",
        " verdict: compute-bound now, for the last 5 s (43 % of the last 60 s)",
        " graphics 15 %, SM 13 %, process CPU 100 %",
        " → Python overhead on the main thread",
    ]
    with pytest.raises(AssertionError, match="another label"):
        check_screen(rows, "bug")
    rows = [
        " GPU 0 now: sync │ last 60 s ████ input 24 %",
        " verdict: sync-stall now, for the last 4 s (13 % of the last 60 s)",
        " graphics 58 %, SM 62 %, process CPU 100 %",
        " → CPU and GPU take turns: the main thread waits in a CUDA sync",
        " $ nsys profile … -o memtop-input python train.py",
    ]
    with pytest.raises(AssertionError, match="command under 'sync'"):
        check_screen(rows, "bug")


async def test_the_straggler_is_marked_in_the_gpu_table():
    """Two ranks, rank 1 late (heldout_ddp_s11 at 31 s): GPU 1's row says straggler while GPU 0's
    headline is selected, and GPU 1's own headline and verdict say it too."""
    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s11.memtop")
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in rec.frames(end=rec.t0 + 31):
        p.on_frame(f, tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: app.view is not None and app.query_one("#gpus")._rows)
        late = [g for g, vd in app.view.verdicts.items() if vd.straggler]
        assert late == [1]
        rows = {key: cells for key, cells in app.query_one("#gpus")._rows}
        assert rows["1"][1].plain == "straggler" and rows["0"][1].plain != "straggler"
        assert await until(pilot, lambda: any(r.startswith("1   straggler") for r in _screen(app))), (
            "\n".join(_screen(app))
        )
        await pilot.press("g")
        assert await until(pilot, lambda: _screen(app)[1].strip().startswith("GPU 1 STRAGGLER now:"))
        assert await steady(pilot, lambda: _screen(app))
        screen = _screen(app)
        assert check_screen(screen, "GPU 1")[0] == "straggler"


def test_share_cells_split_the_bar_by_share_largest_first():
    assert share_cells({"idle": 0.22, "compute": 0.35, "cpu": 0.19, "sync": 0.24}, 20) == (
        ["compute"] * 7 + ["sync"] * 5 + ["idle"] * 4 + ["cpu"] * 4
    )
    assert share_cells({"compute": 0.98, "sync": 0.02}, 20) == ["compute"] * 20  # 0.4 of a cell
    assert share_cells({}, 20) == []


def test_a_long_command_keeps_what_differs_per_verdict():
    cmd = (
        "nsys profile -t cuda,nvtx,osrt --python-sampling=true --cudabacktrace=sync --delay 3 --duration 20 "
        "-o memtop-input python train.py --epochs 3"
    )
    assert fit_command(cmd, 200) == cmd
    short = fit_command(cmd, 60)
    assert short == "nsys profile … -o memtop-input python train.py --epochs 3" and len(short) <= 60
    assert fit_command(cmd, 30) == "nsys profile … -o memtop-inpu…"


async def test_nvml_only_titles_the_sm_and_dram_columns_as_nvml_rates():
    """Without GPM the SM column holds NVML util (time a kernel ran): titled util, as the series."""
    rec = Recording(demo_path())
    frames = [
        replace(f, gpus=tuple(replace(g, mode="nvml") for g in f.gpus)) for f in rec.frames(end=rec.t0 + 70)
    ]
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in frames:
        p.on_frame(f, tick=False)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(
            pilot, lambda: app.view is not None and any(r.startswith("util ") for r in _screen(app))
        )
        rows = _screen(app)
    head = next(r for r in rows if r.startswith("GPU phase"))
    assert " util " in head and " memU " in head and "SM%" not in head
    assert any(r.startswith("util ") for r in rows) and not any(r.startswith("SM ") for r in rows)


# -- the process table: sort, filter, signal ---------------------------------------------------------
def _demo_view_at(s: float):
    rec = Recording(demo_path())
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in rec.frames(end=rec.t0 + s):
        p.on_frame(f, tick=False)
    return p


def test_processes_sort_by_each_key_and_filter_on_what_the_row_shows():
    v = _demo_view_at(32).view()
    procs = v.frame.host.procs
    assert len(procs) >= 3  # the training process and its DataLoader workers
    mem = {p.pid: p.used_memory or 0 for g in v.frame.gpus for p in g.processes}
    by = {o: [p.pid for p in shown_procs(v, o)] for o in PROC_ORDERS}
    assert by[""] == [p.pid for p in procs]
    assert by["PID"] == sorted(by[""])
    assert by["CPU"][0] == max(procs, key=lambda p: p.cpu_pct).pid
    assert [mem.get(pid, 0) for pid in by["GPU memory"]] == sorted(
        (mem.get(p, 0) for p in by[""]), reverse=True
    )
    assert by["phase"][0] in mem  # the process on a GPU has a phase; its workers none
    assert [p.pid for p in shown_procs(v, "PID", reverse=True)] == by["PID"][::-1]
    main = next(p for p in procs if p.worker_of is None)
    assert [p.pid for p in shown_procs(v, match=str(main.pid))][0] == main.pid
    assert [p.pid for p in shown_procs(v, match="no such process anywhere")] == []


async def test_sort_and_filter_keys_reorder_the_table_and_say_so():
    p = _demo_view_at(32)
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one("#procs")
        assert await until(pilot, lambda: table._rows)
        found = table.keys
        await pilot.press("o", "o", "o", "o")  # GPU memory, CPU, phase, PID
        assert await until(pilot, lambda: app.proc_order == "PID" and table.keys == sorted(found, key=int))
        assert await until(pilot, lambda: "sorted by PID" in "\n".join(_screen(app)))
        await pilot.press("O")
        assert await until(pilot, lambda: table.keys == sorted(found, key=int, reverse=True))
        await pilot.press("slash")  # (what is typed goes to the dialog once it is up)
        assert await opened(pilot, FilterScreen)
        await pilot.press(*found[0], "enter")
        assert await until(pilot, lambda: table.keys == [found[0]])
        assert await until(pilot, lambda: f"only '{found[0]}'" in "\n".join(_screen(app)))
        await pilot.press("slash")
        assert await opened(pilot, FilterScreen)
        await pilot.press("ctrl+u", "enter")  # empty: every process again
        assert await until(pilot, lambda: sorted(table.keys) == sorted(found))


class _NoSampler:
    """Live with the frames a test hands the pipeline: nothing sampled, nothing to stop."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def run_meta(self) -> dict:
        return {}


async def test_a_signal_goes_to_the_selected_process_only_after_a_confirmation():
    """`k` on a watched process: a confirmation, then the controller (not the app) sends it."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        rec = Recording(demo_path())
        frames = list(rec.frames(end=rec.t0 + 70))
        host = frames[-1].host
        me = replace(
            host.procs[0], pid=child.pid, argv=("sleep", "60"), cmdline="sleep 60", worker_of=None, gpus=(0,)
        )
        p = Pipeline(Status("live"), meta=rec.meta)
        for f in frames[:-1]:
            p.on_frame(f, tick=False)
        p.on_frame(replace(frames[-1], host=replace(host, procs=(me, *host.procs[1:]))), tick=False)
        ctl = LiveController(argparse.Namespace(), p, _NoSampler())
        assert "not a process memtop watches" in ctl.may_signal(host.procs[0].pid)  # replaced above
        app = MemtopApp(p, ctl, hangup_guard=False)
        said = notified(app)
        async with app.run_test(size=(120, 40)) as pilot:
            assert await until(pilot, lambda: app.selected_pid == child.pid)
            await pilot.press("k")
            assert await opened(pilot, SignalScreen)
            assert child.poll() is None
            await pilot.press("escape")  # nothing sent
            assert await until(pilot, lambda: not isinstance(app.screen, SignalScreen))
            assert child.poll() is None
            await pilot.press("k")
            assert await opened(pilot, SignalScreen)
            await pilot.press("t")
            # (polled while the app runs: a blocking wait held the loop that sends it)
            assert await until(pilot, lambda: child.poll() is not None)
            assert child.returncode == -signal.SIGTERM
            assert await until(pilot, lambda: f"sent SIGTERM to {child.pid}" in said), said
        assert ctl.send_signal(child.pid, signal.SIGTERM).endswith("has exited")
    finally:
        child.kill()
        child.wait()


async def test_replay_offers_no_signal():
    app = MemtopApp(_demo_view_at(70), hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        assert "signal" not in {k.action for k in app.enabled_keys()}
        await pilot.press("k")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, SignalScreen)


async def test_80x24_shows_every_process_of_a_two_gpu_replay():
    """Two ranks and two DataLoader workers (heldout_ddp_s13 at 44 s): the host lines give way, down to
    the CPU line, and all four rows show (2 of 4 did)."""
    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop")
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in rec.frames(end=rec.t0 + 44.5):
        p.on_frame(f, tick=False)
    pids = [str(x.pid) for x in p.frame.host.procs]
    assert len(pids) == 4
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: app.query_one("#procs")._rows)
        app._relayout()
        assert await steady(pilot, lambda: _screen(app))
        rows = _screen(app)
    shown = {r.split()[0] for r in rows if r.split() and r.split()[0] in pids}
    assert shown == set(pids), "\n".join(rows)
    assert any(r.strip().startswith("CPU ") for r in rows)  # the host keeps its first line


def test_wording_one_worker_and_warming_up_is_not_settling():
    from memtop.tui.format import now_label

    from memtop.analysis.verdict import _evidence

    labs = _demo_view_at(32).view().labels[0]
    lab = next(x for x in reversed(labs) if x.evidence.workers > 1)
    one = replace(lab)
    one.__dict__["evidence"] = replace(lab.evidence, workers=1)  # (a cached property)
    assert "1 worker at" in _evidence(one) and "1 workers" not in _evidence(one)
    assert f"{lab.evidence.workers} workers at" in _evidence(lab)
    # warming up while this bin's rule already names a phase: not "warming up (settling?)"
    assert now_label([replace(lab, label="warmup", raw="compute")]) == ("warmup", False)
    assert now_label([replace(lab, label="input", raw="compute")]) == ("input", True)


async def test_the_stacks_beside_a_verdict_are_its_gpus_process_from_the_start():
    """GPU 1's rank listed first (heldout_ddp_s13): GPU 0's verdict on screen, GPU 0's process selected
    (rank 1's stacks once stood beside GPU 0's straggler verdict); a process the user picks stays."""
    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop")
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in rec.frames(end=rec.t0 + 26):
        host = f.host and replace(f.host, procs=tuple(sorted(f.host.procs, key=lambda x: x.gpus != (1,))))
        p.on_frame(replace(f, host=host), tick=False)
    on = {g: next(x.pid for x in p.frame.host.procs if x.gpus == (g,)) for g in (0, 1)}
    assert p.frame.host.procs[0].pid == on[1]
    app = MemtopApp(p, hangup_guard=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: app.query_one("#procs")._rows and app.selected_pid == on[0])
        assert app.gpu == 0
        app.query_one("#procs").focus()
        await pilot.press("up")  # the user picks rank 1's process (listed first)
        assert await until(pilot, lambda: app.selected_pid == on[1])
        app.view = None
        app._paint()
        assert await refreshed(pilot)
        assert app.selected_pid == on[1]


@pytest.mark.parametrize("width", [30, 50, 70])
def test_a_command_with_wide_characters_fits_its_cells(width):
    """Fitted by terminal cells, not characters: a CJK path is two cells a character."""
    from memtop.tui.format import fit_command
    from rich.cells import cell_len

    cmd = "nsys profile -t cuda --delay 0 -o memtop-sync python3 /データ/訓練スクリプト/train_モデル.py --epochs 10"
    out = fit_command(cmd, width)
    assert cell_len(out) <= width and "-o memtop-sync" in out


def test_the_command_at_the_end_of_a_replay_is_the_jobs_own():
    """At the end of a two-GPU replay (its processes gone) `c` copied `... -o memtop-comm python
    train.py`: a made-up command. The verdict names the process seen on that GPU, as the report does."""
    rec = Recording(Path(__file__).parent / "data" / "multi" / "heldout_ddp_s13.memtop")
    p = Pipeline(Status("replay"), rec.meta)
    for f in rec.frames():
        p.on_frame(f, tick=False)
    v = p.view()
    assert v.frame is not None and not any(g.processes for g in v.frame.gpus)  # the job has exited
    for vd in v.verdicts.values():
        assert vd.command and "python train.py" not in vd.command, vd.command
        assert "bench/workloads/ddp_straggler.py --markers" in vd.command, vd.command
