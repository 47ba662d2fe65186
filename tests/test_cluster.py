"""`memtop cluster`: 8 real `memtop serve --replay` nodes on loopback, a real sshd for --ssh,
straggler flags on real snapshots, stale reasons, host lists, and hostile node strings."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest
from netutil import free_ports, memtop, stop, wait_ready
from pilots import until

from memtop.cli import main
from memtop.core.sanitize import is_clean
from memtop.fleet.sources import read_hosts
from memtop.fleet.view import NodeState, print_text, recent_phase, rows

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "docs" / "snapshot.schema.json").read_text())
RECS = sorted((ROOT / "tests" / "data").glob("labelled_s*.memtop"))


def _cluster(*argv: str, timeout: float = 60) -> tuple[int, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "memtop", "cluster", *argv, "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {"stderr": r.stderr}


@pytest.mark.slow
def test_eight_serve_nodes_and_a_dead_one():
    """Eight real nodes, each replaying its own recording (sixteen cost twice the CPU and checked no
    more: the merge is per node, and bench/cluster_ab.py polls up to 1 024)."""
    ports = free_ports(9)
    dead = ports.pop()
    procs = [
        memtop("serve", "--replay", str(RECS[i % len(RECS)]), "--port", str(p), stderr=subprocess.DEVNULL)
        for i, p in enumerate(ports)
    ]
    try:
        for p, port in zip(procs, ports):
            wait_ready(port, proc=p, timeout=60)
        hosts = ",".join(f"127.0.0.1:{p}" for p in [*ports, dead])
        rc, out = _cluster("--hosts", hosts, "--timeout", "5")
    finally:
        stop(*procs)
    assert rc == 1  # one node did not answer
    by = {n["target"]: n for n in out["nodes"]}
    assert by[f"127.0.0.1:{dead}"] == {**by[f"127.0.0.1:{dead}"], "ok": False, "error": "refused"}
    good = [n for n in out["nodes"] if n["ok"]]
    assert len(good) == 8
    for n in good:
        jsonschema.validate(n["snapshot"], SCHEMA)
        assert n["age_s"] < 5
    # each node replays its own recording: the merged GPUs carry each one's own phase band
    assert len({n["snapshot"]["gpus"][0]["band"] for n in good}) > 4


def _real_snapshot(rec: Path, capsys) -> dict:
    assert main(["snapshot", "--json", "--replay", str(rec)]) == 0
    return json.loads(capsys.readouterr().out)


def _state(target: str, snap: dict) -> NodeState:
    n = NodeState(target)
    n.good(json.loads(json.dumps(snap)), 1)
    return n


def test_the_gpu_unlike_its_job_is_the_straggler(capsys):
    """Five nodes at the same point of one real run and one node of another run whose recent phase
    differs: only that one is flagged, with its evidence."""
    base = _real_snapshot(RECS[0], capsys)
    major = recent_phase(base["gpus"][0])
    odd = next(
        s for s in (_real_snapshot(r, capsys) for r in RECS[1:]) if recent_phase(s["gpus"][0]) != major
    )
    nodes = [_state(f"n{i}", base) for i in range(5)] + [_state("odd", odd)]
    rs = rows(nodes, 2.0)
    flagged = [r for r in rs if r.straggler]
    assert [r.target for r in flagged] == ["odd"]
    assert f"5 of 6 GPUs of the job are {major}" in flagged[0].straggler
    assert recent_phase(odd["gpus"][0]) in flagged[0].straggler
    # two groups of equal size: no majority, no flag
    rs = rows([_state(f"a{i}", base) for i in range(3)] + [_state(f"b{i}", odd) for i in range(3)], 2.0)
    assert not [r for r in rs if r.straggler]
    # a job is judged apart from the other jobs
    other = json.loads(json.dumps(odd))
    other["gpus"][0]["job"] = {"slurm_job_id": "77"}
    rs = rows(nodes[:5] + [_state(f"j{i}", other) for i in range(3)], 2.0)
    assert not [r for r in rs if r.straggler]


def test_a_flagged_row_is_kept_while_unchanged_and_its_evidence_follows_the_job(capsys):
    """The straggler pass reuses a flagged row while its node and its job's counts are the same, and
    says the new counts and the GPU's new verdict once they change."""
    base = _real_snapshot(RECS[0], capsys)
    major = recent_phase(base["gpus"][0])
    odd = next(
        s for s in (_real_snapshot(r, capsys) for r in RECS[1:]) if recent_phase(s["gpus"][0]) != major
    )
    nodes = [_state(f"n{i}", base) for i in range(5)] + [_state("odd", odd)]
    first = rows(nodes, 2.0)[5]
    assert first.straggler and rows(nodes, 2.0)[5] is first
    nodes.append(_state("n5", base))  # the job's counts change: the same node's evidence says so
    again = rows(nodes, 2.0)[5]
    assert f"6 of 7 GPUs of the job are {major}" in again.straggler
    assert again.straggler.split(" are ", 1)[1] == first.straggler.split(" are ", 1)[1]
    changed = json.loads(json.dumps(odd))
    changed["gpus"][0]["verdict"]["headline"] = "a new headline"
    nodes[5].good(changed, 1)  # the node's next poll: its own part of the evidence follows
    assert "verdict: a new headline" in rows(nodes, 2.0)[5].straggler


