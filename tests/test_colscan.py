"""The report's scan by columns (memtop.analysis.colscan): its readers of each storage (rows, JSON, the host
figures' tables), its fallback to Frames where a part is damaged, its chunks joined as one pass, and a
replay's phase runs. What it answers is tested as behaviour (tests/test_engine.py, the golden reports
of tests/test_report_export.py), not against the Frame path's bytes."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import DATA, REC

from memtop.analysis import colscan, roofline
from memtop.analysis.phases import Classifier
from memtop.core.errors import UserError
from memtop.outputs.report import build_report, render
from memtop.storage import colblock, reader
from memtop.storage.store import Recording, Writer

ROOT = Path(__file__).parent.parent
RECORDINGS = sorted(DATA.glob("*.memtop")) + [ROOT / "memtop/data/demo.memtop"]
# (format, build_report arguments): whole, a range (a fresh classifier at --from), one GPU from a time
VARIANTS = [
    ("json", {}),
    ("text", {}),
    ("json", {"t_from": 20, "t_to": 90}),
    ("text", {"gpu": 0, "t_from": 5}),
]


def _report(path: Path, fmt: str, kw: dict) -> str:
    try:
        return render(build_report(Recording(path), **kw), fmt)
    except UserError as e:
        return f"UserError: {e}"


def _as_live(path: Path) -> None:
    """The report's labels (the scan by columns) are those live mode's classifier gives over the
    recording's Frames: both read it through the one reader (memtop.storage.reader, parts)."""
    rec = Recording(path)
    labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    live = Classifier().feed_all(Recording(path).frames()).labels
    assert {g: [(x.t, x.label, x.rule) for x in ls] for g, ls in labels.items()} == {
        g: [(x.t, x.label, x.rule) for x in ls] for g, ls in live.items()
    }


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    """labelled_s2 as two GPUs of one job (tests/multigpu.py), written through the Writer."""
    sys.path.insert(0, str(Path(__file__).parent))
    from multigpu import multi_gpu

    rec = Recording(REC[2])
    out = tmp_path_factory.mktemp("two") / "two.memtop"
    meta = dict(rec.meta)
    meta["gpus"] = [dict(rec.meta["gpus"][0], index=i) for i in range(2)]
    w = Writer(out, meta, force=True)
    for f in multi_gpu(list(rec.frames()), 2):
        w.add(f)
    w.add_markers(rec.markers())
    w.close()
    return out


def _damage(tmp_path: Path, sql: str) -> Path:
    p = tmp_path / "d.memtop"
    shutil.copyfile(REC[0], p)
    db = sqlite3.connect(p)
    db.execute(sql)
    db.commit()
    db.close()
    return p


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("UPDATE host SET data = X'00' WHERE t IN (SELECT t FROM host LIMIT 5)", "host"),
        ('UPDATE perf SET data = \'{"a": "b"}\'', "perf"),
        (
            "UPDATE stack_sample SET pid = 'x' WHERE rowid IN (SELECT rowid FROM stack_sample LIMIT 9)",
            "stack",
        ),
        ("UPDATE caps SET data = X'789c00'", "caps"),
        ("UPDATE gpu_state SET gpu = 'x' WHERE rowid IN (SELECT rowid FROM gpu_state LIMIT 1)", "gpu_state"),
    ],
)
def test_damaged_parts_are_skipped_by_the_one_reader(sql, kind, tmp_path):
    """A damaged host, perf, stack, caps or gpu_state row is skipped and noted by the one reader
    (memtop.storage.parts), whichever scan asks: the column scan serves the file, and the report
    says what it skipped."""
    path = _damage(tmp_path, sql)
    rec = Recording(path)
    colscan.scan_columns(rec, None, rec.t0, rec.t1)
    assert f"damaged {kind} data skipped" in rec.damage
    assert f"damaged {kind} data skipped" in json.loads(_report(path, "json", {}))["damage"]
    _as_live(path)


