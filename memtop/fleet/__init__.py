"""The fleet library behind `memtop cluster`: many nodes' snapshots read over the network (HTTP
/snapshot.json, ssh, a Prometheus server), decoded at one boundary, merged into one row per GPU.

- files:   the host list and the token file (regular files only, bounded, owner and mode checked)
- wire:    the decode boundary: bytes from the network -> typed, sanitized snapshots (or a reason)
- fetch:   HTTP GETs bounded by a deadline and a byte cap; redirects followed within one origin only
- sources: the transports (HttpPoller, SshStreams, PromSource) and the hosts they poll
- view:    node states, the merged rows, stragglers, `--once` output
"""
