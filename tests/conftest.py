from __future__ import annotations

import gc
import shutil
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
# bench/'s scoring (score.py: per-class F1 against the markers) is a test and bench helper, not in the wheel
sys.path.append(str(Path(__file__).parent.parent / "bench"))


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def write_again(src: Path, dst: Path) -> Path:
    """The real recording ``src`` read as Frames and written by this version's Writer, as
    `memtop record` writes one (this schema), into ``dst``."""
    from memtop.storage.store import Recording, Writer

    rec = Recording(src)
    w = Writer(dst, rec.meta, force=True)
    for f in rec.frames():
        w.add(f)
    w.add_markers(rec.markers())
    w.close()
    rec.close()
    return dst


def pytest_configure(config):
    """Compiles the package once (the controller does, before xdist's workers start): with
    PYTHONDONTWRITEBYTECODE=1 in the environment nothing else writes its bytecode, and every `memtop`
    the suite starts (some hundreds) would compile what it imports again."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    root = Path(__file__).parent.parent
    for d in ("memtop", "collectors", "tui"):  # (pyproject's package-dir)
        compileall.compile_dir(root / d, quiet=2)  # (a read-only tree: each reads the source, as before)
    for d in ("tests", "bench"):  # the helpers the tests import (fuzzing, hostile, score, ...)
        compileall.compile_dir(root / d, maxlevels=0, quiet=2)
    _rewrite_once(
        config, [Path(__file__), *sorted(Path(__file__).parent.glob("test_*.py")), *_plugin_files()]
    )


def _plugin_files() -> list[Path]:
    """The plugins' modules pytest rewrote as it loaded them (syrupy, xdist, pytest-asyncio, ...: 38
    modules, some 0.4 CPU-s of each process's start), to be written once as the test modules are."""
    try:
        from _pytest.assertion.rewrite import AssertionRewritingHook
    except ImportError:
        return []
    return sorted(
        Path(m.__file__)
        for m in list(sys.modules.values())
        if isinstance(getattr(m, "__loader__", None), AssertionRewritingHook)
        and getattr(m, "__file__", None)
        and m.__file__.endswith(".py")
        and Path(m.__file__).parent != Path(__file__).parent
    )


def _rewrite_once(config, files: list[Path]) -> None:
    """Writes the test modules with pytest's assertion rewriting applied, as pytest caches them:
    under PYTHONDONTWRITEBYTECODE=1 pytest writes no such cache, and every worker rewrote every
    module at each run (an AST walk in Python: 6 of a worker's 10 CPU-s of collection). The workers
    read what is written here; pytest checks each against its source's mtime and size."""
    try:  # (pytest's own cache, written as pytest writes it; without these names, no cache: as before)
        from _pytest.assertion import assertstate_key
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir
    except ImportError:
        return
    if config.getoption("assertmode") != "rewrite":
        return
    state = config.stash[assertstate_key]
    for fn in files:
        cache = get_cache_dir(fn)
        pyc = cache / (fn.name[:-3] + PYC_TAIL)
        if _read_pyc(fn, pyc) is not None:
            continue
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only folder: each worker rewrites, as pytest does there
            continue
        source_stat, code = _rewrite_test(fn, config)
        _write_pyc(state, code, source_stat, pyc)


# Container allocations between two passes of the cyclic collector over the young objects in a test
# process (the interpreter's default is 700). A Pilot test's paints, a scan's labels and features make
# hundreds of thousands of objects and few cycles: at 700 the collector ran some 2 250 times in
# test_tui_answer alone, 11-18 % of a module's CPU (4.8 of 27.0 CPU-s there, bench/RESULTS.md suite6).
# memtop's own cluster view does the same (memtop.commands.cluster.GC_YOUNG).
GC_YOUNG = 10_000


def pytest_collection_finish(session):
    """In each process that runs tests (each xdist worker): what start-up and collection made (Textual,
    numpy, the test modules, the items) lives to the end, so it leaves the collector's passes
    (`gc.freeze`), and the young generation is collected every GC_YOUNG allocations. Cycles are still
    collected, a little later; the tests that measure memory (tracemalloc peaks) read the same."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def notified(app) -> list[str]:
    """Every message ``app`` notifies from now on, kept as it is posted: the app's own list gets it
    only once its message loop handles the post, and drops it after its timeout (5 s), either of
    which a loaded machine can put on the wrong side of a test's look."""
    said: list[str] = []
    notify = app.notify

    def record(message, *args, **kw):
        said.append(str(message))
        return notify(message, *args, **kw)

    app.notify = record
    return said


