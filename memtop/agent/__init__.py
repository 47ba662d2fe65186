"""`memtop run`'s in-job agent (injob, loaded by site/sitecustomize.py) and memtop's side of it:
finding agents and asking them (client), capturing a window (capture) and merging the framework's
trace with memtop's counters and phases into one Perfetto file (merge). docs/TRACE.md."""
