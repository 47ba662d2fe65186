"""`memtop trace PID | --job PID --seconds N [--steps N] [-o OUT.json.gz]`: the framework's own trace
of a job started with `memtop run`, merged with memtop's counters and phases (docs/TRACE.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memtop.agent.capture import capture_trace, default_output
from memtop.agent.client import hello, job_agents
from memtop.core.errors import UserError


def timing_line(t: dict) -> str:
    """Where the time from the request to the file went (capture._timing), in one line."""
    agent = "".join(
        f", {what} {t[k]:.1f} s"
        for k, what in (("profiler_stop_s", "profiler stop"), ("profiler_export_s", "export"))
        if t.get(k) is not None
    )
    return (
        f"{t['total_s']:.1f} s in all: window from {t['lead_s']:.1f} s (recorder up at {t['recorder_start_s']:.1f} s), "
        f"window {t['window_s']:.1f} s{agent}, trace in hand at {t['received_s']:.1f} s, "
        f"parse {t['parse_s']:.1f} s, merge and write {t['merge_s']:.1f} s"
    )


def run_trace(args: argparse.Namespace) -> int:
    if args.job is not None:
        refs = job_agents(args.job)
    else:
        ref = hello(args.pid)
        if not ref.frameworks:
            raise UserError(f"PID {args.pid} has not imported torch or jax: no framework trace to take")
        refs = [ref]
    out = Path(args.output) if args.output else default_output(args.job or args.pid)
    print(
        f"memtop: capturing {args.seconds:g} s of {', '.join(f'pid {r.pid}' for r in refs)}...",
        file=sys.stderr,
    )
    result = capture_trace(
        refs,
        args.seconds,
        out,
        steps=args.steps,
        force=args.force,
        python=args.python,
        cpu_ops=args.cpu_ops,
        stacks=not args.no_stacks,
    )
    for w in result.warnings:
        print(f"memtop: warning: {w}", file=sys.stderr)
    print(f"memtop: {result.line()} (open it in https://ui.perfetto.dev)", file=sys.stderr)
    print(f"memtop: {timing_line(result.summary['timing'])}", file=sys.stderr)
    return 0
