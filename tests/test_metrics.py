"""The one table of GPU metrics, and the model, store and collector that derive from it."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import REC, REC_NOGPM
from hypothesis import given, settings
from hypothesis import strategies as st

from memtop.core.metrics import BY_NAME, METRICS, Metric
from memtop.core.model import Frame, GpuSample
from memtop.storage.store import Recording, gpu_row

# GpuSample fields that say which GPU and when, not what it measured
IDENTITY = {
    "t",
    "index",
    "uuid",
    "name",
    "mode",
    "link",
    "processes",
    "mig",
    "health",
    "mig_instances",
    "proc_util",
}


def test_every_metric_is_a_gpu_sample_field_and_every_numeric_field_a_metric():
    fields = {f.name: f.type for f in dataclasses.fields(GpuSample)}
    numeric = {n for n, t in fields.items() if t in ("float | None", "int | None")}
    assert {m.name for m in METRICS} == numeric
    assert set(fields) - numeric == IDENTITY
    for m in METRICS:  # the store writes bytes and bitmasks as integers: the model says int too
        assert fields[m.name] == ("int | None" if m.as_int else "float | None"), m.name


def test_table_is_consistent():
    assert len(BY_NAME) == len(METRICS)
    ids = [m.gpm_id for m in METRICS if m.gpm_id is not None]
    assert len(ids) == len(set(ids))
    proms = [m.prom for m in METRICS if m.prom]
    assert len(proms) == len(set(proms))
    for m in METRICS:
        assert (m.source == "gpm") == (m.gpm_id is not None), m.name
        assert not m.gpm_mib or m.kind == "bytes_per_s", m.name
        assert m.scale > 0 and m.lo < m.hi and math.isfinite(m.hi), m.name


def test_gpm_ids_are_pynvml_s():
    pynvml = pytest.importorskip("pynvml")
    by_id = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_GPM_METRIC_") and isinstance(v, int)}
    want = {
        "graphics": "GRAPHICS_UTIL",
        "sm": "SM_UTIL",
        "occupancy": "SM_OCCUPANCY",
        "tensor": "ANY_TENSOR_UTIL",
        "fp64": "FP64_UTIL",
        "fp32": "FP32_UTIL",
        "fp16": "FP16_UTIL",
        "dram": "DRAM_BW_UTIL",
        "pcie_tx": "PCIE_TX_PER_SEC",
        "pcie_rx": "PCIE_RX_PER_SEC",
        "nvlink_rx": "NVLINK_TOTAL_RX_PER_SEC",
        "nvlink_tx": "NVLINK_TOTAL_TX_PER_SEC",
    }
    for name, nv_name in want.items():
        assert by_id[BY_NAME[name].gpm_id] == "NVML_GPM_METRIC_" + nv_name


# -- the store decodes by name and refuses what Metric.valid refuses ------------------------------
def _py_decode(m: Metric, stored: object) -> float | None:
    """What a stored value means, in Python: the reference the reader's decode is checked against."""
    if isinstance(stored, bool) or not isinstance(stored, (int, float)):
        return None
    v = m.valid(stored / m.scale)
    if v is None or not m.as_int:
        return v
    return int(stored) << 20 if m.scale < 1 else int(stored)  # bytes in MiB; a bitmask as it is


stored_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-10, 2**31),
    st.floats(allow_nan=False, allow_subnormal=False),  # -5e-324 / 10 underflows to -0.0, which is in range
    st.sampled_from([math.inf, -math.inf, 1e308, 1000, 1001, 0, -1, 2**30, 2**30 + 1]),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.none(),
)


@settings(deadline=None, max_examples=300)  # a loaded CI machine must not turn slowness into failure
@given(st.sampled_from(METRICS), stored_values)
def test_the_readers_decode_agrees_with_metric_valid(m, stored):
    """memtop.storage.reader decodes a stored value (any SQLite value a damaged file may hold) to what it
    means, or to missing where Metric.valid refuses it."""
    import numpy as np

    from memtop.storage import reader

    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE gpu({m.name})")
    db.execute("INSERT INTO gpu VALUES (?)", (stored,))
    raw = db.execute(f"SELECT {m.name} FROM gpu").fetchone()
    (got,) = reader.scaled(m, reader._raw(raw)).tolist()
    want = _py_decode(m, stored)
    assert got == pytest.approx(want) if want is not None else np.isnan(got)


def _copy(src, tmp_path):
    dst = tmp_path / "rec.memtop"
    shutil.copy(src, dst)
    return dst


def test_a_damaged_value_reads_as_missing_and_the_rest_survives(tmp_path):
    path = _copy(REC[3], tmp_path)
    db = sqlite3.connect(path)
    # (t, gpu) is the key: the table has no rowid since schema 2
    rows = db.execute("SELECT t, gpu FROM gpu WHERE sm > 500 LIMIT 4").fetchall()
    assert len(rows) == 4
    db.execute("UPDATE gpu SET sm = 9e999 WHERE t = ? AND gpu = ?", rows[0])  # inf
    db.execute("UPDATE gpu SET sm = 'x', power_w = -5 WHERE t = ? AND gpu = ?", rows[1])
    db.execute("UPDATE gpu SET mem_used = 1e30, clock_events = x'00' WHERE t = ? AND gpu = ?", rows[2])
    db.execute("UPDATE gpu SET mode = 'gpm' || char(27) || '[2J' WHERE t = ? AND gpu = ?", rows[3])
    db.execute("UPDATE gpu_state SET link = '{\"gen\": 1e999}', processes = '[[1, 2], \"x\"]'")
    db.commit()
    damaged = {g.t: g for f in Recording(path).frames() for g in f.gpus}
    good = {g.t: g for f in Recording(REC[3]).frames() for g in f.gpus}
    assert damaged.keys() == good.keys()
    t0, t1, t2, t3 = (t for t, _gpu in rows)
    assert damaged[t0].sm is None and damaged[t0].tensor == good[t0].tensor
    assert damaged[t1].sm is None and damaged[t1].power_w is None and damaged[t1].util == good[t1].util
    assert damaged[t2].mem_used is None and damaged[t2].clock_events is None
    assert damaged[t3].mode == "nvml" and damaged[t3].sm == good[t3].sm
    g = damaged[t3]
    assert g.link is None and [p.pid for p in g.processes] == [1]
    same = [t for t in good if t not in (t0, t1, t2, t3)]
    assert all(damaged[t].sm == good[t].sm and damaged[t].power_w == good[t].power_w for t in same)