def one_build(monkeypatch, built: dict) -> None:
    """`memtop report` builds a file's report once for its formats, kept in ``built`` (a test's, or a
    module's for files no test changes): the CLI's path differs only in `render(report, format)`
    (memtop.commands.local.report). A build that raised raises again."""
    import copy

    from memtop.outputs import report

    build = report.build_report

    def once(rec, gpu=None, t_from=None, t_to=None):
        key = (str(rec.path), gpu, t_from, t_to)
        if key not in built:
            try:
                built[key] = build(rec, gpu=gpu, t_from=t_from, t_to=t_to)
            except Exception as e:  # noqa: BLE001 (raised again as it was, whatever it is)
                built[key] = e
        if isinstance(built[key], Exception):
            raise built[key]
        return copy.deepcopy(built[key])

    monkeypatch.setattr(report, "build_report", once)


def cut(src: Path, dst: Path, seconds: float) -> Path:
    """A copy of the real recording ``src`` in ``dst`` holding its first ``seconds`` only (the same
    structure, a fraction of the rows: for tests that read a file many times)."""
    import sqlite3

    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    db = sqlite3.connect(tmp)
    (t0,) = db.execute("SELECT min(t) FROM frame").fetchone()
    end = t0 + seconds
    for table in ("frame", "gpu", "gpu_state", "series", "host", "stack_sample", "perf", "caps", "note"):
        db.execute(f"DELETE FROM {table} WHERE t > ?", (end,))
    db.execute("DELETE FROM marker WHERE t0 > ?", (end,))
    db.commit()
    db.execute("VACUUM")
    db.close()
    return tmp.rename(dst)