def test_stale_after_three_intervals_with_the_reason(capsys):
    n = _state("n0", _real_snapshot(RECS[0], capsys))
    assert rows([n], 1.0)[0].stale is None
    n.ok_at -= 3.5  # as if three intervals passed without a good poll
    n.bad("timeout")
    assert rows([n], 1.0)[0].stale == "timeout"


def test_hostile_node_strings_stay_data(capsys):
    from hostile import HOSTILE

    snap = _real_snapshot(RECS[0], capsys)
    snap["hostname"] = HOSTILE[0]
    snap["gpus"][0]["phase"] = HOSTILE[3]
    snap["gpus"][0]["band"] = HOSTILE[1]
    n = _state(HOSTILE[2][:40], snap)
    print_text([n], 2.0)
    out = capsys.readouterr().out
    assert all(is_clean(line) for line in out.splitlines())


def test_host_lists(tmp_path, monkeypatch):
    import argparse

    hf = tmp_path / "hosts"
    hf.write_text("node1  # comment\n\nnode2:9999\nnode1\n")
    ns = argparse.Namespace(hosts=None, hostfile=str(hf), slurm=None)
    assert read_hosts(ns) == ["node1", "node2:9999"]
    ns = argparse.Namespace(hosts="-oProxyCommand=x", hostfile=None, slurm=None)
    with pytest.raises(Exception, match="not a host name"):
        read_hosts(ns)  # an ssh option is never a host
    for bad in ("node:99999", "node:0", "[::1]:70000x"):
        with pytest.raises(Exception, match="not a host name"):
            read_hosts(argparse.Namespace(hosts=bad, hostfile=None, slurm=None))
    assert read_hosts(argparse.Namespace(hosts="node:65535,::1,[::1]:9866", hostfile=None, slurm=None))
    # scontrol: the job's NodeList, expanded by `scontrol show hostnames` (Slurm is not on CI:
    # this stands in for its client and records the argv it was given)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv"
    (bindir / "scontrol").write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {log}
        case "$2" in
          job) echo "JobId=42 JobName=t NodeList=gpu[01-02] NumNodes=2" ;;
          hostnames) echo gpu01; echo gpu02 ;;
        esac
        """)
    )
    (bindir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert read_hosts(argparse.Namespace(hosts=None, hostfile=None, slurm="42")) == ["gpu01", "gpu02"]
    assert log.read_text().splitlines() == ["show job -o 42", "show hostnames gpu[01-02]"]
    assert main(["cluster", "--slurm", "42; rm -rf /", "--once"]) == 2


SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


@pytest.mark.slow
@pytest.mark.skipif(SSHD is None or shutil.which("ssh") is None, reason="needs openssh-server and ssh")
def test_ssh_transport_against_a_real_sshd(tmp_path):
    """A throwaway sshd on 127.0.0.1 (own config, host key and client key, unprivileged port);
    `memtop cluster --ssh` runs `memtop snapshot --json --interval S` on it over ssh."""
    (port,) = free_ports(1)
    d = tmp_path
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True, timeout=30
        )
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    (d / "authorized_keys").chmod(0o600)
    # the remote memtop: this test's interpreter, in --demo mode (no GPU here)
    shim = d / "bin" / "memtop"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m memtop "$@" --demo\n')
    shim.chmod(0o755)
    (d / "sshd_config").write_text(
        textwrap.dedent(f"""\
        ListenAddress 127.0.0.1:{port}
        HostKey {d / "host"}
        PidFile {d / "sshd.pid"}
        AuthorizedKeysFile {d / "authorized_keys"}
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        PubkeyAuthentication yes
        StrictModes no
        UsePAM no
        SetEnv PATH={shim.parent}:/usr/bin:/bin PYTHONPATH={os.pathsep.join(sys.path)}
        """)
    )
    (d / "ssh_config").write_text(
        textwrap.dedent(f"""\
        Host node-a node-b
          HostName 127.0.0.1
          Port {port}
          User {os.environ.get("USER") or __import__("getpass").getuser()}
          IdentityFile {d / "client"}
          IdentitiesOnly yes
          UserKnownHostsFile {d / "known_hosts"}
          StrictHostKeyChecking accept-new
          LogLevel ERROR
        Host node-denied
          HostName 127.0.0.1
          Port {port}
          User nobody
          IdentityFile {d / "client"}
          IdentitiesOnly yes
          UserKnownHostsFile {d / "known_hosts"}
          StrictHostKeyChecking accept-new
          LogLevel ERROR
        """)
    )
    if os.geteuid() == 0:  # sshd refuses to start without its privilege-separation directory
        Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE)
    try:
        # listening once it has written its pid file (after it binds); a bound for a loaded machine
        end = time.monotonic() + 60
        while not (d / "sshd.pid").exists() and sshd.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        if sshd.poll() is not None:
            pytest.skip(f"sshd could not start here: {sshd.stderr.read().decode()[-300:]}")
        rc, out = _cluster(
            "--ssh", "--ssh-config", str(d / "ssh_config"), "--hosts", "node-a,node-b,node-denied",
            "--interval", "1", "--timeout", "10", timeout=90,
        )  # fmt: skip
    finally:
        stop(sshd)
    by = {n["target"]: n for n in out["nodes"]}
    assert by["node-a"]["ok"] and by["node-b"]["ok"], out
    for t in ("node-a", "node-b"):
        jsonschema.validate(by[t]["snapshot"], SCHEMA)
        assert by[t]["snapshot"]["mode"] == "demo"
    assert by["node-denied"]["ok"] is False and by["node-denied"]["error"] == "auth"
    assert rc == 1


def test_an_ssh_started_as_stop_comes_is_ended(tmp_path, monkeypatch):
    """stop() landing between a node thread's Popen and its entry in procs: that ssh is ended too,
    and the node's thread returns (it was left reading an ssh that nothing would end)."""
    from memtop.fleet.sources import SshStreams

    (tmp_path / "ssh").write_text("#!/bin/sh\nexec sleep 600\n")
    (tmp_path / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    streams = SshStreams([NodeState("node-a")], interval=60)
    started: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def popen_then_stop(*args, **kw):
        p = popen(*args, **kw)
        started.append(p)
        streams.stop()  # here, before _run has recorded p
        return p

    monkeypatch.setattr(subprocess, "Popen", popen_then_stop)
    try:
        streams.start()
        (t,) = streams._threads
        t.join(30)  # a bound, not a pace: the fault is a thread that never returns
        assert not t.is_alive()
        (p,) = started
        assert p.poll() is not None  # ended and reaped
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
                p.wait()


class _Nodes:
    """The TUI's source: node states already polled (from real snapshots)."""

    def __init__(self, nodes: list[NodeState]) -> None:
        self.nodes = nodes

    def poll_all(self, wait: bool = True) -> None:
        # each poll brings every answering node's snapshot again: fresh, however long a loaded machine
        # took from making the states to the app's first poll (they went stale after 3 intervals)
        for n in self.nodes:
            if n.ok_at:
                n.ok_at = time.monotonic()

    def close(self) -> None:
        pass


async def _after_a_poll(pilot, table) -> None:
    """Returns once a paint shows the nodes' rows, the answering ones fresh (polled: a bound, not a
    pace; passed, it fails)."""
    assert await until(
        pilot, lambda: len(table._lines) > 1 and not any("no fresh snapshot" in s.text for s in table._lines)
    ), [strip.text for strip in table._lines]


async def test_tui_rows_straggler_stale_and_enter(capsys):
    from hostile import HOSTILE
    from memtop.tui.cluster import BandTable, ClusterApp, NodeScreen
    from memtop.tui.tiles import TextPanel

    base = _real_snapshot(RECS[0], capsys)
    major = recent_phase(base["gpus"][0])
    odd = next(
        s for s in (_real_snapshot(r, capsys) for r in RECS[1:]) if recent_phase(s["gpus"][0]) != major
    )
    odd["hostname"] = HOSTILE[0]
    dead = NodeState("dead:1")
    dead.bad("refused")
    nodes = [_state(f"n{i}", base) for i in range(4)] + [_state("odd", odd), dead]
    for width in (80, 120):  # the mark, the verdict's window and the stale reason at any width
        app = ClusterApp(_Nodes(nodes), interval=2.0)
        async with app.run_test(size=(width, 30)) as pilot:
            await _after_a_poll(pilot, app.query_one(BandTable))
            lines = [strip.text.rstrip() for strip in app.query_one(BandTable)._lines]
            marks = [line.split()[2] == "!" for line in lines[1:6]]
            assert marks == [False] * 4 + [True], lines
            assert lines[6].endswith("no data: refused") and all(len(ln) <= width for ln in lines)
            assert all(re.search(r" last \d+ s: \w+ \d+ %$", ln) for ln in lines[1:5]), lines
    app = ClusterApp(_Nodes(nodes), interval=2.0)
    async with app.run_test(size=(200, 30)) as pilot:
        table = app.query_one(BandTable)
        await _after_a_poll(pilot, table)
        assert table.keys == ["n0/0", "n1/0", "n2/0", "n3/0", "odd/0", "dead:1/-"]
        lines = [strip.text for strip in table._lines]  # header, then one line per row
        assert "straggler?" in lines[5] and "refused" in lines[6]
        assert not any("straggler?" in line for line in lines[1:5])
        # the detail pane sits right under the rows (no empty screen between them)
        assert app.query_one("#detail").region.y <= table.region.bottom + 1
        table.focus()
        table.move_cursor(4)
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, NodeScreen))
        shown = app.screen.query_one(TextPanel).text.plain
        assert "odd" in shown and "\x1b" not in shown