@pytest.mark.parametrize(
    ("sql", "noted"),
    [
        ("UPDATE gpu SET gpu = 'x' WHERE rowid IN (SELECT rowid FROM gpu LIMIT 5)", True),
        ("UPDATE gpu SET mode = x'01' WHERE rowid IN (SELECT rowid FROM gpu LIMIT 5)", True),
        ("UPDATE gpu SET mode = 'weird' WHERE rowid IN (SELECT rowid FROM gpu LIMIT 5)", False),
    ],
)
def test_damaged_gpu_rows_are_read_alike_by_both_scans(sql, noted, tmp_path):
    """A GPU row without a GPU index or a mode is skipped by the one reader, whichever scan asks, and
    the report says so; a mode it does not know reads as NVML's (claim no more)."""
    path = _damage(tmp_path, sql)
    rec = Recording(path)
    colscan.scan_columns(rec, None, rec.t0, rec.t1)
    assert ("damaged gpu data skipped" in rec.damage) is noted
    by_columns = _report(path, "json", {})
    assert ("damaged gpu data skipped" in json.loads(by_columns).get("damage", [])) is noted
    _as_live(path)


@pytest.mark.parametrize("case", sorted(__import__("test_damaged").CASES))
def test_damaged_recordings_report_as_live_mode_labels_them(case, tmp_path):
    """Every damage case of tests/test_damaged.py: a report (whose labels are live mode's over the
    Frames) or a one-line refusal."""
    from test_damaged import CASES

    path = _damage(tmp_path, CASES[case])
    reports = {}
    for fmt, kw in VARIANTS[::2]:  # (the whole file's JSON among them: not made a second time)
        reports[fmt, str(kw)] = got = _report(path, fmt, kw)
        assert "\n" not in got if got.startswith("UserError") else json.loads(got)["gpus"] is not None
    if not reports["json", "{}"].startswith("UserError"):
        _as_live(path)


def _result(r, rec: Recording, lo: float, hi: float) -> tuple:
    """A scan's result to compare; the GPU rows' reads (``Aggregates.rows``) as the report takes them,
    which are what ``Recording.gpu_reads`` reads."""
    labels, gaps, agg = r
    state = agg.__getstate__()
    reads = rec.spans_read(state.pop("rows"), lo, hi, roofline.READS)
    assert _reads(reads) == _reads(rec.gpu_reads(lo, hi, roofline.READS))
    state["reads"] = _reads(reads)
    state["stacks"] = [agg.stacks.sample(i) for i in range(len(agg.stacks.pid))]
    state["last"] = (agg.last.t, agg.last.host, [(g.index, g.processes) for g in agg.last.gpus])
    return (
        {g: [(x.t, x.raw, x.label, x.rule, x.sub, x.features) for x in ls] for g, ls in labels.items()},
        gaps,
        state,
    )


def _reads(r) -> tuple:
    energy = {g: tuple(a.tobytes() for a in arrays) for g, arrays in r.energy.items()}
    return r.busy, energy, r.lost


def test_the_chunks_read_the_reports_gpu_rows_once_and_join_up(monkeypatch):
    """Each chunk reads the report's other figures of the GPU rows (busy means, energy, first lost
    sample) from its own read of them: the chunks' spans of rows join up to the range, and joined
    they are what reading the rows again gives (the report then reads them no more)."""
    monkeypatch.setattr(colscan.Recording, "gpu_reads", None)  # (a second read would raise)
    rec = Recording(REC[2])
    for read_from, lo, hi in [(None, rec.t0, rec.t1), (rec.t0 + 20, rec.t0 + 20, rec.t0 + 90)]:
        spans = colscan.scan_columns(rec, read_from, lo, hi, workers=3, chunk_s=10.0)[2].rows
        assert len(spans) == 3 and spans[0][0] < lo and spans[-1][1] == hi
        assert [a for a, _, _ in spans[1:]] == [b for _, b, _ in spans[:-1]]
        joined = _reads(rec.spans_read(spans, lo, hi, roofline.READS))
        monkeypatch.undo()
        assert joined == _reads(rec.gpu_reads(lo, hi, roofline.READS))
        assert joined[0]  # (busy GPM samples read; no recording of tests/data has an energy counter)
        monkeypatch.setattr(colscan.Recording, "gpu_reads", None)


