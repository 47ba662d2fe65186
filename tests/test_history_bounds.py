"""A live view's history stays bounded however long it runs: the points of the widest timeline,
one label per bin of it, Points without a dict each (10 minutes at 10 Hz are 6 000 a GPU)."""

from __future__ import annotations

from conftest import REC
from history_mem import moved

from memtop.live.pipeline import BINS_KEPT, HISTORY_S, Pipeline, Point, Status
from memtop.storage.store import Recording


def test_points_labels_and_kept_frames_stop_at_the_widest_timeline():
    rec = Recording(REC[0])
    frames = list(rec.frames())
    span = frames[-1].t - frames[0].t + 0.1
    laps = int(1.5 * HISTORY_S / span) + 1  # a quarter hour of frames and more
    pipe = Pipeline(Status("live"), meta=rec.meta)
    for lap in range(laps):
        for f in frames:
            pipe.on_frame(moved(f, lap * span) if lap else f, tick=False)
    newest = frames[-1].t + (laps - 1) * span
    assert newest - frames[0].t > 1.5 * HISTORY_S
    hist = pipe.history[0]
    assert newest - HISTORY_S - 0.5 <= hist[0].t and newest - 0.5 <= hist[-1].t <= newest
    assert BINS_KEPT * pipe.classifier.bin_s == HISTORY_S
    assert len(pipe.classifier.labels[0]) == BINS_KEPT
    assert pipe.classifier.labels[0][0].t >= newest - HISTORY_S - 1.0  # only what the timeline can show
    assert all(f.t >= newest - HISTORY_S - 1.0 for f in pipe._kept)
    view = pipe.view()
    assert len(view.labels[0]) == BINS_KEPT and view.history[0] == tuple(hist)
    assert not hasattr(hist[-1], "__dict__") and isinstance(hist[-1], Point)
