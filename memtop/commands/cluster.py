"""`memtop cluster`: many nodes' snapshots, merged into one row per GPU (the library is memtop.fleet).

`--once` polls once and prints text or JSON; otherwise the cluster TUI, with the display choices of
config.toml under the command line's (as the local TUI applies them: commands.local.display_options).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

from memtop.commands.authtoken import read_token
from memtop.core.errors import UserError
from memtop.fleet.sources import (
    HttpPoller,
    PromSource,
    Source,
    SshStreams,
    default_interval,
    node_list,
    read_hosts,
)
from memtop.fleet.view import NodeState, merged, print_text


def make_source(args: argparse.Namespace) -> tuple[Source, float]:
    """(source, interval): the transport the flags ask for."""
    token = read_token(args.token_file) if args.token_file else None
    if args.prom:
        return PromSource(args.prom, timeout=max(args.timeout, 5.0), token=token), args.interval or 5.0
    nodes = [NodeState(h) for h in read_hosts(args)]
    interval = args.interval or default_interval(len(nodes))
    if args.ssh:
        return SshStreams(nodes, interval, ssh_config=args.ssh_config, timeout=args.timeout), interval
    # the table polls each node's compact form; --once prints every node's full snapshot
    poller = HttpPoller(
        nodes, args.port, timeout=args.timeout, token=token, tls=args.tls, compact=not args.once
    )
    return poller, interval


def run_cluster(args: argparse.Namespace) -> int:
    if args.json and not args.once:
        raise UserError("--json goes with --once")
    if args.ssh and args.prom:
        raise UserError("--ssh and --prom are two transports: choose one")
    src, interval = make_source(args)
    if args.once:
        return _once(src, interval, args)
    if not (sys.stderr.isatty() and sys.stdin.isatty()):
        raise UserError("the cluster view needs a terminal; use --once --json when piping")
    return _tui(src, interval, args)


def _once(src: Source, interval: float, args: argparse.Namespace) -> int:
    """Exit 0 when every node answered, 1 when some did not, 2 when Prometheus' answer was refused."""
    try:
        if isinstance(src, SshStreams):
            src.start()
            end = time.monotonic() + interval + args.timeout + 15  # a node's memtop warms up first
            while time.monotonic() < end and any(n.snapshot is None and n.failures == 0 for n in src.nodes):
                time.sleep(0.1)
        else:
            src.poll_all()
    finally:
        (src.stop if isinstance(src, SshStreams) else src.close)()
    nodes = node_list(src)
    if isinstance(src, PromSource) and src.error and not nodes:
        if src.refused:
            raise UserError(src.error)
        print(f"memtop: {src.error}", file=sys.stderr)
        return 1
    out = merged(nodes, interval)
    if args.json:
        print(json.dumps(out, separators=(",", ":")))
    else:
        print_text(nodes, interval)
    return 0 if all(n["ok"] for n in out["nodes"]) else 1


# Container allocations between two passes of the collector over the young ones. A round's new
# snapshots count as they are decoded (~25 containers a node); those they replace count back off only
# when the next paint lets go of them: at 25 000, a thousand nodes' round crossed the threshold and a
# pass walked every snapshot just decoded (15-30 ms, once a round); above a round's peak, the paint's
# frees bring the count back and a pass comes only as cycles (Textual's strips) pile up.
GC_YOUNG = 100_000


def _tui(src: Source, interval: float, args: argparse.Namespace) -> int:
    from memtop import config
    from memtop.commands.local import display_options
    from memtop.core.sanitize import clean
    from memtop.tui.cluster import ClusterApp

    opts = display_options(args, config.load())

    def make(theme: str | None) -> ClusterApp:
        return ClusterApp(
            src, interval, ascii_only=opts.ascii, theme=theme, paint_rate=opts.paint_rate or 1.0
        )

    try:
        app = make(opts.theme)
    except UserError as e:
        if args.theme:  # the flag's theme: the user's error; the config file's must not stop the view
            raise
        print(f"memtop: ignoring the theme in {config.path()}: {clean(str(e), 300)}", file=sys.stderr)
        app = make(None)
    # A thousand nodes' snapshots decoded every 5 s are ~30 000 new dicts and lists a round, and
    # JSON holds no cycles: at the default threshold (700) the collector passed over them some 50
    # times a second (bench/RESULTS.md). What start-up made stays out of its passes.
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    app.run(mouse=opts.mouse)
    return app.return_code or 0  # Textual's 1 after an exception it caught and printed