def test_a_gap_open_across_chunks_starts_where_the_chunk_before_says(monkeypatch):
    """Idle spans longer than a chunk and its warm-up: the chunk marks the gap open at its start and
    the join gives it the start the chunks before saw (the report's gap list and its stack)."""
    monkeypatch.setattr(colscan, "WARM_S", 6.5)
    marked = []
    join = colscan.join_parts

    def counting(parts):
        marked.extend(g.t0 == colscan._OPEN for p in parts[1:] for g, _ in p.gaps)
        marked.extend(v is not None and v[0] == colscan._OPEN for p in parts[1:] for v in p.gap_end.values())
        return join(parts)

    monkeypatch.setattr(colscan, "join_parts", counting)
    rec = Recording(DATA / "labelled_s2.memtop")
    whole = rec, rec.t0, rec.t1
    serial = _result(colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1), *whole)
    assert _result(colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=30, chunk_s=4.0), *whole) == serial
    assert sum(marked) >= 5


@pytest.fixture(scope="module")
def holed(tmp_path_factory) -> Path:
    """labelled_s2 without Frames for 45 s: a chunk's warm-up may find none."""
    out = tmp_path_factory.mktemp("holed") / "holed.memtop"
    shutil.copyfile(REC[2], out)
    db = sqlite3.connect(out)
    db.execute(
        "DELETE FROM frame WHERE t BETWEEN (SELECT min(t) FROM frame) + 50 AND (SELECT min(t) FROM frame) + 95"
    )
    db.commit()
    db.close()
    return out


_SERIAL: dict[tuple, tuple] = {}  # one serial pass per file and range (it does not read WARM_S)