async def test_a_fault_in_a_poll_is_shown_and_polling_goes_on(capsys):
    """Whatever a poll raises is the header's error line while it lasts; the poll thread lives on."""
    from memtop.tui.cluster import ClusterApp
    from memtop.tui.tiles import TextPanel

    class Faulty(_Nodes):
        failing, calls = True, 0

        def poll_all(self, wait: bool = True) -> None:
            self.calls += 1
            if self.failing:
                raise UnicodeEncodeError("ascii", "/prométhée", 5, 6, "ordinal not in range(128)")

    async def polls(n: int) -> None:
        end = src.calls + n
        while src.calls < end:  # the test's timeout catches a dead poll thread
            await asyncio.sleep(0.02)

    src = Faulty([_state("n0", _real_snapshot(RECS[0], capsys))])
    app = ClusterApp(src, interval=0.05)
    async with app.run_test(size=(120, 30)):
        await polls(2)
        app.paint()
        head = app.query_one("#header", TextPanel).text.plain
        assert head.startswith("memtop cluster: 1 node, 1 GPU, every 0.05 s"), head
        assert "polling failed: UnicodeEncodeError: 'ascii' codec can't encode" in head, head
        src.failing = False
        await polls(2)
        app.paint()
        head = app.query_one("#header", TextPanel).text.plain
        assert "polling failed" not in head and head.startswith("memtop cluster:"), head


