"""The damage the issue's fuzz found (19 traceback signatures on 3387335), one case each: every
reader either reads the file (exit 0, strict JSON) or refuses it in one line (exit 2)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import zlib

import pytest
from conftest import REC, one_build
from fuzzing import bomb

from memtop.cli import main

_CAPS_CUT = zlib.compress(b'[["a", "b", "available", "c", ""]]')[:-6].hex()
# 64 MiB of '[' deflated (fuzzing's bomb: made in milliseconds, where deflating the 64 MiB took each
# xdist worker 0.6 CPU-s at collection)
_CAPS_BOMB = bomb("deep", 64 << 20).hex()
CASES = {
    "text frame t": "UPDATE frame SET t = 'x' WHERE t IN (SELECT t FROM frame LIMIT 1)",
    "+inf frame t": "INSERT INTO frame VALUES (1e999)",
    "-inf frame t": "INSERT INTO frame VALUES (-1e999)",
    # a finite time far ahead: readers must not walk the gap 5 s at a time (they hung)
    "frame t far ahead": "INSERT INTO frame VALUES (9e11)",
    "gpu row far ahead": "UPDATE gpu SET t = 5e11 WHERE rowid IN (SELECT rowid FROM gpu LIMIT 1)",
    "gpus not a list": "UPDATE meta SET value = '{\"index\": 0}' WHERE key = 'gpus'",
    "gpus of numbers": "UPDATE meta SET value = '[1, 2]' WHERE key = 'gpus'",
    "gpu index a string": 'UPDATE meta SET value = \'[{"index": "0", "name": 5}]\' WHERE key = \'gpus\'',
    "started_wall a string": "UPDATE meta SET value = '\"yesterday\"' WHERE key = 'started_wall'",
    "started_wall 1e300": "UPDATE meta SET value = '1e300' WHERE key = 'started_wall'",
    "text marker t0": "UPDATE marker SET t0 = 'x'",
    "blob marker name": "UPDATE marker SET name = X'00ff'",
    "text gpu index": "UPDATE gpu SET gpu = 'x' WHERE rowid IN (SELECT rowid FROM gpu LIMIT 5)",
    "blob clock_events": "UPDATE gpu SET clock_events = X'0102' WHERE rowid IN (SELECT rowid FROM gpu LIMIT 50)",
    "float clock_events": "UPDATE gpu SET clock_events = 0.5",
    "inf sm": "UPDATE gpu SET sm = 1e999",
    "bad zlib host": "UPDATE host SET data = X'00' WHERE t IN (SELECT t FROM host LIMIT 5)",
    "bad stack json": "UPDATE stack SET frames = '[[1,2' || id WHERE id IN (SELECT id FROM stack LIMIT 3)",
    "deep stack json": f"UPDATE stack SET frames = '{'[' * 5000}{']' * 5000}' WHERE id = (SELECT min(id) FROM stack)",
    "deep link json": f"UPDATE gpu_state SET link = '{'[' * 5000}{']' * 5000}'",
    "text caps": "UPDATE caps SET data = '[[1,2,3,4,5]]'",
    # schema 3 deflates caps and stacks: a blob that is no zlib, one cut short, one inflating to 64 MiB of '['
    "bad zlib caps": "UPDATE caps SET data = X'789c00'",
    "cut zlib caps": f"UPDATE caps SET data = X'{_CAPS_CUT}'",
    "caps bomb": f"UPDATE caps SET data = X'{_CAPS_BOMB}'",
    "stack bomb": f"UPDATE stack SET frames = X'{_CAPS_BOMB}' WHERE id = (SELECT min(id) FROM stack)",
    "stack not zlib": "UPDATE stack SET frames = CAST(X'789c00' || id AS BLOB) WHERE id IN (SELECT id FROM stack LIMIT 3)",
    "text perf": 'UPDATE perf SET data = \'{"a": "b"}\'',
    "text stack pid": "UPDATE stack_sample SET pid = 'x' WHERE rowid IN (SELECT rowid FROM stack_sample LIMIT 9)",
    "thread without a class": "UPDATE stack_sample SET klass = NULL WHERE rowid IN "
    "(SELECT rowid FROM stack_sample WHERE error IS NULL LIMIT 5)",
    "NaN cpus": "UPDATE meta SET value = 'NaN' WHERE key = 'cpus'",
    "dropped stack table": "DROP TABLE stack",
}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged")
    out = {}
    for name, sql in CASES.items():
        p = d / (name.replace(" ", "_") + ".memtop")
        shutil.copyfile(REC[0], p)
        db = sqlite3.connect(p)
        db.execute(sql)
        db.commit()
        db.close()
        out[name] = p
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_a_damaged_recording_reads_or_is_refused_in_one_line(capsys, damaged, tmp_path, name, monkeypatch):
    one_build(monkeypatch, {})
    p = str(damaged[name])
    for argv in (
        ["replay", "--summary", p],
        ["report", p],
        ["report", p, "--format", "markdown"],
        ["report", p, "--format", "json"],
        ["export", p, "--perfetto", str(tmp_path / "t.json"), "--force"],
    ):
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc in (0, 2), (argv, err)
        if rc == 2:
            assert err.count("\n") == 1 and out == ""
        elif argv[-1] == "json" or argv[0] == "replay":
            json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


@pytest.mark.parametrize(
    ("name", "said"),
    [("bad zlib host", "host"), ("text frame t", "invalid time"), ("text marker t0", "marker")],
)
def test_a_report_on_a_damaged_recording_says_what_it_skipped(capsys, damaged, name, said):
    assert main(["report", str(damaged[name])]) == 0
    out, _ = capsys.readouterr()
    line = next((s for s in out.splitlines() if s.startswith("damaged parts skipped: ")), "")
    assert said in line, out
    assert main(["report", str(damaged[name]), "--format", "json"]) == 0
    assert any(said in n for n in json.loads(capsys.readouterr()[0])["damage"])
    assert main(["report", str(REC[0])]) == 0
    assert "damaged" not in capsys.readouterr()[0]  # a sound recording claims no damage


def test_damage_is_a_note_in_every_frame_and_the_rest_plays(damaged):
    from memtop.storage.store import Recording

    rec = Recording(damaged["bad zlib host"])
    frames = list(rec.frames())
    assert len(frames) == rec.n_frames
    assert any("host" in n for n in frames[-1].notes)
    assert sum(f.host is not None for f in frames) > 0.9 * len(frames)
    rec = Recording(damaged["started_wall 1e300"])
    assert rec.meta["started_wall"] is None and any("started_wall" in n for n in next(rec.frames()).notes)


_HOST_BOMB = bomb("host", 8 << 20).hex()  # valid JSON, 8 MiB: {"t":0.0,"pad":"aaa..."}
_ARRAY = "[" + ",".join(["{}"] * (512 << 10)) + "]"  # 1 MiB of JSON: half a million objects
_DEEP = "[" * 900 + "]" * 900  # deeper than any recursion over it may go
_LOOP = "WITH RECURSIVE c(t) AS (SELECT 1.0 UNION ALL SELECT t + 1 FROM c) SELECT t AS t FROM c"
# parts whose size is bounded (a few KB of file) but whose cost was not, and schema objects that are
# no tables: each is read at a bounded cost, or refused in one line
COST_CASES = {
    "view named frame": (f"ALTER TABLE frame RENAME TO frame_rows; CREATE VIEW frame AS {_LOOP}", "view"),
    "view named meta": (
        f"ALTER TABLE meta RENAME TO meta_rows; CREATE VIEW meta AS SELECT 'magic' AS key, t AS value FROM ({_LOOP})",
        "view",
    ),
    "generated column": ("ALTER TABLE note ADD COLUMN x AS (zeroblob(16000000))", "computed column"),
    "host JSON bomb": (
        f"UPDATE host SET data = X'{_HOST_BOMB}' WHERE t IN (SELECT t FROM host LIMIT 3)",
        None,
    ),
    "meta object bomb": (f"UPDATE meta SET value = '{_ARRAY}' WHERE key = 'cadence'", None),
    "deep meta": (f"UPDATE meta SET value = '{_DEEP}' WHERE key = 'cadence'", None),
    "marker facts 1 MiB": (f"UPDATE marker SET facts = '{_ARRAY}'", None),
    "gpu_state processes 1 MiB": (f"UPDATE gpu_state SET processes = '{_ARRAY}'", None),
    "perf rates 1 MiB": (
        f"UPDATE perf SET data = '{_ARRAY}' WHERE rowid IN (SELECT rowid FROM perf LIMIT 2)",
        None,
    ),
}


@pytest.fixture(scope="module")
def costly(tmp_path_factory):
    from fuzzing import make_bases

    d = tmp_path_factory.mktemp("costly")
    base = make_bases(d / "bases")[0]  # 12 s of a real recording
    out = {}
    for name, (sql, _) in COST_CASES.items():
        p = d / (name.replace(" ", "_") + ".memtop")
        shutil.copyfile(base, p)
        db = sqlite3.connect(p)
        db.executescript(sql)
        db.close()
        out[name] = p
    return out


@pytest.mark.parametrize("name", list(COST_CASES))
def test_a_costly_part_is_read_at_a_bounded_cost_or_refused(capsys, costly, tmp_path, name):
    p = str(costly[name])
    said = COST_CASES[name][1]
    for argv in (["replay", "--summary", p], ["report", p, "--format", "json"]):
        rc = main(argv)
        out, err = capsys.readouterr()
        if said is not None:  # refused before its first query of the rows
            assert rc == 2 and err.count("\n") == 1 and out == "" and said in err, (argv, err)
        else:
            assert rc == 0, (argv, err)
            json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_what_a_costly_part_cost_is_noted(capsys, costly):
    from memtop.storage.store import Recording

    rec = Recording(costly["meta object bomb"])
    assert rec.meta["cadence"] is None and any("cadence" in n for n in rec.damage)
    assert Recording(costly["deep meta"]).meta["cadence"] is not None  # read, its depth cut at 32
    rec = Recording(costly["marker facts 1 MiB"])
    assert rec.markers() == [] and any("marker" in n for n in rec.damage)
    rec = Recording(costly["host JSON bomb"])
    frames = list(rec.frames())
    assert any("damaged host data skipped" in n for n in frames[-1].notes)
    rec = Recording(costly["gpu_state processes 1 MiB"])
    assert all(g.processes == () for f in rec.frames() for g in f.gpus)
