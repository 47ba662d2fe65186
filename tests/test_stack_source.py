"""The stacks panel's source lines: only the lines asked for are kept (a torch job's stacks name
hundreds of files a process), the same text as reading the file, and a bounded number of files."""

from __future__ import annotations

import os

from memtop.collectors.stacks import SourceLines


def test_only_the_lines_asked_for_are_kept_and_read_right(tmp_path):
    f = tmp_path / "train.py"
    f.write_text("".join(f"    line_{i} = {i}\n" for i in range(1, 5001)))
    src, me = SourceLines(), os.getpid()
    assert src.get(me, str(f), 7) == "line_7 = 7"
    assert src.get(me, str(f), 4321) == "line_4321 = 4321"  # a line not seen yet: read again
    assert src.get(me, str(f), 7) == "line_7 = 7"
    assert src.get(me, str(f), 9999) == ""  # past the end
    assert src._cache == {(me, str(f)): {7: "line_7 = 7", 4321: "line_4321 = 4321", 9999: ""}}
    missing = str(tmp_path / "gone.py")
    assert src.get(me, missing, 3) == "" and src._cache[(me, missing)] is None  # not read again


def test_the_files_kept_are_bounded(tmp_path):
    src, me = SourceLines(), os.getpid()
    src.MAX_FILES = 3
    for i in range(7):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"a = {i}\n")
        assert src.get(me, str(p), 1) == f"a = {i}"
        assert len(src._cache) <= 3


def test_dumps_share_their_frames_names():
    """A live view keeps ten minutes of stack samples: each dump's names are the ones already held."""
    from memtop.collectors.stacks import parse_dump

    dump = '[{"thread_id": 7, "active": true, "frames": [{"name": "forward", "filename": "/m/%s.py", "line": 3}]}]'
    a, b = (parse_dump(dump % "".join(["model"]), 7, 0.0) for _ in range(2))
    fa, fb = a.threads[0].frames[0], b.threads[0].frames[0]
    assert (fa.name, fa.file, fa.line) == ("forward", "/m/model.py", 3)
    assert fa.file is fb.file and fa.name is fb.name
