from __future__ import annotations

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
    from memtop.store import Recording, Writer

    rec = Recording(src)
    w = Writer(dst, rec.meta, force=True)
    for f in rec.frames():
        w.add(f)
    w.add_markers(rec.markers())
    w.close()
    rec.close()
    return dst


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


def pytest_collection_modifyitems(config, items):
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
    from memtop.store import Recording

    return list(Recording(REC[0]).frames())
