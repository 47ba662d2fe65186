"""Run another checkout's memtop beside this one (A/B benches). An editable install's import hook comes
before PYTHONPATH, so `PYTHONPATH=CHECKOUT python ...` would still import this tree: the prelude drops
that hook and puts the checkout (and its bench/) first."""

from __future__ import annotations


def prelude(tree: str) -> str:
    """Python source to run first in a child process so that `import memtop` is ``tree``'s."""
    return (
        "import sys; sys.meta_path = [m for m in sys.meta_path if 'editable' not in repr(m).lower()]; "
        f"sys.path[:0] = [{tree!r}, {tree + '/bench'!r}]; import memtop; "
        f"assert memtop.__file__.startswith({tree!r}), memtop.__file__\n"
    )