# `pytest -m quick`: each module's core behaviour in under a minute on a quiet 2-core machine. A module
# named with None is quick whole; else the tests named (without parameters) are.
QUICK: dict[str, frozenset[str] | None] = {
    "test_timefmt.py": None,
    "test_stackclass.py": None,
    "test_flags.py": None,
    "test_comm.py": frozenset(
        {
            "test_comm_fires_on_the_waiting_gpu_and_not_on_its_busy_peer",
            "test_comm_confirmed_by_collective_stacks_without_peers",
            "test_overlapped_all_reduce_during_compute_stays_compute",
            "test_peers_of_another_job_do_not_confirm_comm",
            "test_straggler_is_the_computing_rank_with_evidence_and_advice",
            "test_no_straggler_when_every_rank_computes",
            "test_job_groups_by_launcher_and_command_line",
            "test_comm_stack_class",
        }
    ),
    "test_procfs.py": None,
    "test_numa.py": None,
    "test_nvml.py": None,
    "test_stacks.py": None,
    "test_excursions.py": None,
    "test_multigpu_score.py": None,
    "test_missing_evidence.py": None,
    "test_report_wording.py": None,
    "test_stack_hold.py": None,
    "test_driver.py": None,
    "test_gpu.py": None,
    "test_snapshot.py": None,
    "test_perf.py": None,
    "test_host.py": None,
    "test_live_controller.py": None,
    "test_firstlook.py": None,
    "test_store.py": frozenset(
        {
            "test_round_trip_equal_frames",
            "test_markers_round_trip",
            "test_seek_lands_on_the_right_frame",
            "test_file_is_private",
            "test_refuses_to_overwrite",
            "test_bad_inputs_each_get_one_line",
            "test_a_series_blob_inflates_only_so_far",
            "test_a_side_file_someone_else_made_is_refused_never_written_through",
        }
    ),
    "test_phases.py": frozenset(
        {
            "test_rule_table",
            "test_hysteresis_needs_two_bins_to_switch",
            "test_compute_exit_threshold_ignores_a_dip_but_not_memory",
            "test_verdict_names_the_sync_line_and_the_next_command",
            "test_gaps_carry_the_stack_over_the_gap",
            "test_only_torch_dataloader_workers_count_as_workers",
        }
    ),
    "test_metrics.py": frozenset(
        {
            "test_every_metric_is_a_gpu_sample_field_and_every_numeric_field_a_metric",
            "test_table_is_consistent",
            "test_encode_never_raises_and_round_trips_through_the_table",
        }
    ),
    "test_config.py": frozenset(
        {
            "test_layout_choices_are_read_and_bad_ones_named_in_one_line",
            "test_the_config_is_never_written_through_a_link",
        }
    ),
    "test_sampler.py": frozenset(
        {
            "test_frames_at_ten_hertz_with_gpu_and_host_parts",
            "test_a_failing_collector_becomes_a_note_and_the_run_goes_on",
        }
    ),
    "test_report_export.py": frozenset(
        {
            "test_report_json_validates_against_its_schema",
            "test_report_bad_input_is_one_line_exit_2",
            "test_perfetto_export_follows_the_trace_event_format",
        }
    ),
    "test_damaged.py": frozenset({"test_a_report_on_a_damaged_recording_says_what_it_skipped"}),
    "test_cluster.py": frozenset({"test_stale_after_three_intervals_with_the_reason", "test_host_lists"}),
    "test_fleet_boundary.py": frozenset({"test_bodies_are_capped_with_or_without_a_length"}),
    "test_serve.py": frozenset(
        {"test_exposition_derives_from_the_metrics_table", "test_resets_are_counted_not_traced"}
    ),
    "test_cli.py": frozenset({"test_replay_summary", "test_tui_refuses_without_a_terminal"}),
    "test_tui.py": frozenset(
        {
            "test_replay_paces_frames_by_their_recorded_gaps_over_speed",
            "test_replay_controls_pause_seek_speed_next_phase",
        }
    ),
    "test_tui_keys.py": frozenset(
        {"test_overview_cells_follow_the_runs", "test_seek_in_a_long_recording_reads_only_around_the_target"}
    ),
    "test_tui_view.py": frozenset({"test_to_ascii_keeps_cell_widths"}),
    "test_accuracy.py": frozenset(
        {
            "test_guard_band_is_half_a_second_and_counts_bins_past_it",
            "test_macro_f1_counts_a_predicted_class_that_was_never_true",
            "test_latency_counts_a_phase_that_repeats_the_previous_label_and_a_missed_one",
        }
    ),
    "test_agent.py": frozenset(
        {
            "test_the_agent_never_listens_outside_a_private_folder",
            "test_the_merge_aligns_each_capture_and_keeps_ranks_apart",
            "test_a_malformed_answer_head_is_one_line",
        }
    ),
    "test_colblock.py": frozenset(
        {
            "test_round_trip_keeps_every_value",
            "test_decode_refuses_hostile_blobs",
            "test_a_zip_bomb_stays_bounded",
        }
    ),
    "test_colscan.py": frozenset({"test_gpu_columns_decode_as_sql_does"}),
    "test_comm_recorded.py": frozenset({"test_the_live_straggler_verdict_quotes_what_the_late_gpu_does_now"}),
    "test_engine.py": frozenset(
        {"test_the_backends_operations_keep_their_contract", "test_an_empty_window_has_no_shares_and_no_sync"}
    ),
    "test_health.py": frozenset(
        {
            "test_split_shares_each_rise_by_power_and_gives_unlabelled_bins_their_part",
            "test_roofline_point_is_pipe_activity_times_the_datasheet_peak_at_the_clock_run",
            "test_a_gpu_that_falls_off_the_bus_is_one_critical_event",
            "test_counters_are_read_every_few_seconds_not_every_sample",
        }
    ),
    "test_health_bench.py": frozenset({"test_a_counter_nvidia_smi_prints_otherwise_is_a_disagreement"}),
    "test_hostile.py": frozenset(
        {
            "test_a_suggested_command_quotes_shell_metacharacters",
            "test_create_private_never_writes_through_a_link",
            "test_an_error_line_echoes_file_content_inert",
        }
    ),
    "test_jobshare.py": frozenset(
        {
            "test_parts_scale_up_while_saturated_and_split_evenly_without_figures",
            "test_jobs_by_tree_and_cgroup",
        }
    ),
    "test_layout.py": frozenset({"test_python_dash_m_runs", "test_help_and_version_do_not_load_textual"}),
    "test_no_gpu.py": frozenset({"test_no_gpu_outranks_fail_on", "test_snapshot_exits_4_and_says_why"}),
    "test_perfetto_pb.py": frozenset(
        {
            "test_varint",
            "test_overlapping_markers_go_on_lanes",
            "test_counters_at_once_are_the_packets_of_one_at_a_time",
        }
    ),
    "test_pipe_corpus.py": frozenset({"test_a_sleeping_job_says_so_beside_its_busy_helper"}),
    "test_procs.py": frozenset(
        {"test_cgroup_layouts", "test_drain_means_new_samples_holds_briefly_then_reads_zero"}
    ),
    "test_prom_rules.py": frozenset({"test_rules_are_valid"}),
    "test_startup.py": frozenset({"test_release_free_memory_keeps_what_is_in_use"}),
    "test_structure.py": frozenset({"test_the_checks_see_a_private_import_and_a_cycle"}),
    "test_trace_chunks.py": frozenset({"test_a_malformed_trace_is_one_line"}),
    "test_tracer.py": frozenset(
        {
            "test_a_capture_waits_while_the_job_is_importing",
            "test_trace_on_fires_when_a_verdict_turns_and_not_again_within_the_interval",
            "test_the_x_key_is_offered_live_only_and_free",
        }
    ),
    "test_tui_answer.py": frozenset(
        {
            "test_an_evidence_line_of_another_label_is_caught",
            "test_share_cells_split_the_bar_by_share_largest_first",
            "test_a_long_command_keeps_what_differs_per_verdict",
            "test_processes_sort_by_each_key_and_filter_on_what_the_row_shows",
        }
    ),
    "test_tmux_matrix.py": frozenset({"test_the_tui_with_stderr_redirected_says_textual_draws_there"}),
    "test_waits.py": frozenset(
        {"test_a_gone_thread_reads_none", "test_synthetic_proc_running_disk_and_a_file_read"}
    ),
}


