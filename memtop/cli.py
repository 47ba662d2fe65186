"""Command line. Imports stay lazy: `--help` and `--version` never load textual or NVML."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys

from memtop import __version__
from memtop.errors import UserError
from memtop.sanitize import clean


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
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
OFFSET = _ranged(0, 366 * 86400, " s")


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pid",
        type=_index,
        nargs="+",
        default=[],
        metavar="PID",
        help="watch these processes (default: the Python processes using a GPU)",
    )
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=0.1,
        metavar="S",
        help="GPU sampling interval in seconds, 0.01-60 (default 0.1: GPM at 10 Hz)",
    )
    p.add_argument(
        "--stack-interval",
        type=STACK_INTERVAL,
        default=0.5,
        metavar="S",
        help="seconds between py-spy dumps of each training process, 0.05-60 (default 0.5)",
    )
    p.add_argument("--no-stacks", action="store_true", help="do not sample Python stacks with py-spy")
    p.add_argument("--no-gpm", action="store_true", help="NVML-only mode even where GPM is supported")
    p.add_argument("--no-perf", action="store_true", help="do not open perf counters")


def _add_display(p: argparse.ArgumentParser, default: object = None) -> None:
    """TUI options; on `replay` they may also follow the subcommand (SUPPRESS keeps the top-level value)."""

    def d(value: object) -> object:
        return value if default is None else default

    p.add_argument(
        "--paint-rate",
        type=PAINT_RATE,
        default=d(1.0),
        metavar="HZ",
        help="UI repaints per second, 0.1-30 (default 1)",
    )
    p.add_argument(
        "--no-mouse", action="store_true", default=d(False), help="no mouse tracking (kinder over SSH)"
    )
    p.add_argument(
        "--ascii", action="store_true", default=d(False), help="ASCII only: no Unicode block characters"
    )
    p.add_argument("--theme", default=d(None), help="Textual theme (default: the terminal's own palette)")


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
    _add_sampling(p)
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
    _add_display(rp, default=argparse.SUPPRESS)

    rep = sub.add_parser("report", help="triage report of a recording")
    rep.add_argument("file", metavar="RUN.memtop")
    rep.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    rep.add_argument("--gpu", type=_index, metavar="N", help="only this GPU")
    rep.add_argument("--from", dest="t_from", type=OFFSET, metavar="T", help="seconds from the start")
    rep.add_argument("--to", dest="t_to", type=OFFSET, metavar="T", help="seconds from the start")

    ex = sub.add_parser("export", help="export a recording for the Perfetto UI")
    ex.add_argument("file", metavar="RUN.memtop")
    ex.add_argument("--perfetto", required=True, metavar="OUT.json")
    ex.add_argument("--force", action="store_true", help="overwrite OUT.json")

    d = sub.add_parser("doctor", help="what this machine can give, and the fix for each 'no'")
    d.add_argument("--json", action="store_true")
    return p


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


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "record":
        from memtop.record import record

        return record(args)
    if args.command == "doctor":
        from memtop.doctor import doctor

        return doctor(as_json=args.json)
    if args.command == "replay":
        from memtop.commands import replay

        return replay(args)
    if args.command == "report":
        from memtop.commands import report

        return report(args)
    if args.command == "export":
        from memtop.commands import export

        return export(args)
    from memtop.commands import live

    return live(args)


if __name__ == "__main__":
    sys.exit(main())