@pytest.mark.parametrize("warm_s", [colscan.WARM_S, 3.0])
def test_chunks_give_one_serial_pass(warm_s, two_gpus, holed, monkeypatch):
    """Chunks scanned in parallel give what one serial pass gives: the hysteresis runs over all of
    them in order; a chunk whose warm-up is too short to reach what the chunk before ended in (the
    stack window needs 6 s) sends the range to one serial pass. (8 chunks of 3 s and 3 of 10 s: the
    140 s runs in 8 and 3 chunks, the 70 s range in 8 and 3; 3 workers of 40 s cut them as 10 s do,
    or not at all.)"""
    monkeypatch.setattr(colscan, "WARM_S", warm_s)
    joined = []
    join = colscan.join_parts

    def counting(parts):
        try:
            got = join(parts)
        except colscan.Unusual:
            joined.append(-len(parts))
            raise
        joined.append(len(parts))
        return got

    monkeypatch.setattr(colscan, "join_parts", counting)
    for path in (REC[2], two_gpus, holed):
        rec = Recording(path)
        joined.clear()
        for args in [(None, rec.t0, rec.t1), (rec.t0 + 20, rec.t0 + 20, rec.t0 + 90)]:
            if (path, *args) not in _SERIAL:
                got = colscan.scan_columns(rec, *args, workers=1)
                _SERIAL[(path, *args)] = _result(got, rec, *args[1:])
            serial = _SERIAL[(path, *args)]
            for workers, chunk_s in [(8, 3.0), (3, 10.0)]:
                got = colscan.scan_columns(rec, *args, workers=workers, chunk_s=chunk_s)
                assert _result(got, rec, *args[1:]) == serial
        if path == holed:  # 45 s without Frames: a warm-up there finds none
            continue
        if warm_s >= 10:  # every chunked scan joined its chunks, none fell back
            assert max(joined) > 1 and min(joined) > 0
        else:  # too short for the stack window: the chunks did not catch up, one serial pass instead
            assert min(joined) < 0


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """Real recordings re-written through this Writer, so their host figures are stored as columns
    too: labelled_s2, and heldout_torch_s3 (20 DataLoader workers: the input rules read them)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from long_runs import rewrite

    d = tmp_path_factory.mktemp("rewritten")
    out = {}
    for p in (REC[2], DATA / "heldout_torch_s3.memtop"):
        rewrite(p, d / p.name)
        out[p.stem] = d / p.name
    return out


def _count(path: Path, sql: str) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


# a real H100 recording by the memtop of 2026-11-24, which stored the host figures as rows too
# (host_load, host_proc); readers still read them where no column block stands for them
LEGACY = DATA / "blocks_s11.memtop"


def test_the_writer_stores_no_host_figure_rows(rewritten):
    """The figures are in the host JSON (and its column blocks): no third copy as rows."""
    for path in rewritten.values():
        assert (
            _count(path, "SELECT count(*) FROM sqlite_master WHERE name IN ('host_load', 'host_proc')") == 0
        )


def _without_blocks(src: Path, path: Path) -> None:
    """A copy of ``src`` as a recording from before the column blocks (memtop.storage.colblock)."""
    shutil.copyfile(src, path)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE block")
    db.commit()
    db.close()


def test_host_figure_rows_of_older_recordings_are_a_copy_the_report_does_not_read(tmp_path):
    """A recording with host_load/host_proc rows and no blocks reports from its host JSON (the sample
    of record, as the Frame path reads it): a change to the rows, or their loss, changes nothing."""
    path = tmp_path / "r.memtop"
    _without_blocks(LEGACY, path)
    assert _count(path, "SELECT count(worker_of) FROM host_proc") > 100  # DataLoader workers
    before = _report(path, "json", {})
    assert '"input"' in before  # (the workers' figures matter: the input rules read them)
    db = sqlite3.connect(path)
    db.execute("UPDATE host_proc SET cpu_pct = 100.0 WHERE worker_of IS NULL")
    db.execute("DROP TABLE host_load")
    db.commit()
    db.close()
    assert _report(path, "json", {}) == before


def test_a_damaged_host_blob_without_blocks_is_skipped(tmp_path):
    """A host blob that does not inflate, in a recording without blocks: skipped, as the Frames skip it."""
    path = tmp_path / "d.memtop"
    _without_blocks(LEGACY, path)
    db = sqlite3.connect(path)
    db.execute("UPDATE host SET data = X'00' WHERE t IN (SELECT t FROM host LIMIT 5)")
    db.commit()
    db.close()
    rec = Recording(path)
    colscan.scan_columns(rec, None, rec.t0, rec.t1)
    assert rec.damage == ["damaged host data skipped"]
    _as_live(path)


def test_a_host_sample_without_text_figures_is_read_from_its_json(tmp_path, monkeypatch):
    """A process name with bad UTF-8 has no TEXT form: that sample's block row says so (procs -1),
    and the report reads its JSON; the result is the same."""
    from dataclasses import replace

    from memtop.storage.colblock import Blocks
    from memtop.storage.decode import BLOCK_STREAMS

    monkeypatch.setattr(colblock, "BLOCK_S", 10.0)  # (blocks for a 142 s run)
    monkeypatch.setattr(colblock, "GRACE_S", 2.0)
    rec = Recording(REC[2])
    out = tmp_path / "bad.memtop"
    w = Writer(out, rec.meta, force=True)
    for i, f in enumerate(rec.frames()):
        if f.host is not None and f.host.procs and i % 7 == 0:
            procs = (replace(f.host.procs[0], name="py\udcff"), *f.host.procs[1:])
            f = replace(f, host=replace(f.host, procs=procs))
        w.add(f)
    w.close()
    db = sqlite3.connect(out)
    procs = Blocks(db, "host", BLOCK_STREAMS["host"], "host").read(-1e18, 1e18)["procs"]
    db.close()
    assert 0 < (procs == -1).sum() < len(procs)
    plain = tmp_path / "plain.memtop"
    _without_blocks(out, plain)  # (every sample's figures from its JSON)
    for fmt, kw in VARIANTS[:2]:
        assert _report(out, fmt, kw) == _report(plain, fmt, kw).replace(str(plain), str(out))


def _gpu_rows(rec: Recording, plo: float, hi: float) -> tuple:
    """The gpu rows read one by one, undecoded (``reader._from_rows``), and the columns they hold."""
    sel = tuple(c for c in colscan._COLS if c in rec.gpu_columns)
    rows = rec.query(f"{reader._select(sel)} WHERE t>? AND t<=? ORDER BY t", (plo, hi)).fetchall()
    return sel, reader._from_rows(rec, sel, rows)


def _equal_cols(a: reader.GpuCols, b: reader.GpuCols) -> bool:
    import numpy as np

    pairs = [*zip(a[:3], b[:3], strict=True), *((a.cols[c], b.cols[c]) for c in a.cols)]
    return a.cols.keys() == b.cols.keys() and all(
        np.array_equal(x, y, equal_nan=True) and x.dtype == y.dtype for x, y in pairs
    )


def test_gpu_rows_read_as_one_text_are_the_rows():
    """The gpu rows sent by SQLite as one JSON text of integers are the rows read one by one, on every
    recording, whole and from a time on."""
    paths = sorted(DATA.glob("*.memtop")) + sorted((DATA / "multi").glob("*.memtop"))
    for path in paths:
        rec = Recording(path)
        for plo in (float("-inf"), rec.t0 + 30.0):
            sel, want = _gpu_rows(rec, plo, rec.t1)
            got = reader._json_rows(rec, sel, plo, rec.t1)
            assert got is not None and _equal_cols(got, want), (path.name, plo)
            assert got.t.tolist() == [
                r[0] for r in rec.query("SELECT t FROM gpu WHERE t>? ORDER BY t", (plo,))
            ]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE gpu SET util = util + 0.25 WHERE t IN (SELECT t FROM gpu LIMIT 5)",
        "UPDATE gpu SET power_w = 'x' WHERE t IN (SELECT t FROM gpu LIMIT 5)",
        "UPDATE gpu SET pcie_rx = 1e300 WHERE t IN (SELECT t FROM gpu LIMIT 5)",
        f"UPDATE gpu SET clock_events = {-(2**63)} WHERE t IN (SELECT t FROM gpu LIMIT 5)",
        "UPDATE gpu SET mode = x'07' WHERE t IN (SELECT t FROM gpu LIMIT 5)",
    ],
)
def test_unusual_gpu_values_are_read_row_by_row(sql, tmp_path):
    """A REAL or a text among the values, a mode that is no text: the JSON text cannot hold them
    exactly, and the rows read one by one give the report the Frames give."""
    path = _damage(tmp_path, sql)
    rec = Recording(path)
    sel, _ = _gpu_rows(rec, float("-inf"), rec.t1)
    assert reader._json_rows(rec, sel, float("-inf"), rec.t1) is None
    _as_live(path)


# -- a replay's phase runs (the overview strip, n / N) ---------------------------------------------
def _runs_follow_the_reports_labels(rec: Recording) -> None:
    """Each run starts where a GPU's label changes, at the Frame that closes the run's first bin
    (where a replay first shows it), in time order within the recording."""
    got = colscan.phase_runs(rec)
    labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
    assert got and sorted(got) == sorted(labels)
    for g, runs in got.items():
        offsets, names = [r[0] for r in runs], [r[1] for r in runs]
        assert offsets == sorted(offsets) and offsets[0] > 0 and offsets[-1] <= rec.t1 - rec.t0 + 1e-3
        assert all(a != b for a, b in zip(names, names[1:], strict=False))  # a run is a change
        shown = [lab.label for lab in labels[g]]
        assert [n for k, n in enumerate(shown) if k == 0 or n != shown[k - 1]][: len(names)] == names


def test_a_replay_of_a_damaged_recording_finds_its_runs_by_columns(tmp_path):
    path = _damage(tmp_path, "UPDATE host SET data = X'00' WHERE t IN (SELECT t FROM host LIMIT 5)")
    rec = Recording(path)
    _runs_follow_the_reports_labels(rec)
    assert rec.damage == ["damaged host data skipped"]


@pytest.mark.parametrize("name", ["labelled_s2", "multi/heldout_ddp_s11", "blocks_killed_s11"])
def test_phase_runs_follow_the_reports_labels(name):
    _runs_follow_the_reports_labels(Recording(DATA / f"{name}.memtop"))


def test_report_stacks_merge_keeps_each_samples_first_place_and_its_later_dump():
    """``scan.Stacks`` (a chunk's stack samples, merged in time order): a (pid, t) met again in a later
    chunk keeps the place it was first met at and takes the later chunk's dump."""
    import numpy as np

    from memtop.analysis.scan import Stacks

    first = Stacks.of(
        np.array([7, 8, 7]), np.array([1.0, 1.0, 1.0]), np.array([0, 1, 1]), [((), "a"), ((), "b")]
    )
    assert first.pid.tolist() == [7, 8] and first.kind.tolist() == [1, 1]  # (7 met again within it)
    first.update(Stacks.of(np.array([8, 9]), np.array([1.0, 2.0]), np.array([0, 0]), [((), "c")]))
    assert list(zip(first.pid.tolist(), first.t.tolist(), strict=True)) == [(7, 1.0), (8, 1.0), (9, 2.0)]
    assert [first.sample(i).error for i in range(3)] == ["b", "c", "c"]
    assert (first.sample(1).pid, first.sample(1).t) == (8, 1.0)


def _same_partition(codes, rows) -> bool:
    """Equal rows (as tuples) have one code, and rows that differ have different codes."""
    by_row: dict = {}
    for c, r in zip(codes.tolist(), rows, strict=True):
        by_row.setdefault(r, set()).add(c)
    return all(len(c) == 1 for c in by_row.values()) and len(set(codes.tolist())) == len(by_row)


def test_stack_row_codes_number_equal_rows_alike():
    """A stack row's code (the samples' dedup) is one per distinct row: by one integer key where the
    columns fit in one, else by sorting on every column; NULL apart from every value."""
    import numpy as np

    from memtop.storage import parts
    from memtop.storage.colblock import NULL

    rows = parts._stack_rows(Recording(REC[2]), -float("inf"), float("inf"), None)
    cols = [[r[1:][j] for r in rows] for j in parts._STACK_REST]
    assert len(rows) > 400 and parts._one_key([parts._row_codes([c]) for c in cols]) is not None
    assert _same_partition(parts._row_codes(cols), [tuple(c[i] for c in cols) for i in range(len(rows))])
    wide = [
        np.array([NULL, -(2**60), 2**60, 5, NULL, 5]),
        np.array([1, 2, 3, 4, 1, 4]),
        np.array([0, 1, 0, 1, 0, 1]),
    ]
    assert parts._one_key(wide) is None  # (2**61 values and more: the rows are sorted by each column)
    for keys in (wide, [np.array([NULL, 3, 7, 3, NULL]), np.array([1, 1, 1, 1, 2])]):
        assert _same_partition(parts._row_codes(keys), list(zip(*(k.tolist() for k in keys), strict=True)))


def test_chunks_in_forked_workers_come_back_through_memory_files(monkeypatch):
    """A forked worker writes its chunk's result to a memory file it shares with the report's
    process (os.memfd_create) and returns its length; a spawned one returns it through the pipe."""
    import threading

    taken = []
    take = colscan._result
    monkeypatch.setattr(
        colscan, "_result", lambda got, out: (taken.append((type(got), out)), take(got, out))[1]
    )
    rec = Recording(REC[2])
    whole = rec, rec.t0, rec.t1
    serial = _result(colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1), *whole)
    forked = threading.active_count() == 1
    assert _result(colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=3, chunk_s=30.0), *whole) == serial
    assert len(taken) == 2
    assert all((kind is int and out is not None) if forked else kind is colscan._Part for kind, out in taken)