@contextlib.contextmanager
def _mute_node():
    """A cluster view of one node whose listener completes connections in its backlog and never
    answers (a poll stays in flight), at an interval no round ends in: (node, poller, app)."""
    import socket

    from memtop.tui.cluster import ClusterApp

    from memtop.fleet.sources import HttpPoller

    with socket.create_server(("127.0.0.1", 0)) as mute:
        node = NodeState(f"127.0.0.1:{mute.getsockname()[1]}")
        src = HttpPoller([node], 0, timeout=60)
        yield node, src, ClusterApp(src, interval=60.0)


async def test_a_paint_tick_among_a_rounds_answers_is_skipped_once():
    """While a round's polls are in flight, the paint timer's tick within one paint period of the
    round's start paints nothing (the round is painted once, whole); a later tick paints what came
    in, whether or not the round has ended. The round's start is set by the test: no pace."""
    with _mute_node() as (node, src, app):
        async with app.run_test(size=(120, 30)) as pilot:
            assert await until(pilot, lambda: src.in_flight() == 1)
            node.bad("a change the next paint shows")
            painted, app._round_at = app._painted, time.monotonic()
            app._tick()
            assert app._painted is painted and src.in_flight() == 1  # held
            app._round_at -= 1 / app.paint_rate
            app._tick()
            assert app._painted != painted  # a period on: painted, the round still in flight
            assert src.in_flight() == 1
            node.bad("and another")
            app.paint()  # (a resize's paint is never held)
            assert app._painted[-1] == (node.version,)


async def test_a_node_that_never_answers_never_holds_two_ticks_in_a_row():
    """--interval at most the paint period: every tick falls within a period of a round's start,
    and a node that never answers keeps a poll in flight. The view still paints every other tick
    (a held tick is followed by a painted one), so a change is shown."""
    with _mute_node() as (node, src, app):
        async with app.run_test(size=(120, 30)) as pilot:
            assert await until(pilot, lambda: src.in_flight() == 1)
            painted = []
            for i in range(6):
                node.bad(f"change {i}")
                app._round_at = time.monotonic()  # a round began just now, as at every tick
                before = app._painted
                app._tick()
                painted.append(app._painted != before)
            assert src.in_flight() == 1
            assert painted == [False, True] * 3


async def test_a_stale_reason_cut_in_its_row_is_whole_in_the_detail_pane():
    from memtop.tui.cluster import BandTable, ClusterApp
    from memtop.tui.tiles import TextPanel

    why = "bad snapshot: gpus[0].index is not 0-1023"
    bad = NodeState("127.0.0.1:19867")
    bad.bad(why)
    app = ClusterApp(_Nodes([bad]), interval=2.0)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(BandTable)
        assert await until(pilot, lambda: len(table._lines) == 2)  # the first paint: header, one row
        (row,) = [strip.text.rstrip() for strip in table._lines][1:]
        assert why not in row and "no data: bad snapshot: gpus" in row, row  # cut at 80 columns
        assert why in app.query_one("#detail", TextPanel).text.plain


