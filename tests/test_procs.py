"""Whose GPU time is it (#37): per-process GPU utilisation from NVML, PIDs across PID namespaces, and
identity from cgroups, from the collector through the recording to the table, snapshot, report and
serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import psutil
import pytest
from conftest import DATA
from memtop.collectors import procfs
from memtop.collectors.jobid import parse_cgroup, read_job
from memtop.collectors.nvml import GpuReader, ProcUtilDrain
from memtop.collectors.nvml_calls import ReplayNvml
from memtop.tui import format as fmt

from memtop.core.model import Frame, GpuProcess, GpuSample, HostSample, ProcJob, ProcSample, ProcUtil
from memtop.live.pipeline import Pipeline, Status
from memtop.outputs.report import build_report
from memtop.storage.store import Recording, Writer

ROOT = Path(__file__).parent.parent
CGROUPS = DATA / "cgroup"
HEX = "3f1c2e4d5b6a79808f9e0d1c2b3a4958675a6b7c8d9e0f1a2b3c4d5e6f708192"
UID = "5b3c1e2a-9d4f-4c8e-8a7b-1f2e3d4c5b6a"


# -- per-process utilisation: the drain ----------------------------------------------------
def test_drain_means_new_samples_holds_briefly_then_reads_zero():
    d = ProcUtilDrain()
    s = 1_000_000_000_000  # wall µs
    # two samples of pid 7 this second, one of 8; 9 is on the GPU but the driver left it out (idle)
    got = d.take(
        [(7, s + 100, 80, 40, 0, 0), (7, s + 200, 60, 20, 0, 0), (8, s + 150, 10, 5, 0, 0)],
        [7, 8, 9],
        s + 300,
    )
    assert got == (
        ProcUtil(7, 70.0, 30.0, 0.0, 0.0),
        ProcUtil(8, 10.0, 5.0, 0.0, 0.0),
        ProcUtil(9, 0.0, 0.0, 0.0, 0.0),
    )
    assert d.last_us == s + 200
    # a repeat of old samples counts once; within HOLD_S a process keeps its last figure
    got = d.take([(7, s + 200, 60, 20, 0, 0)], [7, 8], s + 1_000_000)
    assert [u.sm for u in got] == [70.0, 10.0]
    # past HOLD_S without a sample: 0 (the driver samples only processes that used the GPU)
    got = d.take([], [7, 8], s + 200 + int(ProcUtilDrain.HOLD_S * 1e6) + 1)
    assert [u.sm for u in got] == [0.0, 0.0]
    # where the driver sampled and left a process out, it did not use the GPU: 0 at once
    got = d.take([(8, s + 5_000_000, 30, 9, 0, 0)], [7, 8], s + 5_100_000)
    assert [u.sm for u in got] == [0.0, 30.0]


def _reader(calls: list[dict], pid_map=None) -> GpuReader:
    return GpuReader(
        ReplayNvml(calls),
        0,
        {"name": "H100", "uuid": "GPU-x", "mig": False},
        False,
        "",
        0.2,
        0.0,
        False,
        pid_map,
    )


def test_reader_carries_the_driver_figures_and_stops_asking_when_unsupported():
    now = time.monotonic()
    ts = int(now * 1e6)
    calls = [
        {"m": "processes", "a": [0], "r": [[41, 1 << 30], [42, 1 << 29]]},
        {
            "m": "process_utilization",
            "a": [0, 0],
            "r": [[41, ts - 10, 93, 51, 0, 0], [42, ts - 5, 7, 2, 0, 0]],
        },
    ]
    (g,) = _reader(calls).sample(now)
    assert isinstance(g, GpuSample)
    assert g.util_of(41) == ProcUtil(41, 93.0, 51.0, 0.0, 0.0) and g.util_of(42).sm == 7.0
    assert fmt.gpu_proc_text(g, 41) == "41 (SM 93%, mem 51%)"
    # an older GPU (or MIG): NOT_SUPPORTED once, then no figures and no error shown
    r = _reader(
        [
            {"m": "processes", "a": [0], "r": [[41, 1]]},
            {"m": "process_utilization", "a": [0, 0], "e": [3, "Not Supported"]},
        ]
    )
    (g,) = r.sample(now)
    assert g.proc_util == () and not r._putil_ok and not any("process" in c.name for c in r.capabilities())
    assert fmt.gpu_proc_text(g, 41) == "41"


# -- recorded, replayed, reported -----------------------------------------------------------
def _procs_recording(path: Path) -> Path:
    """Ten seconds of two processes on GPU 0 (pid 100 busy, 200 light), the first in a Kubernetes pod."""
    w = Writer(path, {"host": "n1", "gpus": [{"index": 0, "name": "H100", "uuid": "GPU-x", "mode": "gpm"}]})
    job = tuple(sorted(parse_cgroup((CGROUPS / "k8s_containerd_v2_burstable.txt").read_text()).items()))
    for k in range(21):
        t = 100.0 + k * 0.5
        g = GpuSample(
            t, 0, "GPU-x", "H100", "gpm", util=90.0, sm=80.0, graphics=90.0,
            processes=(GpuProcess(100, 1 << 34), GpuProcess(200, 1 << 30)),
            proc_util=(ProcUtil(100, 75.0 if k < 10 else 65.0, 40.0), ProcUtil(200, 15.0, 5.0)),
        )  # fmt: skip
        procs = tuple(
            ProcSample(pid, 1, name, name, "u", cpu, 4, "R", "0-3", "0", (0,), (0,))
            for pid, name, cpu in ((100, "train", 100.0), (200, "light", 30.0))
        )
        w.add(
            Frame(
                t,
                gpus=(g,),
                host=HostSample(t, (50.0,), 0.0, (0, 0, 0), 1, 2, 0, 0, procs=procs),
                jobs=(ProcJob(100, job),),
            )
        )
    w.close()
    return path


def test_recording_keeps_figures_and_identity_and_old_files_have_none(tmp_path):
    rec = Recording(_procs_recording(tmp_path / "p.memtop"))
    frames = list(rec.frames())
    assert frames[-1].gpus[0].util_of(100).sm == 65.0 and frames[0].gpus[0].util_of(100).sm == 75.0
    assert frames[-1].job_of(100) == {
        "container": HEX[:12],
        "runtime": "containerd",
        "pod_uid": UID,
        "qos": "burstable",
    }
    seek = rec.seek(rec.t0 + 7.0)  # the state at any time: the figures and the identity in force
    assert seek.gpus[0].util_of(200).sm == 15.0 and seek.job_of(100)["qos"] == "burstable"
    assert os.stat(rec.path).st_mode & 0o777 == 0o600
    old = Recording(DATA / "labelled_s5.memtop")  # made before either was stored
    f = next(iter(old.frames()))
    assert (
        f.jobs == () and all(g.proc_util == () for g in f.gpus) and old.proc_util_rows(old.t0, old.t1) == []
    )


def test_report_shares_over_the_range_and_schema(tmp_path):
    rec = Recording(_procs_recording(tmp_path / "p.memtop"))
    rep = build_report(rec)
    (g,) = rep["gpus"]
    busy, light = g["processes"]
    assert (busy["pid"], busy["name"], light["pid"]) == (100, "train", 200)
    assert busy["sm_pct"] == pytest.approx(70.0, abs=0.6)  # 75 for the first half, 65 after
    assert busy["sm_share"] + light["sm_share"] == pytest.approx(1.0, abs=0.002)
    assert light["mem_pct"] == 5.0
    jsonschema.validate(
        json.loads(json.dumps(rep)), json.loads((ROOT / "docs" / "report.schema.json").read_text())
    )
    from memtop.outputs.report import render

    assert "GPU time by process: 100 train SM 70 %" in render(rep, "text")
    # a recording without figures: no key (the golden reports of older files are unchanged)
    assert all("processes" not in g for g in build_report(Recording(DATA / "labelled_s5.memtop"))["gpus"])


def _view(path: Path):
    rec = Recording(path)
    p = Pipeline(Status("replay", duration=rec.duration, paused=True), meta=rec.meta)
    for f in rec.frames():
        p.on_frame(f, tick=False)
    return p.view()


def test_table_column_sort_identity_and_header(tmp_path):
    v = _view(_procs_recording(tmp_path / "p.memtop"))
    rows = dict(fmt.proc_rows(v))
    names = [c for c, _ in (*fmt.PROC_COLUMNS, fmt.TOP_FRAME, *fmt.PROC_TAIL)]
    assert rows["100"][names.index("SM%")] == "65" and rows["200"][names.index("SM%")] == "15"
    assert rows["100"][names.index("job")] == "pod 5b3c1e2a" and rows["200"][names.index("job")] == "-"
    assert [p.pid for p in fmt.shown_procs(v, "GPU SM")] == [100, 200]
    assert [p.pid for p in fmt.shown_procs(v, "GPU SM", reverse=True)] == [200, 100]
    assert [p.pid for p in fmt.shown_procs(v, match="5b3c1e2a")] == [100]
    assert f"pod 5b3c1e2a burstable, container {HEX[:12]} (containerd)" in fmt.header(v).plain


def test_snapshot_and_serve_per_process(tmp_path, capsys):
    from memtop.cli import main

    path = _procs_recording(tmp_path / "p.memtop")
    assert main(["snapshot", "--json", "--replay", str(path)]) == 0
    snap = json.loads(capsys.readouterr().out)
    jsonschema.validate(snap, json.loads((ROOT / "docs" / "snapshot.schema.json").read_text()))
    p100 = next(p for p in snap["processes"] if p["pid"] == 100)
    assert p100["gpu_util"][0]["gpu"] == 0 and p100["gpu_util"][0]["sm"] in (65.0, 75.0)
    assert p100["job"]["pod_uid"] == UID and snap["gpus"][0]["job"]["qos"] == "burstable"

    from prometheus_client.parser import text_string_to_metric_families

    from memtop.commands.serve import exposition, registry
    from memtop.commands.snapshot import Node

    args = type("A", (), {"demo": False, "replay": str(path)})()
    node = Node(args)
    node.start()
    try:
        assert node.wait_ready(30.0)
        plain = {f.name: f for f in text_string_to_metric_families(exposition(registry(node)).decode())}
        per = {
            f.name: f
            for f in text_string_to_metric_families(exposition(registry(node, per_process=True)).decode())
        }
    finally:
        node.stop()
    assert not any(n.startswith("memtop_process_") for n in plain)  # off unless asked: no PID label
    (info,) = plain["memtop_gpu_info"].samples
    assert info.labels["pod_uid"] == UID and info.labels["runtime"] == "containerd"
    sm = {s.labels["pid"]: s.value for s in per["memtop_process_sm_utilization_ratio"].samples}
    assert set(sm) == {"100", "200"} and sm["200"] == pytest.approx(0.15)
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    assert "memtop_process_sm_utilization_ratio" in doc and "memtop_process_memory_utilization_ratio" in doc


# -- identity from cgroups ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("docker_v1.txt", {"container": HEX[:12], "runtime": "docker"}),
        ("docker_v2_systemd.txt", {"container": HEX[:12], "runtime": "docker"}),
        ("k8s_containerd_v2_burstable.txt", {"container": HEX[:12], "runtime": "containerd", "pod_uid": UID, "qos": "burstable"}),
        ("k8s_crio_v2_besteffort.txt", {"container": HEX[:12], "runtime": "cri-o", "pod_uid": UID, "qos": "besteffort"}),
        ("k8s_cgroupfs_v1_guaranteed.txt", {"container": HEX[:12], "pod_uid": UID, "qos": "guaranteed"}),
        ("podman_rootless_v2.txt", {"container": HEX[:12], "runtime": "podman"}),
        ("slurm_v1.txt", {"slurm_job_id": "4242", "slurm_step": "0"}),
        ("slurm_v2.txt", {"slurm_job_id": "4242", "slurm_step": "batch"}),
        ("private_cgroupns_v2.txt", {}),
        ("vm_self_real.txt", {}),  # recorded on the CI VM: a sandbox's cgroup that names no container
        ("h100_device_real.txt", {}),  # recorded on the lent H100 machine: cgroup v2, a sandbox's path
    ],
)  # fmt: skip
def test_cgroup_layouts(name, want):
    assert parse_cgroup((CGROUPS / name).read_text()) == want


def test_cgroup_of_real_processes_and_hostile_paths():
    # this process's real cgroup file parses without error, and identity needs no environment
    assert isinstance(read_job(os.getpid()), dict)
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            text = procfs.read(p / "cgroup")
            if text is not None:
                got = parse_cgroup(text)
                assert all(v.isprintable() and len(v) <= 64 for v in got.values()), got
    # a path that only looks like one: no 64-hex id, a pod id of the wrong shape, text around
    assert parse_cgroup("0::/docker/\x1b[31m" + "g" * 64 + "\n0::/kubepods/podnot-a-uid/x\n") == {}
    assert parse_cgroup(f"0::/x/docker-{HEX}.scope.evil/y\n") == {}
    assert (CGROUPS / "README.md").read_text().count("Recorded from real systems") == 1


# -- PID namespaces: a real one ---------------------------------------------------------------
INNER = r"""
import json, os, shutil, subprocess, sys, time
from memtop.collectors.host import HostCollector
from memtop.collectors.nvml import GpuReader
from memtop.collectors.nvml_calls import ReplayNvml
from memtop.collectors.pidns import PidMap