def _ddp_with_jobs_that_change(path: Path) -> None:
    """The real 2-GPU DDP run written through the Writer with blocks of 10 s, rank 1 made another job
    for a while: another command line (from 35 s), then another parent (from 50 s), then its own."""
    from dataclasses import replace

    rec = Recording(DATA / "multi/heldout_ddp_s11.memtop")
    rank1 = {g.processes[0].pid for f in rec.frames() for g in f.gpus if g.index == 1 and g.processes}
    w = Writer(path, rec.meta, force=True)
    for f in rec.frames():
        at = f.t - rec.t0
        if f.host is not None and 35 <= at < 65:
            other = {"cmdline": "python3 other.py"} if at < 50 else {"ppid": 1}
            procs = tuple(replace(p, **other) if p.pid in rank1 else p for p in f.host.procs)
            f = replace(f, host=replace(f.host, procs=procs))
        w.add(f)
    w.add_markers(rec.markers())
    w.close()


def _without_job_columns(src: Path, path: Path) -> None:
    """A copy of ``src`` whose host_proc blocks are as the Writer wrote them before 2026-11-28,
    without decode.HOST_PROC_JOB (ppid, cmdline): the report finds the jobs in the host JSON."""
    sys.path.insert(0, str(ROOT / "bench"))
    from long_runs import host_figure_rows

    from memtop.storage.decode import BLOCK_STREAMS, HOST_PROC_JOB

    before = BLOCK_STREAMS["host_proc"][: -len(HOST_PROC_JOB)]
    shutil.copyfile(src, path)
    db = sqlite3.connect(path)
    _, rows = host_figure_rows(db)
    for seq, t0, t1 in db.execute("SELECT seq, t0, t1 FROM block WHERE stream='host_proc'").fetchall():
        mine = [r[: len(before)] for r in rows if t0 <= r[0] < t1]
        db.execute(
            "UPDATE block SET data=? WHERE stream='host_proc' AND seq=?", (colblock.encode(before, mine), seq)
        )
    db.commit()
    db.close()