async def test_rows_off_screen_show_their_newest_poll_when_scrolled_to(capsys):
    """A paint redoes only the rows whose node polled since the last one: a row off screen, changed
    by its node's poll, shows the new content once the cursor scrolls to it (PgDn, arrows, End)."""
    from memtop.tui.cluster import BandTable, ClusterApp

    base = _real_snapshot(RECS[0], capsys)
    nodes = [_state(f"n{i:02d}", base) for i in range(60)]
    app = ClusterApp(_Nodes(nodes), interval=2.0)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(BandTable)
        await _after_a_poll(pilot, table)
        assert "n59" not in "".join(strip.text for strip in table._lines)  # off screen
        for target, job in (("n59", "4242"), ("n30", "3131")):
            snap = json.loads(json.dumps(base))
            snap["gpus"][0]["job"] = {"slurm_job_id": job}
            next(n for n in nodes if n.target == target).good(snap, 1)
        app.paint()
        table.focus()
        assert await until(pilot, lambda: table.has_focus)
        for key in ("pagedown", "pagedown", "pagedown", "down"):
            await pilot.press(key)
        assert await until(pilot, lambda: table.cursor_key == "n31/0"), table.cursor_key

        def shown(row: str, job: str) -> bool:
            return any(s.text.startswith(row) and job in s.text for s in table._lines)

        assert await until(pilot, lambda: shown("n30 ", "3131")), [s.text for s in table._lines]
        await pilot.press("end")
        assert await until(pilot, lambda: table.cursor_key == "n59/0"), table.cursor_key
        assert await until(pilot, lambda: table._lines[-1].text.startswith("n59 "))
        last = table._lines[-1].text
        assert "4242" in last, last
        await pilot.press("home")
        assert await until(pilot, lambda: table.cursor_key == "n00/0"), table.cursor_key


async def test_a_column_keeps_its_width_until_the_screen_changes(capsys):
    """A column narrows only with the screen: a job id that goes away leaves the job column (and the
    table's tiles) as they were, so a paint lays nothing out; a resize fits the columns again."""
    from memtop.tui.cluster import BandTable, ClusterApp

    base = _real_snapshot(RECS[0], capsys)
    with_job = json.loads(json.dumps(base))
    with_job["gpus"][0]["job"] = {"slurm_job_id": "4242424242"}
    nodes = [_state(f"n{i}", with_job) for i in range(3)]
    app = ClusterApp(_Nodes(nodes), interval=2.0)
    async with app.run_test(size=(120, 24)) as pilot:
        table = app.query_one(BandTable)
        await _after_a_poll(pilot, table)
        wide, plan = dict(table.columns)["job"], list(table._plan)
        assert wide == 10, table.columns
        for n in nodes:
            n.good(json.loads(json.dumps(base)), 1)  # no job id: the job column's content is empty
        app.paint()
        await pilot.pause()
        assert dict(table.columns)["job"] == wide and table._plan == plan
        assert not any("4242" in strip.text for strip in table._lines)
        await pilot.resize_terminal(110, 24)
        await pilot.pause()
        app.paint()  # (the paint timer's next tick would)
        await pilot.pause()
        assert dict(table.columns)["job"] == len("job")


def test_malformed_snapshots_do_not_break_the_view(capsys):
    """A node may answer anything: wrong types stay out of the rows; a GPU that is not an object or
    whose index is not a small integer refuses the node, with the reason."""
    weird = {"gpus": [{"index": 0, "band": ["C"], "phase": None, "shares": [1], "verdict": "x", "job": 3}]}
    n = NodeState("weird")
    n.good(weird, 1)
    (r,) = rows([n], 2.0)
    assert r.gpu["band"] == "" and r.gpu["shares"] == {} and r.gpu["job"] == {} and r.gpu["verdict"] is None
    assert r.gpu["phase"] == "other"
    print_text([n], 2.0)
    assert "weird" in capsys.readouterr().out
    for gpus, why in [
        ([7], "gpus[0] is not an object"),
        ([{"index": "0"}], "gpus[0].index is not 0-1023"),
        ([{"index": 10**300}], "gpus[0].index is not 0-1023"),
        ([{"index": True}], "gpus[0].index is not 0-1023"),
        ([{"index": {"a": 1}}], "gpus[0].index is not 0-1023"),
        ([{"index": 1}, {"index": 1}], "a GPU index appears twice"),
    ]:
        n = NodeState("weird")
        n.good({"gpus": gpus}, 1)
        assert n.snapshot is None and why in (n.error or ""), (gpus, n.error)
        (r,) = rows([n], 2.0)
        assert r.stale and why in r.stale


