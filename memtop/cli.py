"""Command line. Imports stay lazy: `--help` and `--version` never load textual or NVML."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from typing import NoReturn

from memtop import __version__
from memtop.core.errors import UserError
from memtop.core.sanitize import clean


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        print(f"memtop: {clean(message, 500)} (see memtop --help)", file=sys.stderr)
        sys.exit(2)


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {clean(text, 40)!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"not a finite number: {clean(text, 40)!r}")
    return v


def _ranged(lo: float, hi: float, unit: str, shown: str = ""):
    """A float flag inside [lo, hi] (documented in its help): nan, inf and absurd values are refused."""

    def parse(text: str) -> float:
        v = _number(text)
        if not lo <= v <= hi:
            span = shown or f"{lo:g} and {hi:g}"
            raise argparse.ArgumentTypeError(f"must be between {span}{unit}: {clean(text, 40)!r}")
        return v

    parse.__name__ = "number"  # argparse names the type in its message: "invalid number value"
    return parse


def _index(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {clean(text, 40)!r}") from None
    if not 0 <= v <= 1 << 22:  # /proc's pid_max limit; GPU indices are far below it
        raise argparse.ArgumentTypeError(f"out of range: {clean(text, 40)!r}")
    return v


_index.__name__ = "integer"

# The documented ranges of the numeric flags (README, --help).
INTERVAL = _ranged(0.01, 60, " s")
STACK_INTERVAL = _ranged(0.05, 60, " s")
PAINT_RATE = _ranged(0.1, 30, " Hz")
SPEED = _ranged(1 / 64, 64, "x", "1/64 and 64")
DURATION = _ranged(0.1, 366 * 86400, " s")


def _offset(text: str) -> float:
    """A position in a recording as replay's go-to key takes it: 1:02:03, 62m, 90s, 3723 (or 3.7e3)."""
    from memtop.core.timefmt import parse_clock

    try:
        v = float(text)
    except ValueError:
        try:
            v = parse_clock(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a time: {clean(text, 40)!r} (try 1:02:03, 62m, 90s or 3723)"
            ) from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"not a finite time: {clean(text, 40)!r}")
    if not 0 <= v <= 366 * 86400:
        raise argparse.ArgumentTypeError(f"must be between 0 s and 366 days: {clean(text, 40)!r}")
    return v


_offset.__name__ = "time"
OFFSET = _offset
_AT = "from the start: 1:02:03, 62m, 90s or seconds"
TIMEOUT = _ranged(0.1, 300, " s")
SECONDS = _ranged(0.1, 120, " s")


def _steps(text: str) -> int:
    v = _index(text)
    if not 1 <= v <= 10_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 10000: {clean(text, 40)!r}")
    return v


_steps.__name__ = "integer"
STEPS = _steps


def _add_sampling(p: argparse.ArgumentParser, intervals: bool = True, live: bool = False) -> None:
    """The sampler's options; ``intervals`` False: its intervals stay the defaults (`snapshot`, whose
    --interval is its own); ``live``: the live view's, whose GPU interval is left None for the sampler
    to choose (memtop.live.sampler.LIVE_GPU_S, or RECORD_GPU_S with --record)."""
    p.add_argument(
        "--pid",
        type=_index,
        nargs="+",
        default=[],
        metavar="PID",
        help="watch these processes (default: the Python processes using a GPU)",
    )
    p.set_defaults(interval=None if live else 0.1, stack_interval=0.5)
    if intervals:
        p.add_argument(
            "--interval",
            type=INTERVAL,
            metavar="S",
            help="GPU sampling interval in seconds, 0.01-60 (default "
            + ("0.2: GPM at 5 Hz; with --record 0.1)" if live else "0.1: GPM at 10 Hz)"),
        )
        p.add_argument(
            "--stack-interval",
            type=STACK_INTERVAL,
            metavar="S",
            help="seconds between py-spy dumps of each training process, 0.05-60 (default 0.5)",
        )
    p.add_argument("--no-stacks", action="store_true", help="do not sample Python stacks with py-spy")
    p.add_argument(
        "--native",
        action="store_true",
        help="also take sparse automatic `py-spy --native` dumps (a sync told by its native leaf; at most one"
        " per 30 s, only in an unexplained native wait; each pauses the process 0.06-0.85 s)",
    )
    p.add_argument("--no-gpm", action="store_true", help="NVML-only mode even where GPM is supported")
    p.add_argument("--no-perf", action="store_true", help="do not open perf counters")


