"""The commands' home: one module per command (or family), so the core beside it (model, store,
phases, pipeline) stays what the commands share. `memtop/cli.py` dispatches by name, loading only the
module the command needs."""

# `memtop serve`'s port, here so the argument parser (built for every command, the live view too)
# need not import the server. 9100-9999 is the exporter range; Prometheus (9090), node_exporter
# (9100), dcgm-exporter (9400) and Princeton jobstats' cgroup_exporter (9306) /
# nvidia_gpu_prometheus_exporter (9445) sit elsewhere.
DEFAULT_PORT = 9866