kid = subprocess.Popen([sys.executable, "-c", "import time\ndef train_step():\n    time.sleep(0.05)\nwhile True: train_step()"])
print(kid.pid, flush=True)
host_kid, host_other = map(int, sys.stdin.readline().split())
pm = PidMap(host_proc=f"/proc/self/fd/{sys.argv[1]}")
ts = int(time.time() * 1e6)
calls = [
    {"m": "processes", "a": [0], "r": [[host_kid, 1 << 30], [host_other, 1 << 29], [1, 1 << 20]]},
    {"m": "process_utilization", "a": [0, 0], "r": [[host_kid, ts, 55, 20, 0, 0]]},
]
r = GpuReader(ReplayNvml(calls), 0, {"name": "H100", "uuid": "GPU-x", "mig": False}, False, "", 0.2, time.time() - time.monotonic(), False, pm.local)
(g,) = r.sample(time.monotonic())
h = HostCollector(pid_map=pm)
h.start()
h.set_gpu_processes({p.pid: (0,) for p in g.processes}, ())
h.sample(time.monotonic())
(s,) = h.sample(time.monotonic() + 3.5)
spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
stack = subprocess.run([spy, "dump", "--pid", str(kid.pid)], capture_output=True, text=True, timeout=30).stdout
print(json.dumps({
    "depth": pm.depth, "gpu_pids": [p.pid for p in g.processes], "util": [[u.pid, u.sm] for u in g.proc_util],
    "procs": [[p.pid, list(p.gpus)] for p in s.procs],
    "caps": [[c.name, c.detail] for c in h.capabilities() if c.source == "host"],
    "stack": stack,
}), flush=True)
kid.kill()
"""


def _unshare_ok() -> str | None:
    try:
        r = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare: {e}"
    return None if r.returncode == 0 else f"unshare --pid not permitted here: {r.stderr.decode().strip()}"


def test_gpu_process_in_a_pid_namespace_is_shown_by_its_local_pid_with_stacks():
    if why := _unshare_ok():
        pytest.skip(why)
    outer = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)  # the host's procfs, handed in as a descriptor
    p = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", INNER, str(outer)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, pass_fds=(outer,),
    )  # fmt: skip
    try:
        local = int(p.stdout.readline())
        # NVML would name it by its host PID: the descendant of unshare whose innermost PID is `local`
        (host,) = [
            c.pid for c in psutil.Process(p.pid).children(recursive=True) if procfs.nspid("/proc", c.pid)[-1:] == (local,) and len(procfs.nspid("/proc", c.pid)) == 2
        ]  # fmt: skip
        assert host != local
        p.stdin.write(f"{host} {os.getpid()}\n")  # and this process: one of the host's, outside it
        p.stdin.flush()
        out = json.loads(p.stdout.readline())
    finally:
        p.kill()
        p.wait()
        os.close(outer)
    assert out["depth"] == 1
    assert out["gpu_pids"] == [local, os.getpid(), 1]
    assert out["util"] == [[1, 0.0], [local, 55.0], [os.getpid(), 0.0]]
    assert [local, [0]] in out["procs"]  # watched by its local PID: CPU, state, and its stack
    assert "train_step" in out["stack"]
    # the host's processes are not "cannot see" but another namespace's, by their cgroups; the host's
    # pid 1 is not this namespace's pid 1 (the inner memtop itself), though both exist here
    assert [1, [0]] not in out["procs"]
    assert [c[0] for c in out["caps"]] == ["pid 1", f"pid {os.getpid()}"]
    assert all("another PID namespace" in c[1] for c in out["caps"])


def test_cluster_keeps_the_cgroup_identity_of_the_shape_it_is_written_in():
    from memtop.fleet.wire import job

    good = parse_cgroup((CGROUPS / "k8s_crio_v2_besteffort.txt").read_text())
    assert job(good) == good
    assert (
        job({"container": "\x1b]0;x\x07" + "a" * 12, "qos": "root", "pod_uid": UID.upper(), "runtime": "rkt"})
        == {}
    )
    from memtop.tui.cluster import COLUMNS

    assert [c[0] for c in COLUMNS][3] == "job"  # where the container shows when no Slurm job or pod does


# -- the real H100 replies and recording (tests/data/procs/README.md) -------------------------
REAL = DATA / "procs"


def test_recorded_h100_replies_give_each_second_the_mean_of_its_new_samples():
    calls = json.loads((REAL / "nvml_procs_h100.json").read_text())["calls"]
    replies = [e["r"] for e in calls if e["m"] == "process_utilization"]
    first = min(r[1] for rows in replies for r in rows)
    t0 = 1000.0
    r = GpuReader(
        ReplayNvml(calls),
        0,
        {"name": "H100", "uuid": "u", "mig": False},
        True,
        "",
        0.1,
        first / 1e6 - t0,
        False,
    )
    seen = []
    for k, rows in enumerate(replies):
        (g,) = [p for p in r.sample(t0 + k * 1.0) if isinstance(p, GpuSample)]
        got = {u.pid: u.sm for u in g.proc_util}
        assert set(got) == {467, 468}  # every process on the GPU has a figure
        for pid in (467, 468):
            mine = [x[2] for x in rows if x[0] == pid]
            if rows:  # the driver sampled: its samples' mean, or 0 where it left the process out
                assert got[pid] == (sum(mine) / len(mine) if mine else 0.0)
        seen.append(got)
    assert seen[0] == {467: 0.0, 468: 0.0}  # nothing sampled since the reader started
    assert any(s[468] == 0.0 and s[467] == 99.0 for s in seen)  # a second the light process sat out
    assert max(s[468] for s in seen) == 39.0


def test_recorded_h100_run_report_table_and_serve():
    rec = Recording(REAL / "procs_h100.memtop")
    rep = build_report(rec)
    heavy, light = rep["gpus"][0]["processes"]
    assert (heavy["pid"], light["pid"]) == (467, 468) and heavy["name"] == light["name"] == "python3"
    # memtop's own 30 s means on the H100 (bench/data/procs/run2: 80.1 and 18.0 against pmon's 78.8 and 19.4)
    assert abs(heavy["sm_pct"] - 80) < 2 and abs(light["sm_pct"] - 18) < 2
    assert heavy["sm_share"] + light["sm_share"] == pytest.approx(1.0, abs=0.002)
    v = _view(REAL / "procs_h100.memtop")
    names = [c for c, _ in (*fmt.PROC_COLUMNS, fmt.TOP_FRAME, *fmt.PROC_TAIL)]
    rows = dict(fmt.proc_rows(v, order="GPU SM"))
    assert list(rows) == ["467", "468"] and rows["467"][names.index("SM%")] != "-"


def test_damaged_figures_and_identity_are_missing_data(tmp_path):
    import sqlite3

    path = _procs_recording(tmp_path / "p.memtop")
    db = sqlite3.connect(path)
    db.execute(
        'UPDATE proc_util SET data = \'[[100, 1e999, -5, "x", null], ["a", 1, 2, 3, 4], 7, [200, 50]]\''
    )
    db.execute("INSERT INTO proc_util VALUES (104.0, 'zero', '[]')")
    db.execute('UPDATE proc_job SET data = \'{"container": 5, "qos": "\\u001b[2J", "evil": "x"}\'')
    db.commit()
    db.close()
    rec = Recording(path)
    f = list(rec.frames())[-1]
    assert f.gpus[0].proc_util == (ProcUtil(100, None, None, None, None),)  # out of range: None
    assert f.jobs[0].job == (("qos", "\\x1b[2J"),)  # known keys only, strings only, made visible
    assert build_report(rec)["gpus"][0]["processes"][0]["sm_pct"] == 0.0


def test_doctor_in_a_pid_namespace_says_how_nvml_pids_are_mapped():
    if why := _unshare_ok():
        pytest.skip(why)
    outer = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        lines = {}
        for env in ({}, {"MEMTOP_HOST_PROC": f"/proc/self/fd/{outer}"}):
            r = subprocess.run(
                ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "memtop", "doctor"],
                capture_output=True, text=True, timeout=120, pass_fds=(outer,), env={**os.environ, **env},
            )  # fmt: skip
            out = r.stdout.splitlines()
            (k,) = [i for i, ln in enumerate(out) if "container / PID namespace" in ln]
            lines[bool(env)] = out[k : k + 2]
    finally:
        os.close(outer)
    assert lines[False][0].startswith("NO") and "own PID namespace" in lines[False][0]
    assert "/host/proc" in lines[False][1]
    assert lines[True][0].startswith("yes") and "mapped through /proc/self/fd/" in lines[True][0]