def test_the_jobs_of_a_multi_gpu_run_read_from_the_blocks_are_those_of_its_json(tmp_path, monkeypatch):
    """The host_proc blocks hold each process's parent and command line (from 2026-11-28): the report
    groups the GPUs into jobs from them without inflating a host sample, and finds what it finds in
    the host JSON, where a recording of before (no such columns) still finds them: while rank 1 has
    another command line or parent the GPUs are not each other's peers."""
    import numpy as np

    monkeypatch.setattr(colblock, "BLOCK_S", 10.0)  # (blocks for a 78 s run)
    monkeypatch.setattr(colblock, "GRACE_S", 2.0)
    new, old = tmp_path / "new.memtop", tmp_path / "old.memtop"
    _ddp_with_jobs_that_change(new)
    _without_job_columns(new, old)
    reports = {p: _report(p, "json", {}) for p in (new, old)}
    assert reports[new] == reports[old].replace(str(old), str(new))

    def peers(path: Path) -> dict[float, tuple]:
        rec = Recording(path)
        labels, _, _ = colscan.scan_columns(rec, None, rec.t0, rec.t1, workers=1)
        return {round(x.t - rec.t0): x.features.peers for x in labels[0]}

    inflated = []
    real = colscan.parts.Blobs.each
    monkeypatch.setattr(colscan.parts.Blobs, "each", lambda self, hs: inflated.append(hs) or real(self, hs))
    by_blocks = peers(new)
    assert not inflated  # (the blocks held every job's columns)
    assert by_blocks == peers(old) and inflated  # (the JSON's, read where the blocks lack them)
    apart = {t for t, p in by_blocks.items() if 37 <= t < 63}
    together = {t for t, p in by_blocks.items() if p == (1,)}
    assert apart and not apart & together and {t for t in together if t >= 67}
    rec = Recording(new)
    ft = np.array(colscan.frame_times(rec, rec.t0, rec.t1))
    assert colscan._Hosts(rec, ft, -math.inf, rec.t1, None)._job is not None
    rec = Recording(old)
    assert colscan._Hosts(rec, ft, -math.inf, rec.t1, None)._job is None


