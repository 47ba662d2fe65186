"""The multi-GPU scorer (bench/comm_accuracy.py) on SYNTHETIC frames: which markers belong to which
GPU, and that the straggler flag is scored per bin against the truth of that bin (a flag that
lingers into the next phase is a false positive). These check the scorer, not the rules' accuracy:
that needs labelled 2-GPU recordings (bench/workloads/ddp_corpus.sh)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from test_comm import COMPUTE, WAIT, _frames

from memtop.core.model import Marker
from memtop.storage.store import Recording, Writer

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import comm_accuracy  # noqa: E402


def _marker(t0: float, t1: float, label: str, name: str, **facts) -> Marker:
    return Marker(t0, t1, label, name, json.dumps(facts))


def _shifted(frames, dt: float):
    return [
        replace(
            f,
            t=f.t + dt,
            gpus=tuple(replace(g, t=g.t + dt) for g in f.gpus),
            host=replace(f.host, t=f.host.t + dt),
        )
        for f in frames
    ]


def _recording(tmp_path: Path, markers: list[Marker]) -> Recording:
    """20 s of GPU 1 late (GPU 0 waits), then 20 s of both computing."""
    frames = _frames([WAIT, COMPUTE], seconds=20) + _shifted(_frames([COMPUTE, COMPUTE], seconds=20), 20)
    meta = {
        "gpus": [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-synthetic-{i}"} for i in range(2)
        ]
    }
    w = Writer(tmp_path / "run.memtop", meta, force=True)
    for f in frames:
        w.add(f)
    w.add_markers(markers)
    w.close()
    return Recording(tmp_path / "run.memtop")


TRUTH = [
    _marker(100, 120, "comm", "straggler_compute", uuid="synthetic-0", straggler=False),  # torch's form
    _marker(100, 120, "compute", "straggler_compute", uuid="GPU-synthetic-1", straggler=True),  # NVML's
    _marker(120, 140, "compute", "neg_ddp_overlap", local_rank=0, straggler=False),  # no uuid: the rank
    _marker(120, 140, "compute", "neg_ddp_overlap", local_rank=1, straggler=False),
    _marker(100, 140, "idle", "idle"),  # names no GPU: not scored
]


def test_markers_go_to_the_gpu_their_rank_names(tmp_path):
    m = comm_accuracy.gpu_markers(_recording(tmp_path, TRUTH))
    assert [x.name for x in m[0]] == ["straggler_compute", "neg_ddp_overlap"]
    assert [x.label for x in m[1]] == ["compute", "compute"]


def test_a_flag_lingering_past_the_phase_is_a_false_positive(tmp_path):
    rec = _recording(tmp_path, TRUTH)
    marks = comm_accuracy.gpu_markers(rec)
    frames = list(rec.frames())
    short, long_ = (comm_accuracy.score_run("r", frames, marks, [0.5], w)[0.5] for w in (2.0, 10.0))
    for r in (short, long_):
        assert r["straggler"][(True, True)] > 30 and r["straggler"][(False, True)] > 0
        assert r["comm"][(True, True)] > 30  # GPU 0 waits while GPU 1 is late
    # a longer window holds the flag longer into the balanced phase
    assert long_["straggler"][(False, True)] > short["straggler"][(False, True)]
    assert (
        comm_accuracy.pooled([{0.5: short}], 0.5, "straggler")[0]
        > comm_accuracy.pooled([{0.5: long_}], 0.5, "straggler")[0]
    )
