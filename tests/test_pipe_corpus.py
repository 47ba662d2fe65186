"""Input pipelines that are not torch's DataLoader, and idle explained (issue #35), on the real H100
recordings of bench/workloads/pipe_fw.py: the development runs and the held-out round scored after the
rules froze (bench/RESULTS.md, "ninth freeze")."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import DATA

from memtop.analysis import colscan
from memtop.analysis.phases import classify
from memtop.analysis.verdict import verdict
from memtop.core.model import MAIN_FIELDS
from memtop.storage import colblock, parts
from memtop.storage.decode import BLOCK_STREAMS, inflate_host
from memtop.storage.store import Recording, host_figures

PIPE = sorted(DATA.glob("dev_pipe_s*.memtop")) + sorted(DATA.glob("heldout9_pipe_s*.memtop"))
GUARD_S = 0.5


def _phases(path: Path, **kw):
    """(marker, its labels inside the guard band) of each phase of a recording."""
    rec = Recording(path)
    labels = classify(rec.frames(), **kw).labels[0]
    return [
        (m, [lab for lab in labels if m.t0 + GUARD_S <= lab.t and lab.t + 0.5 <= m.t1 - GUARD_S])
        for m in rec.markers()
    ]


@pytest.mark.parametrize("path", PIPE, ids=lambda p: p.stem)
def test_every_pipeline_and_control_reads_as_its_truth(path):
    """With GPM and stacks each phase's most common label is its truth (input for a pool, a process
    pool, a thread pool, a queue's or shared memory's producer, a DataLoader); no negative control
    (a busy logger, checkpoint writer or compile worker beside a saturated GPU or a sleeping job) has
    a bin of input; a sleeping job's idle says it sleeps."""
    for m, labs in _phases(path):
        top = Counter(lab.label for lab in labs).most_common(1)[0][0]
        assert top == m.label, (m.name, Counter(lab.label for lab in labs))
        if m.name.startswith("neg_"):
            assert not [lab for lab in labs if lab.label == "input"], m.name
        if m.label == "idle":
            assert Counter(lab.sub for lab in labs if lab.label == "idle").most_common(1)[0][0] == "sleep"


@pytest.mark.parametrize("path", PIPE[:1], ids=lambda p: p.stem)
def test_no_stacks_still_reads_the_pipelines_and_the_pageable_copy(path):
    """Without stacks (a container without ptrace) and without GPM: the main thread's wait and its
    feeder come from /proc, a pageable device-to-host copy from PCIe traffic and the host CPU in it."""
    from accuracy import nvml_only  # bench/ is on the tests' path (conftest)

    rec = Recording(path)
    labels = classify(nvml_only(rec.frames()), use_stacks=False).labels[0]
    for m in rec.markers():
        labs = [lab for lab in labels if m.t0 + GUARD_S <= lab.t and lab.t + 0.5 <= m.t1 - GUARD_S]
        got = Counter(lab.label for lab in labs).most_common(1)[0][0]
        assert got == m.label, (m.name, Counter(lab.label for lab in labs))
        if m.name == "d2h_pageable":
            assert {lab.sub for lab in labs if lab.label == "transfer"} == {"pageable"}


def test_the_producer_is_named_with_its_pid_and_cpu():
    """An input label from the feeder rule names a process of the job that is at work: its PID is a
    child of the GPU process in the recording, and the advice names it."""
    rec = Recording(PIPE[0])
    kids = {p.pid for f in rec.frames() if f.host for p in f.host.procs if p.worker_of is not None}
    found = 0
    for m, labs in _phases(PIPE[0]):
        fed = [lab for lab in labs if lab.label == "input" and lab.sub == "producer"]
        for lab in fed:
            e = lab.evidence
            pid = int(e.feeder.split()[0])
            assert (
                e.feeder_cpu >= 50
                and 0 <= e.main_cpu < 80
                and e.wait in ("lock", "pipe", "socket", "poll", "")
            )
            assert pid in kids or "(other threads)" in e.feeder, (m.name, e.feeder)
            found += 1
    assert found
    v = verdict([lab for m, labs in _phases(PIPE[0]) if m.name == "pool_lo" for lab in labs])
    assert v.label == "input" and "works at" in v.advice[0] and "main thread alone" in v.evidence
    # the process's CPU (all its threads, 340 % here) is never called the main thread's
    assert "process CPU" in v.evidence and "main thread CPU" not in v.evidence


def test_a_sleeping_job_says_so_beside_its_busy_helper():
    v = verdict([lab for m, labs in _phases(PIPE[0]) if m.name == "neg_idle_logger" for lab in labs])
    assert v.label == "idle" and "asleep" in v.headline and "job sleeps" in v.advice[0]


def test_older_blocks_read_the_new_fields_as_their_defaults():
    """A recording whose host_proc blocks predate the main-thread fields (2026-11-24) is still read
    from its blocks, not its JSON, every new field at its default."""
    rec = Recording(DATA / "blocks_s11.memtop")
    got = parts.host_blocks(rec, rec.t0, rec.t1, None)
    assert got is not None
    procs = colscan.proc_arrays(got.rows)  # (each figure by name)
    main_cpu, wait, wait_on, feeder, feeder_cpu = (procs[k] for k in MAIN_FIELDS)
    assert len(main_cpu) and (main_cpu == -1.0).all() and (feeder_cpu == 0.0).all()
    assert set(wait) == set(wait_on) == set(feeder) == {""}


def test_the_writers_block_rows_hold_the_recorded_fields():
    """The host_proc block rows the Writer makes of a host sample carry model.MAIN_FIELDS, and a block
    of them decodes to what was recorded."""
    db = sqlite3.connect(f"file:{PIPE[0]}?mode=ro", uri=True)
    try:
        rows, prev = [], None
        for t, blob in db.execute("SELECT t, data FROM host ORDER BY t"):
            prev = inflate_host(blob, prev)
            rows += host_figures(t, prev)[1]
    finally:
        db.close()
    cols = BLOCK_STREAMS["host_proc"]
    n, got, strings = colblock.decode(cols, colblock.encode(cols, rows))
    assert n == len(rows)
    waits = {strings[i] for i in got["wait"].tolist() if i >= 0}
    assert {"sleep", "lock"} <= waits and (got["main_cpu"] >= 0).any() and got["feeder_cpu"].max() >= 50


@pytest.mark.parametrize("path", PIPE[2:], ids=lambda p: p.stem)
def test_the_report_reads_each_pipeline_as_its_truth(path):
    """`memtop report`'s labels (the column scan: the feeder's text fields are object columns) give
    each held-out phase its truth as live mode's do, and the whole report builds."""
    from memtop.outputs.report import build_report

    rec = Recording(path)
    labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    for m in rec.markers():
        labs = [lab for lab in labels[0] if m.t0 + GUARD_S <= lab.t and lab.t + 0.5 <= m.t1 - GUARD_S]
        assert Counter(lab.label for lab in labs).most_common(1)[0][0] == m.label, m.name
    assert build_report(Recording(path))["gpus"]
