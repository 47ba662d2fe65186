"""The commands' home: one module per command (or family), so the core beside it (model, store,
phases, pipeline) stays what the commands share. `memtop/cli.py` dispatches by name, loading only the
module the command needs."""
