"""`memtop snapshot`: the schema, the stream, --fail-on, and job identity from a real environ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from hostile import HOSTILE
from memtop.collectors.jobid import KEYS, parse_environ, read_job

from memtop.analysis.phases import LABELS, classify
from memtop.cli import main
from memtop.commands.snapshot import BIN_S, CountingPipeline
from memtop.live.pipeline import Status
from memtop.storage.store import Recording

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "docs" / "snapshot.schema.json").read_text())
REC = ROOT / "tests" / "data" / "labelled_s5.memtop"


def _snaps(capsys, *argv: str) -> tuple[int, list[dict]]:
    rc = main(["snapshot", "--json", *argv])
    out = capsys.readouterr()
    _snaps.err = out.err
    return rc, [json.loads(line) for line in out.out.splitlines()]


def test_demo_snapshot_follows_the_schema(capsys):
    rc, snaps = _snaps(capsys, "--demo")
    assert rc == 0 and len(snaps) == 1
    snap = snaps[0]
    jsonschema.validate(snap, SCHEMA)
    g = snap["gpus"][0]
    assert g["phase"] in LABELS
    assert abs(sum(g["shares"].values()) - 1) < 0.01  # shares of one window
    assert g["band"].strip() and set(g["band"]) <= set("CMTSIP.? ")
    assert g["verdict"]["headline"].startswith("GPU 0")
    assert snap["no_gpu"] is None
    assert snap["processes"] and all(p["job"] == {} for p in snap["processes"])  # replayed PIDs: no environ


def test_stream_and_fail_on(capsys):
    rc, snaps = _snaps(capsys, "--replay", str(REC), "--interval", "0.3", "--count", "3")
    assert rc == 0 and len(snaps) == 3
    assert snaps[0]["time"] < snaps[1]["time"] < snaps[2]["time"]
    assert snaps[2]["position_s"] > snaps[0]["position_s"]
    for s in snaps:
        jsonschema.validate(s, SCHEMA)
    shares = snaps[0]["gpus"][0]["shares"]
    phase, top = max(((p, s) for p, s in shares.items() if p in LABELS), key=lambda x: x[1])
    rc, _ = _snaps(capsys, "--replay", str(REC), "--fail-on", f"{phase}:{top / 2:.3f}")
    assert rc == 3
    assert f"GPU 0 {phase}" in _snaps.err
    rc, _ = _snaps(capsys, "--replay", str(REC), "--fail-on", f"{phase}:1")
    assert rc == 0


@pytest.mark.parametrize("bad", ["sync", "bogus:0.2", "sync:2", "sync:x"])
def test_bad_fail_on_is_one_line_exit_2(capsys, bad):
    assert main(["snapshot", "--demo", "--fail-on", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fail-on" in err


def test_phase_counters_match_an_independent_classification():
    """The serve counters (seconds per phase) equal a whole-recording classification's bins."""
    rec = Recording(REC)
    pipe = CountingPipeline(Status("replay"), rec.meta)
    for f in rec.frames():
        pipe.on_frame(f, tick=False)
    got = pipe.count_phases(pipe.view())[0]
    clf = classify(Recording(REC).frames())
    want = Counter(lab.label for lab in clf.labels[0] if lab.t <= max(pipe.view().labels[0][-1].t, 0))
    for phase in set(got) | set(want):
        assert got[phase] == pytest.approx(BIN_S * want[phase], abs=BIN_S)
    assert sum(got.values()) > 100  # a couple of minutes of bins


def test_job_identity_from_a_real_process_environ():
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLURM_JOB_ID": "4242",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "POD_NAME": "trainer-0",
        "AWS_SECRET_ACCESS_KEY": "do-not-read",
        "SLURM_JOB_NAME": HOSTILE[0],  # an escape sequence: not a job name
    }
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        for _ in range(200):  # until it has exec'd (before, /proc shows the forked parent's environ)
            if b"time.sleep" in Path(f"/proc/{p.pid}/cmdline").read_bytes():
                break
            time.sleep(0.01)
        job = read_job(p.pid)
    finally:
        p.kill()
        p.wait()
    assert job == {
        "slurm_job_id": "4242",
        "rank": "3",
        "local_rank": "1",
        "world_size": "16",
        "pod": "trainer-0",
    }
    assert set(job) <= set(KEYS)


def test_hostile_values_never_become_identity():
    for s in HOSTILE:
        block = b"\0".join(
            f"{k}={s}".encode("utf-8", "surrogateescape") for k in ("SLURM_JOB_NAME", "POD_NAME", "RANK")
        )
        got = parse_environ(block)
        assert all(v.isprintable() and len(v) <= 64 for v in got.values()), got
    assert read_job(1 << 30) == {}  # no such process: absent, no error


def test_the_model_names_every_job_key_jobid_reads():
    from memtop.collectors.jobid import CGROUP_KEYS, FIELDS

    from memtop.core.model import JOB_KEYS

    assert (*(k for k, _ in FIELDS.values()), *CGROUP_KEYS) == JOB_KEYS
    job = SCHEMA["$defs"]["job"]["properties"]
    assert set(job) == set(JOB_KEYS)


def test_the_schema_names_every_phase_and_an_nvml_only_run_says_gpm_is_missing(capsys):
    phase_enum = SCHEMA["properties"]["gpus"]["items"]["properties"]["phase"]["enum"]
    assert set(LABELS) | {"warmup", "gathering"} == set(phase_enum)
    rc, snaps = _snaps(capsys, "--replay", str(ROOT / "tests" / "data" / "labelled_s2_nogpm.memtop"))
    assert rc == 0 and len(snaps) == 1
    jsonschema.validate(snaps[0], SCHEMA)
    v = snaps[0]["gpus"][0]["verdict"]
    assert v["missing"].startswith("missing GPM:") and v["straggler"] is False
