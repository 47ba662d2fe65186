"""Command line. Imports stay lazy: `--help` and `--version` never load textual or NVML."""

from __future__ import annotations

import argparse
import math
import sys

from memtop import __version__
from memtop.errors import UserError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"memtop: {message} (see memtop --help)", file=sys.stderr)
        sys.exit(2)


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return v


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    return v


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pid",
        type=int,
        nargs="+",
        default=[],
        metavar="PID",
        help="watch these processes (default: the Python processes using a GPU)",
    )
    p.add_argument(
        "--interval",
        type=_positive,
        default=0.1,
        metavar="S",
        help="GPU sampling interval in seconds (default 0.1: GPM at 10 Hz)",
    )
    p.add_argument(
        "--stack-interval",
        type=_positive,
        default=0.5,
        metavar="S",
        help="seconds between py-spy dumps of each training process (default 0.5)",
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
        type=_positive,
        default=d(1.0),
        metavar="HZ",
        help="UI repaints per second (default 1)",
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
    r.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    r.add_argument("--force", action="store_true", help="overwrite an existing file")
    r.add_argument(
        "--markers", metavar="FILE", help="attach ground-truth phase markers (JSON lines) at the end"
    )
    _add_sampling(r)

    rp = sub.add_parser("replay", help="open a recording in the TUI")
    rp.add_argument("file", metavar="RUN.memtop")
    rp.add_argument("--summary", action="store_true", help="print what the file holds instead")
    rp.add_argument("--speed", type=_positive, default=1.0, help="replay speed (default 1)")
    _add_display(rp, default=argparse.SUPPRESS)

    rep = sub.add_parser("report", help="triage report of a recording")
    rep.add_argument("file", metavar="RUN.memtop")
    rep.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    rep.add_argument("--gpu", type=int, metavar="N", help="only this GPU")
    rep.add_argument("--from", dest="t_from", type=_finite, metavar="T", help="seconds from the start")
    rep.add_argument("--to", dest="t_to", type=_finite, metavar="T", help="seconds from the start")
    rep.add_argument(
        "--no-cache",
        action="store_true",
        help="read the recording again rather than reuse the report cached for it",
    )

    ex = sub.add_parser("export", help="export a recording for the Perfetto UI")
    ex.add_argument("file", metavar="RUN.memtop")
    ex.add_argument(
        "--perfetto",
        required=True,
        metavar="OUT.json",
        help="the trace file (gzip-compressed if it ends in .gz)",
    )
    ex.add_argument(
        "--force", action="store_true", help="replace OUT.json (a link is replaced, not followed)"
    )
    ex.add_argument("--gpu", type=int, metavar="N", help="only this GPU (and the processes on it)")
    ex.add_argument("--from", dest="t_from", type=_finite, metavar="T", help="seconds from the start")
    ex.add_argument("--to", dest="t_to", type=_finite, metavar="T", help="seconds from the start")

    d = sub.add_parser("doctor", help="what this machine can give, and the fix for each 'no'")
    d.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
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
    except UserError as e:
        print(f"memtop: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