def _labels(text: str) -> frozenset[str]:
    """--trace-on's LABEL[,LABEL...]: the verdict's phase labels, and straggler."""
    from memtop.analysis.phases import LABELS

    known = (*LABELS, "straggler")
    got = frozenset(x.strip() for x in text.split(",") if x.strip())
    bad = sorted(got - set(known))
    if bad or not got:
        raise argparse.ArgumentTypeError(
            f"unknown label {clean(', '.join(bad) or text, 80)!r} (labels: {', '.join(known)})"
        )
    return got


_labels.__name__ = "labels"
TRACE_EVERY = _ranged(30, 366 * 86400, " s", "30 s and a year")


def _add_tracing(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """The live view's captures (the `x` key, --trace-on) of jobs started with `memtop run`."""
    added = [
        p.add_argument(
            "--trace-on",
            type=_labels,
            metavar="LABEL[,...]",
            help="capture a trace when a GPU's verdict turns to one of these labels (sync, input, cpu, comm,"
            " memory, transfer, idle, compute, other, straggler): its processes and their job's ranks, if"
            " started with `memtop run`",
        ),
        p.add_argument(
            "--trace-every",
            type=TRACE_EVERY,
            metavar="S",
            help="--trace-on captures a process at most once per S seconds, 30 s to a year (default 300)",
        ),
        p.add_argument(
            "--trace-seconds",
            type=SECONDS,
            metavar="N",
            help="window of a capture from the live view (`x`, --trace-on), 0.1-120 s (default 3)",
        ),
        p.add_argument(
            "--trace-dir",
            metavar="DIR",
            help="where the live view's captures are written (default: the current directory)",
        ),
    ]
    _keep_top_level(added, suppress)


def _add_display(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """TUI options; on `replay` they may also follow the subcommand (``suppress``: _keep_top_level)."""
    added = [
        p.add_argument(
            "--paint-rate",
            type=PAINT_RATE,
            metavar="HZ",
            help="UI repaints per second, 0.1-30 (default 1, or paint_rate in the config file)",
        ),
        p.add_argument(
            "--no-mouse",
            action="store_true",
            help="no mouse tracking (kinder over SSH; config: mouse = false)",
        ),
        p.add_argument(
            "--ascii",
            action="store_true",
            help="ASCII only: no Unicode block characters (config: ascii = true)",
        ),
        p.add_argument(
            "--theme", help="Textual theme (default: the terminal's own palette, or the one last chosen)"
        ),
        p.add_argument("--no-color", action="store_true", help="no colour (as NO_COLOR=1)"),
    ]
    _keep_top_level(added, suppress)


def _keep_top_level(actions: list[argparse.Action], suppress: bool) -> None:
    """A subcommand's copy of a top-level option defaults to SUPPRESS there (``suppress``): given before
    the subcommand, the option keeps that value."""
    if suppress:
        for a in actions:
            a.default = argparse.SUPPRESS


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="memtop",
        description="Live triage monitor for GPU training nodes: is the GPU busy, "
        "and if not, what is it waiting for?",
    )
    p.add_argument("--version", action="version", version=f"memtop {__version__}")
    p.add_argument("--demo", action="store_true", help="replay a real H100 recording shipped with memtop")
    p.add_argument("--record", metavar="FILE", help="record what the live view shows")
    p.add_argument("--force", action="store_true", help="overwrite the --record file")
    _add_display(p)
    _add_sampling(p, live=True)
    _add_tracing(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("record", help="record headless to a file")
    r.add_argument("-o", "--output", required=True, metavar="RUN.memtop")
    r.add_argument(
        "--duration", type=DURATION, metavar="S", help="stop after S seconds, up to a year (default: Ctrl-C)"
    )
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.add_argument(
        "--markers", metavar="FILE", help="attach ground-truth phase markers (JSON lines) at the end"
    )
    _add_sampling(r)

    rp = sub.add_parser("replay", help="open a recording in the TUI")
    rp.add_argument("file", metavar="RUN.memtop")
    rp.add_argument("--summary", action="store_true", help="print what the file holds instead")
    rp.add_argument("--speed", type=SPEED, default=1.0, help="replay speed, 1/64-64 (default 1)")
    rp.add_argument("--at", type=OFFSET, default=0.0, metavar="T", help=f"start there ({_AT})")
    _add_display(rp, suppress=True)

    rep = sub.add_parser("report", help="triage report of a recording")
    rep.add_argument("file", metavar="RUN.memtop")
    rep.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    rep.add_argument("--gpu", type=_index, metavar="N", help="only this GPU")
    rep.add_argument("--from", dest="t_from", type=OFFSET, metavar="T", help=_AT)
    rep.add_argument("--to", dest="t_to", type=OFFSET, metavar="T", help=_AT)

    ex = sub.add_parser("export", help="export a recording for the Perfetto UI")
    ex.add_argument("file", metavar="RUN.memtop")
    ex.add_argument(
        "--perfetto",
        required=True,
        metavar="OUT",
        help="the trace file: Perfetto's protobuf, or its JSON if OUT ends in .json[.gz] "
        "(gzip-compressed if it ends in .gz)",
    )
    ex.add_argument(
        "--format",
        choices=("proto", "json"),
        help="the trace's format whatever OUT's name (default: from the name; protobuf unless .json)",
    )
    ex.add_argument("--force", action="store_true", help="replace OUT (a link is replaced, not followed)")
    ex.add_argument("--gpu", type=_index, metavar="N", help="only this GPU (and the processes on it)")
    ex.add_argument("--from", dest="t_from", type=OFFSET, metavar="T", help=_AT)
    ex.add_argument("--to", dest="t_to", type=OFFSET, metavar="T", help=_AT)

    d = sub.add_parser("doctor", help="what this machine can give, and the fix for each 'no'")
    d.add_argument("--json", action="store_true")
    _add_cluster_commands(sub)
    _add_trace_commands(sub)
    return p


def _add_trace_commands(sub) -> None:
    """run / trace: a job with memtop's in-job agent, and its framework's trace (docs/TRACE.md)."""
    ru = sub.add_parser(
        "run", help="start a job with memtop's in-job agent (for `memtop trace`) and watch it"
    )
    ru.add_argument("--no-tui", action="store_true", help="headless: the job keeps the terminal")
    ru.add_argument("--record", metavar="FILE", help="record the job while it runs")
    ru.add_argument("--force", action="store_true", help="overwrite the --record file")
    ru.add_argument(
        "--log",
        default="memtop-run.log",
        metavar="FILE",
        help="with the TUI: the job's stdout and stderr are appended here (default memtop-run.log)",
    )
    _add_sampling(ru)
    _add_display(ru, suppress=True)
    _add_tracing(ru, suppress=True)
    ru.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the job")

    tr = sub.add_parser("trace", help="the framework's trace of a `memtop run` job, with memtop's tracks")
    who = tr.add_mutually_exclusive_group(required=True)
    who.add_argument("pid", nargs="?", type=_index, metavar="PID", help="one process of the job")
    who.add_argument("--job", type=_index, metavar="PID", help="every process under PID (`memtop run`'s)")
    tr.add_argument("--seconds", type=SECONDS, default=5.0, metavar="N", help="window, 0.1-120 s (default 5)")
    tr.add_argument(
        "--steps", type=STEPS, metavar="N", help="stop after N optimizer steps (--seconds at most)"
    )
    tr.add_argument(
        "-o", "--output", metavar="OUT.json.gz", help="the merged trace (default: a new file here)"
    )
    tr.add_argument("--force", action="store_true", help="replace OUT (a link is replaced, not followed)")
    tr.add_argument(
        "--cpu-ops",
        action="store_true",
        help="also the job's CPU ops (about half of a busy loop's events: a longer stop and merge)",
    )
    tr.add_argument(
        "--python", action="store_true", help="also CPU ops and Python frames (slows the job in the window)"
    )
    tr.add_argument("--no-stacks", action="store_true", help="no py-spy stacks in memtop's part")


def _add_source(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--demo", action="store_true", help="replay the H100 recording shipped with memtop")
    src.add_argument("--replay", metavar="FILE", help="replay a recording (in a loop) instead of sampling")


def _add_cluster_commands(sub) -> None:
    """snapshot / serve / cluster: one node's pipeline for scripts and Prometheus, and many nodes."""
    from memtop.commands import DEFAULT_PORT  # (not from serve: the live view never loads the server)

    sn = sub.add_parser("snapshot", help="what memtop knows now, once or as a stream (JSON lines)")
    sn.add_argument("--json", action="store_true", help="JSON (docs/snapshot.schema.json) instead of text")
    sn.add_argument(
        "--interval",
        dest="snap_interval",
        type=INTERVAL,
        metavar="S",
        help="seconds between snapshots; alone it streams until stopped (default: one after 5 s)",
    )
    sn.add_argument("--count", type=int, metavar="N", help="stop after N snapshots (0: never)")
    sn.add_argument(
        "--fail-on", metavar="PHASE:SHARE", help="exit 3 when a GPU's share of PHASE exceeds SHARE (sync:0.2)"
    )
    _add_sampling(sn, intervals=False)
    _add_source(sn)

    sv = sub.add_parser("serve", help="Prometheus exporter and /snapshot.json for this node")
    sv.add_argument(
        "--bind", default="127.0.0.1", metavar="ADDR", help="address to listen on (default loopback)"
    )
    sv.add_argument(
        "--port", type=int, default=DEFAULT_PORT, metavar="P", help=f"port (default {DEFAULT_PORT})"
    )
    sv.add_argument(
        "--textfile", metavar="DIR", help="write DIR/memtop.prom for node_exporter instead of listening"
    )
    sv.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    sv.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    sv.add_argument("--token-file", metavar="FILE", help="require this bearer token (the file must be 0600)")
    sv.add_argument(
        "--per-process",
        action="store_true",
        help="also serve each GPU process's SM and memory utilisation, labelled by pid (a series per "
        "process: see README)",
    )
    _add_source(sv)
    _add_sampling(sv)

    cl = sub.add_parser("cluster", help="one row per GPU across many nodes")
    hosts = cl.add_mutually_exclusive_group(required=True)
    hosts.add_argument("--hosts", metavar="A,B,...", help="nodes as host or host:port, comma-separated")
    hosts.add_argument("--hostfile", metavar="FILE", help="one node per line")
    hosts.add_argument(
        "--slurm", metavar="JOBID", help="the nodes of this Slurm job (scontrol show hostnames)"
    )
    hosts.add_argument("--prom", metavar="URL", help="read every node from this Prometheus server's HTTP API")
    cl.add_argument("--ssh", action="store_true", help="run `memtop snapshot` over ssh instead of HTTP")
    cl.add_argument("--ssh-config", metavar="FILE", help="with --ssh: this ssh config file (ssh -F)")
    cl.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P", help="serve port on each node")
    cl.add_argument(
        "--interval",
        type=INTERVAL,
        metavar="S",
        help="seconds between polls (default: 2 s, more for many nodes)",
    )
    cl.add_argument(
        "--timeout", type=TIMEOUT, default=3.0, metavar="S", help="deadline of each request (default 3)"
    )
    cl.add_argument("--token-file", metavar="FILE", help="bearer token for the nodes (0600)")
    cl.add_argument("--tls", action="store_true", help="poll https:// (system CA store)")
    cl.add_argument("--once", action="store_true", help="poll once and print, no TUI")
    cl.add_argument("--json", action="store_true", help="with --once: one merged snapshot as JSON")
    _add_display(cl, suppress=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except UserError as e:
        print(f"memtop: {clean(e, 1000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memtop report | head`: the reader left; nothing more to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # a bug: a log file and exit 70, never a traceback nor 0
        from memtop.crash import report_crash

        return report_crash(e)


# each command's module loads only when it runs: `--help` never imports textual, NVML or SQLite
COMMANDS: dict[str | None, tuple[str, str]] = {
    None: ("memtop.commands.local", "live"),
    "record": ("memtop.commands.record", "record"),
    "doctor": ("memtop.commands.doctor", "run"),
    "replay": ("memtop.commands.local", "replay"),
    "report": ("memtop.commands.local", "report"),
    "export": ("memtop.commands.local", "export"),
    "snapshot": ("memtop.commands.snapshot", "run_snapshot"),
    "serve": ("memtop.commands.serve", "serve"),
    "cluster": ("memtop.commands.cluster", "run_cluster"),
    "run": ("memtop.commands.run", "run_job"),
    "trace": ("memtop.commands.trace", "run_trace"),
}


def _dispatch(args: argparse.Namespace) -> int:
    import importlib

    module, func = COMMANDS[args.command]
    return getattr(importlib.import_module(module), func)(args)


if __name__ == "__main__":
    sys.exit(main())