def test_hostile_http_nodes_get_a_reason():
    """A loopback server playing hostile nodes: deep nesting, an oversized body, a 401, garbage."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from memtop.fleet.sources import HttpPoller
    from memtop.fleet.wire import MAX_SNAPSHOT as MAX_BODY

    answers = {
        "/deep": (200, b"[" * 100_000 + b"]" * 100_000),
        "/big": (200, b" " * (MAX_BODY + 10)),
        "/auth": (401, b"no"),
        "/junk": (200, b"\x1b]0;pwned\x07"),
    }

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            code, body = answers[self.server.route]
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    got = {}
    for route in answers:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.route = route
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            n = NodeState(f"127.0.0.1:{srv.server_address[1]}")
            p = HttpPoller([n], 0, timeout=5)
            p.poll_one(n)
            p.close()
            got[route] = (n.error, n.snapshot)
        finally:
            srv.shutdown()
            srv.server_close()
    assert got == {
        "/deep": ("bad response: over 20000 JSON objects", None),
        "/big": ("bad response: over 1 MiB", None),
        "/auth": ("auth", None),
        "/junk": ("bad response: not JSON", None),
    }


@pytest.fixture(scope="module")
def demo_nodes():
    """Three `memtop serve --demo` nodes on one machine (same hostname, same GPU uuid) and a dead port."""
    ports = free_ports(4)
    dead = ports.pop()
    procs = [memtop("serve", "--demo", "--port", str(p), stderr=subprocess.DEVNULL) for p in ports]
    try:
        for p, port in zip(procs, ports):
            wait_ready(port, proc=p, timeout=60)
        yield ports, dead
    finally:
        stop(*procs)


@pytest.mark.slow
def test_three_demo_nodes_on_one_machine_are_three_nodes(demo_nodes):
    ports, _ = demo_nodes
    rc, out = _cluster("--hosts", ",".join(f"127.0.0.1:{p}" for p in ports))
    assert rc == 0 and [n["target"] for n in out["nodes"]] == [f"127.0.0.1:{p}" for p in ports]
    for n in out["nodes"]:
        jsonschema.validate(n["snapshot"], SCHEMA)
        (g,) = n["snapshot"]["gpus"]
        assert abs(sum(g["shares"].values()) - 1) < 1e-3, g["shares"]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="prometheus not installed (Debian: prometheus)"
)
def test_a_real_prometheus_over_three_demo_nodes_shows_three_nodes(demo_nodes, tmp_path):
    """Every demo node exports hostname="vm" and the recording's uuid: keyed by hostname they were
    one node with shares summing to 2.76. Keyed by the scrape instance: three, each summing to 1."""
    ports, _ = demo_nodes
    (prom_port,) = free_ports(1)
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: memtop\n    static_configs: [{{targets: [{targets}]}}]\n"
    )
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        end = time.monotonic() + 60
        while True:  # until every node has a rate (two scrapes) and a band step
            rc, out = _cluster("--prom", f"http://127.0.0.1:{prom_port}")
            nodes = out.get("nodes", [])
            if len(nodes) == 3 and all(n["snapshot"]["gpus"][0]["shares"] for n in nodes):
                break
            assert time.monotonic() < end, out
            time.sleep(1)
    finally:
        stop(prom)
    assert sorted(n["target"] for n in nodes) == sorted(f"127.0.0.1:{p}" for p in ports)
    for n in nodes:
        jsonschema.validate(n["snapshot"], SCHEMA)
        (g,) = n["snapshot"]["gpus"]
        assert n["snapshot"]["hostname"] and abs(sum(g["shares"].values()) - 1) < 1e-3, g["shares"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_the_real_cli_paints_and_quits_at_every_size(demo_nodes, tmp_path):
    """`memtop cluster --hosts` with no other flag, an empty HOME and no config: it paints at 80x24,
    120x40 and 200x50 (NO_COLOR, --ascii), the verdict and the stale reason uncut, the detail pane
    right under the rows, and q exits 0."""
    from test_tmux_matrix import VARIANTS, Tmux, _quit, _until

    ports, dead = demo_nodes
    home = tmp_path / "home"
    home.mkdir()
    tmux = Tmux(tmp_path)
    hosts = ",".join(f"127.0.0.1:{p}" for p in [*ports, dead])
    runs = {"s80": ((80, 24), "ascii"), "s120": ((120, 40), "NO_COLOR"), "s200": ((200, 50), "ascii")}
    try:
        for name, (size, variant) in runs.items():
            env, extra = VARIANTS[variant]
            tmux.start(name, ["cluster", "--hosts", hosts, *extra], size, {**env, "HOME": str(home)})
        for name, (_, variant) in runs.items():
            # every node answered or refused (one at a time on a loaded machine: the first row is not all)
            pane = _until(tmux, name, lambda p: _all_rows(p) or "EXIT=" in p or "Traceback" in p)
            lines = pane.splitlines()
            assert "Traceback" not in pane and "EXIT=" not in pane, pane
            assert "no data: refused" in pane, pane  # the stale reason whole
            assert sum("last 60 s: " in ln for ln in lines) >= 3, pane  # every live row names its verdict
            rows_end = max(i for i, ln in enumerate(lines) if f":{dead}" in ln)
            detail = next(i for i, ln in enumerate(lines) if "now:" in ln)
            assert detail <= rows_end + 2, pane  # no empty rows between the table and the detail
            if variant == "ascii":
                assert pane.isascii(), pane
            # a gauge's value never ends a line with its unit on the next (Rich wrapped at any space)
            split = [
                a for a, b in zip(lines, lines[1:]) if re.search(r"\d$", a) and re.match(r"\s+[%A-Z°]", b)
            ]
            assert not split, pane
        # Escape and q read as one key (Alt+q, as a busy app reads them) close the node's screen
        tmux.keys("s80", "Enter")
        tmux.wait("s80", "(demo), memtop ", timeout=60)  # the node screen: "HOST (demo), memtop VERSION"
        tmux("send-keys", "-t", "s80", "-l", "\x1bq")
        pane = _until(tmux, "s80", lambda p: "(demo), memtop " not in p, 60)
        assert "(demo), memtop " not in pane and "phase band" in pane, pane
        for name in runs:
            _quit(tmux, name)
    finally:
        tmux("kill-server")
    # the config file's choices, as the local TUI reads them: ascii and paint_rate taken, a theme
    # that does not exist said once and ignored (the view still starts)
    conf = Tmux(tmp_path / "configured")
    (tmp_path / "configured" / "config" / "memtop").mkdir(parents=True)
    (tmp_path / "configured" / "config" / "memtop" / "config.toml").write_text(
        'ascii = true\npaint_rate = 2.0\ntheme = "no-such-theme"\n'
    )
    try:
        conf.start(
            "cfg", ["cluster", "--hosts", hosts], (120, 40), {"TERM": "xterm-256color", "HOME": str(home)}
        )
        pane = conf.wait("cfg", "last 60 s:", timeout=60)
        assert pane.isascii() and "Traceback" not in pane, pane
        _quit(conf, "cfg")
        assert "memtop: ignoring the theme in" in conf.pane("cfg")  # said before the view, seen after
    finally:
        conf("kill-server")


def _all_rows(pane: str) -> bool:
    """The cluster view's three demo nodes named with their verdict, and the dead one's reason."""
    return "no data: refused" in pane and sum("last 60 s: " in ln for ln in pane.splitlines()) >= 3


class _OldNode:
    """A loopback `memtop serve` of before the compact form: 404 for /compact.json (after `first`,
    when given, answered once), `body` for /snapshot.json; the paths asked, in order."""

    def __init__(self, body: bytes, first: bytes | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        asked = self.asked = []

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                asked.append(self.path)
                code, out = (200, body) if self.path == "/snapshot.json" else (404, b"not found\n")
                if first is not None and asked == ["/compact.json"]:
                    code, out = 200, first
                self.send_response(code)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.target = f"127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def _get(port: int, path: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read()


def _frame(snap: dict) -> tuple:
    return snap.get("time"), [g.get("band") for g in snap.get("gpus", [])]


@pytest.mark.slow
def test_the_table_polls_the_compact_form_and_an_old_node_its_snapshot(demo_nodes):
    """A real `serve --demo` answers /compact.json with the table's fields only, and the poller of
    the table takes it; a node answering 404 for it is polled for /snapshot.json from then on; the
    node in focus is polled for its full snapshot."""
    from memtop.fleet import wire
    from memtop.fleet.sources import HttpPoller

    ports, _ = demo_nodes
    # the compact answer of one frame: asked between two full ones that are alike (the demo moves on
    # between two GETs on a loaded machine, its band too within one "time": compared, they differed)
    for _ in range(50):
        full, small, after = (
            _get(ports[0], path) for path in ("/snapshot.json", "/compact.json", "/snapshot.json")
        )
        raw = json.loads(small)
        if _frame(json.loads(full)) == _frame(json.loads(after)):
            break
    assert wire.is_compact(raw) and not wire.is_compact(json.loads(full)) and len(small) < len(full) / 2
    assert "processes" not in raw and set(raw["gpus"][0]["gauges"]) <= {"sm", "util"}
    assert wire.snapshot(raw)["gpus"][0]["band"] == json.loads(full)["gpus"][0]["band"][-wire.COMPACT_BAND :]
    old = _OldNode(full)
    try:
        nodes = [NodeState(f"127.0.0.1:{p}") for p in ports] + [NodeState(old.target)]
        poller = HttpPoller(nodes, 0, timeout=30, compact=True)
        poller.poll_all()
        poller.poll_all()
        assert [(n.error, n.polls, n.compact) for n in nodes] == [(None, 2, True)] * 3 + [(None, 2, False)]
        assert old.asked == ["/compact.json", "/snapshot.json", "/snapshot.json"]  # asked once, then not
        assert nodes[3].snapshot["processes"] == wire.snapshot(json.loads(full))["processes"]
        poller.want_full(nodes[1].target)
        poller.poll_all()
        assert [n.compact for n in nodes] == [True, False, True, False]
        assert nodes[1].snapshot["memtop_version"] and len(nodes[1].snapshot["gpus"][0]["gauges"]) > 2
        poller.close(wait=True)
    finally:
        old.close()
    rs = rows(nodes, 2.0)
    assert [r.target for r in rs] == [n.target for n in nodes] and not any(r.stale for r in rs)


def test_a_node_that_stops_answering_the_compact_form_on_a_kept_connection(capsys):
    """The second poll goes over the kept-alive connection (the loop's): its 404 sends the node to a
    worker for /snapshot.json, and the round ends only once that answer is in."""
    from memtop.fleet import wire
    from memtop.fleet.sources import HttpPoller

    snap = _real_snapshot(RECS[0], capsys)
    old = _OldNode(json.dumps(snap).encode(), first=json.dumps(wire.compact(snap)).encode())
    try:
        node = NodeState(old.target)
        poller = HttpPoller([node], 0, timeout=30, compact=True)
        poller.poll_all()
        assert (node.error, node.polls, node.compact) == (None, 1, True)
        poller.poll_all()
        assert (node.error, node.polls, node.compact) == (None, 2, False)
        assert node.snapshot["processes"] == wire.snapshot(snap)["processes"]
        poller.close(wait=True)
    finally:
        old.close()
    assert old.asked == ["/compact.json", "/compact.json", "/snapshot.json"]


async def test_the_node_screen_shows_the_full_snapshot_of_a_compact_node(demo_nodes):
    """The cluster view over real demo nodes (compact) and an old one: every node has its row; Enter
    on a compact node's row opens its screen, which shows the full snapshot once it is fetched."""
    from memtop.tui.cluster import FETCHING, BandTable, ClusterApp, NodeScreen
    from memtop.tui.tiles import TextPanel

    from memtop.fleet.sources import HttpPoller

    ports, _ = demo_nodes
    old = _OldNode(_get(ports[0], "/snapshot.json"))
    nodes = [NodeState(f"127.0.0.1:{p}") for p in ports] + [NodeState(old.target)]
    app = ClusterApp(HttpPoller(nodes, 0, timeout=30, compact=True), interval=2.0)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            table = app.query_one(BandTable)
            end = time.monotonic() + 60
            while len(table._lines) < 5 or any("no " in line.text for line in table._lines[1:]):
                assert time.monotonic() < end, [line.text for line in table._lines]
                await pilot.pause(0.1)
            assert table.keys == [f"{n.target}/0" for n in nodes]  # the old node's row too
            assert nodes[2].compact and not nodes[3].compact
            table.focus()
            table.move_cursor(2)
            await pilot.press("enter")
            assert await until(pilot, lambda: isinstance(app.screen, NodeScreen))
            panel = app.screen.query_one(TextPanel)
            while FETCHING.strip() in panel.text.plain or "processes" not in panel.text.plain:
                assert time.monotonic() < end, panel.text.plain
                await pilot.pause(0.1)
            assert (
                not nodes[2].compact and f"memtop {nodes[2].snapshot['memtop_version']}" in panel.text.plain
            )
    finally:
        old.close()


def test_gauges_break_between_items_never_inside_one():
    """The detail's gauges and shares: lines of at most the width, each gauge whole on one line
    (Rich's wrap broke at any space: "NVLink RX 0.0" ended a line and "MB/s" began the next)."""
    from memtop.tui.cluster import packed

    from memtop.core.metrics import METRICS, fmt

    items = [f"{m.title} {fmt(m, 0.0)}" for m in METRICS]
    for width in (30, 61, 80, 200):
        lines = packed("gauges:", items, width).splitlines()
        assert all(len(ln) <= width for ln in lines), (width, lines)
        assert lines[0].startswith("gauges: ") and all(ln.startswith("  ") for ln in lines[1:])
        got = [p.strip() for ln in lines for p in ln.removeprefix("gauges:").split(",") if p.strip()]
        assert got == items, (width, lines)


def test_shares_are_kept_when_they_sum_to_one_and_normalised_when_not():
    """A node's own shares (rounded, summing to one within that) are kept as sent; others are
    normalised; NaN, infinities, negatives, non-numbers and unknown phases are dropped."""
    from memtop.fleet.wire import shares

    own = {"compute": 0.3333, "sync": 0.3333, "idle": 0.3333}
    assert shares(own) == own
    assert shares({"compute": 3.0, "sync": 1}) == {"compute": 0.75, "sync": 0.25}
    bad = {"compute": 1.0, "sync": float("nan"), "idle": float("inf"), "cpu": -1.0, "x": 1.0, "memory": "1"}
    assert shares(bad) == {"compute": 1.0}