@pytest.mark.parametrize("src", [REC[3], REC_NOGPM])
def test_a_recording_without_a_newer_column_still_opens(tmp_path, src):
    path = _copy(src, tmp_path)
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE gpu DROP COLUMN tensor")
    db.execute("ALTER TABLE gpu DROP COLUMN power_w")
    db.commit()
    old = [g for f in Recording(path).frames() for g in f.gpus]
    new = [g for f in Recording(src).frames() for g in f.gpus]
    assert len(old) == len(new) and all(g.tensor is None and g.power_w is None for g in old)
    assert [g.util for g in old] == [g.util for g in new] and [g.sm for g in old] == [g.sm for g in new]


def test_encode_never_raises_and_round_trips_through_the_table():
    g = GpuSample(1.0, 0, "u", "n", "gpm", sm=math.inf, tensor=55.55, power_w=-1.0, mem_used=3 << 20)
    row = gpu_row(g)
    by_name = dict(zip((m.name for m in METRICS), row[3:]))
    assert by_name["sm"] is None and by_name["power_w"] is None  # never written as junk
    assert by_name["tensor"] == 556 and by_name["mem_used"] == 3


def test_fallbacks_on_real_gpm_and_nvml_only_recordings():
    gpm = [g for f in Recording(REC[3]).frames() for g in f.gpus if g.sm is not None]
    nvml = [g for f in Recording(REC_NOGPM).frames() for g in f.gpus if g.util is not None]
    assert gpm and nvml and all(g.mode == "nvml" for g in nvml)
    for g in gpm:
        assert (g.activity, g.engine, g.bandwidth) == (g.sm, g.graphics, g.dram)
        assert g.util is None or g.busy == g.util  # copies count: NVML util first, also with GPM
    for g in nvml:
        assert (g.activity, g.engine, g.bandwidth, g.busy) == (g.util, g.util, g.mem_util, g.util)
    # a GPM recording where util and graphics disagree (a copy running with no kernel) exists
    assert any(g.util is not None and g.graphics is not None and g.util > g.graphics + 20 for g in gpm)


def test_pipe_activities_are_asked_for_stored_and_read_back(tmp_path):
    """FP64/FP32/FP16 came in as three rows of the table and three GpuSample fields: the collector asks
    GPM for them, the store writes and reads them back, and recordings made before them still open."""
    from memtop.collectors.nvml import GPM_IDS, gpm_values

    from memtop.storage.store import Writer

    assert {11, 12, 13} <= set(GPM_IDS)
    got = gpm_values({11: 1.5, 12: 40.0, 13: 100.2, 21: 2.0})
    assert got == {"fp64": 1.5, "fp32": 40.0, "fp16": 100.0, "pcie_rx": 2.0 * (1 << 20)}
    g = GpuSample(1.0, 0, "u", "n", "gpm", fp64=1.5, fp32=40.0, fp16=99.94)
    w = Writer(tmp_path / "fp.memtop", {})
    w.add(Frame(1.0, gpus=(g,)))
    w.close()
    (back,) = next(Recording(tmp_path / "fp.memtop").frames()).gpus
    assert (back.fp64, back.fp32, back.fp16) == (1.5, 40.0, 99.9)
    old = next(Recording(REC[3]).frames(start=100.0)).gpus[0]  # recorded before the pipes were added
    assert old.sm is not None and (old.fp64, old.fp32, old.fp16) == (None, None, None)


def markdown() -> str:
    """The table as docs/ARCHITECTURE.md shows it (the test below keeps the two the same; to regenerate it:
    cd tests && python -c "from test_metrics import markdown; print(markdown())")."""
    rows = [
        "| field | title | unit | source | stored as | valid | Prometheus | dcgm-exporter |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in METRICS:
        src = f"GPM {m.gpm_id}" + (" (MiB/s)" if m.gpm_mib else "") if m.gpm_id is not None else "NVML"
        stored = f"× {m.scale:g}" if m.scale >= 1 else f"÷ {round(1 / m.scale)}"
        prom = f"`memtop_{m.prom}`" if m.prom else "—"
        rows.append(
            f"| `{m.name}` | {m.title} | {m.kind} | {src} | {stored} | {m.lo:.4g} to {m.hi:.4g} | {prom} "
            f"| {m.dcgm or '—'} |"
        )
    return "\n".join(rows)


def test_architecture_doc_shows_the_current_table():
    doc = (Path(__file__).parent.parent / "docs" / "ARCHITECTURE.md").read_text()
    shown = (
        doc.split("<!-- metrics table:", 1)[1].split("-->", 1)[1].split("<!-- end of metrics table -->")[0]
    )
    assert shown.strip() == markdown(), "regenerate the table in docs/ARCHITECTURE.md (command above it)"
