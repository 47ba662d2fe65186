"""A multi-GPU report's peers by columns (colscan._jobs, binscan.with_peers): the GPUs share a job
where jobs.job_groups says so at every Frame, also where the host samples' text is not as the
Writer writes it, and the scan's progress goes on through them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA

from memtop import colscan
from memtop.jobs import job_groups
from memtop.model import Frame
from memtop.store import Recording

ROOT = Path(__file__).parent.parent
DDP = DATA / "multi" / "heldout_ddp_s11.memtop"  # two ranks of one job, one GPU each


@pytest.fixture(scope="module")
def tiled(tmp_path_factory) -> Path:
    """The DDP run re-written and tiled past a column block: its host samples read from the blocks."""
    sys.path.insert(0, str(ROOT / "bench"))
    from long_runs import rewrite, tile

    d = tmp_path_factory.mktemp("ddp")
    rewrite(DDP, d / "tile.memtop")
    tile(d / "tile.memtop", d / "long.memtop", 700)
    return d / "long.memtop"


def _parts(path: Path) -> tuple[list[float], list, colscan._Hosts]:
    rec = Recording(path)
    frames = colscan.frame_times(rec, rec.t0, rec.t1)
    ft = np.array(frames)
    return (
        frames,
        colscan._gpus(rec, ft, -np.inf, rec.t1, None),
        colscan._Hosts(rec, ft, -np.inf, rec.t1, None),
    )


def _same_jobs(frames: list[float], gpus: list, hosts: colscan._Hosts) -> int:
    """At every Frame, two GPUs have one job id where job_groups gives them one job; the Frames where
    they do."""
    ks = np.arange(len(frames))
    ids = colscan._jobs(gpus, hosts, ks)
    shared = 0
    for k in ks.tolist():
        jobs = job_groups(Frame(frames[k], gpus=colscan._samples_at(gpus, k), host=hosts.sample(k)))
        for g in gpus:
            for p in gpus:
                a, b, key = ids[g.index][k], ids[p.index][k], jobs.get(g.index)
                if g is not p:
                    assert (a >= 0 and a == b) == (key is not None and key == jobs.get(p.index)), k
                    shared += a >= 0 and a == b
    return shared


@pytest.mark.parametrize("where", ["rows", "blocks"])
def test_jobs_are_job_groups_at_every_frame(where, tiled):
    frames, gpus, hosts = _parts(DDP if where == "rows" else tiled)
    assert isinstance(hosts.raw, list) == (where == "rows")
    assert 0 < _same_jobs(frames, gpus, hosts) < 2 * len(frames)


@pytest.mark.parametrize("how", ["spaced", "reparented", "renamed"])
def test_host_texts_of_other_layouts_or_values_give_job_groups_jobs(how):
    """JSON with spaces (no text is read: each sample decoded whole), a rank whose parent changes in
    every other sample, a command line with escapes: the jobs job_groups finds."""
    frames, gpus, hosts = _parts(DDP)
    raw = list(hosts.raw)
    for i, r in enumerate(raw):
        if how == "spaced":
            raw[i] = json.dumps(json.loads(r)).encode()
        elif how == "reparented" and i % 2:
            raw[i] = r.replace(b'"pid":678,"ppid":634', b'"pid":678,"ppid":1')
        elif how == "renamed" and i % 3:
            raw[i] = r.replace(b'"cmdline":"/opt', b'"cmdline":"\\"\\u00e9\\\\/opt', 1)
    assert raw != hosts.raw
    hosts.raw = raw
    assert _same_jobs(frames, gpus, hosts) > 0


def test_progress_goes_on_through_the_scan(tiled):
    """The ticks of a serial scan of two GPUs rise through its stages, the peers' too, to its span."""
    rec = Recording(tiled)
    ticks: list[float] = []
    colscan.scan_columns(rec, None, rec.t0, rec.t1, tick=ticks.append, workers=1)
    span = rec.t1 - rec.t0
    assert ticks == sorted(ticks) and ticks[-1] == pytest.approx(span)
    assert any(0.6 * span <= x < 0.75 * span for x in ticks)  # (while the jobs are found)
    assert len(set(ticks)) >= 7