def _quick(item) -> bool:
    names = QUICK.get(item.path.name, frozenset())
    return names is None or item.originalname in names


# Modules by the CPU a full run spends in them, heaviest first (bench/pytest_cpu.py over the whole
# suite, 2026-11-28, suite6: tmux_matrix 59 CPU-s, tui_view 57, colscan 39, ..., sampler 5; those
# under 5 CPU-s unnamed); a module not named comes after them. pyproject's
# `--dist loadscope --no-loadscope-reorder` hands an idle worker the next whole module in this order
# (longest first): the heavy ones start at once on all three workers, each module's fixtures are built
# once, and the run ends on short modules (suite5's run: the three workers' summed wall times within
# 2 %; suite6's: 662 / 668 / 663 s). (worksteal gave each worker a contiguous third: every heavy module sat in the first worker's
# queue and the others stole its tail, so that run ended on test_fuzz's three long tests on one worker.)
BY_COST = (
    "test_tmux_matrix.py",
    "test_tui_view.py",
    "test_colscan.py",
    "test_colblock.py",
    "test_comm.py",
    "test_accuracy.py",
    "test_cluster.py",
    "test_fuzz.py",
    "test_cli.py",
    "test_damaged.py",
    "test_tui_keys.py",
    "test_perfetto_pb.py",
    "test_tui_answer.py",
    "test_tui.py",
    "test_tmux_screens.py",
    "test_store.py",
    "test_long_runs.py",
    "test_layout.py",
    "test_phases.py",
    "test_rules_properties.py",
    "test_report_export.py",
    "test_serve.py",
    "test_hostile.py",
    "test_config.py",
    "test_tracer.py",
    "test_fleet_boundary.py",
    "test_agent.py",
    "test_health.py",
    "test_engine.py",
    "test_metrics.py",
    "test_structure.py",
    "test_sampler.py",
)


def _cost_rank(item) -> int:
    name = item.path.name
    return BY_COST.index(name) if name in BY_COST else len(BY_COST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_cost_rank)  # stable: a module's tests stay together and in their order
    for item in items:
        if _quick(item):
            item.add_marker(pytest.mark.quick)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (runs on the lent H100, not on CI)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


REC = {
    0: DATA / "labelled_s0.memtop",
    1: Path(__file__).parent.parent / "memtop" / "data" / "demo.memtop",  # seed 1 ships as the demo
    2: DATA / "labelled_s2.memtop",
    3: DATA / "labelled_s3.memtop",  # recorded after the rules were first tuned on seeds 0-2
    4: DATA / "labelled_s4.memtop",  # 10 s phases, recorded after the first session's tuning
    5: DATA / "labelled_s5.memtop",  # jittered stacks, recorded after the sync exit threshold: held out
    6: DATA / "labelled_s6.memtop",  # stacks at 4 Hz while they decide sync vs CPU-bound: held out
    7: DATA / "labelled_s7.memtop",  # as s6; led to the 75 % compute exit threshold (in-sample)
    8: DATA / "labelled_s8.memtop",  # as s6, 10 s phases; led to the 10 % sync exit floor (in-sample)
    9: DATA / "labelled_s9.memtop",  # recorded after every change of session 2: held out
    # session 3: stacks paced every tick, live view without sample-buffer drains: held out
    10: DATA / "labelled_s10.memtop",
    11: DATA / "labelled_s11.memtop",
    12: DATA / "labelled_s12.memtop",
}
REC_NOGPM = DATA / "labelled_s2_nogpm.memtop"


@pytest.fixture(scope="session")
def frames_s0():
    from memtop.storage.store import Recording

    return list(Recording(REC[0]).frames())