@pytest.mark.parametrize(
    "shape, kind",
    [((500, 3), "bool"), ((400, 130), "bool"), ((600, 4), "int"), ((300, 2), "big"), ((0, 3), "int")],
)
def test_distinct_rows_are_the_rows_np_unique_finds(shape, kind):
    """binscan.distinct_rows (the peers' rows of bools, the jobs' rows of codes): each row's index is
    that of its first equal row, equal rows share one (130 bool columns pass 62 bits: made small)."""
    import numpy as np

    from memtop.analysis.binscan import distinct_rows

    rnd = np.random.default_rng(7)
    if kind == "bool":
        m = rnd.random((shape[0] // 10, shape[1])) < 0.3
    else:
        hi = 1 << 62 if kind == "big" else 4
        m = rnd.integers(-hi, hi, size=(shape[0] // 10, shape[1]), dtype=np.int64)
    m = m[rnd.integers(0, max(len(m), 1), size=shape[0])] if len(m) else m  # (rows repeat)
    first, inv = distinct_rows(m)
    _, want = np.unique(m, axis=0, return_inverse=True)
    want = want.reshape(-1)
    assert len(first) == len(set(map(tuple, m.tolist())))
    assert (m[first][inv] == m).all()
    assert (want[:, None] == want[None, :]).tolist() == (inv[:, None] == inv[None, :]).tolist()
