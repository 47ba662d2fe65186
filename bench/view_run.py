"""Run a script with memtop imported from a view of another tree (a folder holding memtop/ with that
tree's collectors/ and tui/ linked in, as bench/widget_floor_vm.sh builds) rather than from this
checkout's editable install, for A/B runs of two trees in one venv.

usage: python bench/view_run.py VIEW SCRIPT [ARGS...]
"""

from __future__ import annotations

import runpy
import sys

view, script = sys.argv[1], sys.argv[2]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:0] = [view, script.rsplit("/", 1)[0]]
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
