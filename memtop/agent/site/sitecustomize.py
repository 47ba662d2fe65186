"""memtop run's bootstrap: on PYTHONPATH of every process of the job, Python imports it at start-up.

It starts the in-job agent (memtop/agent/injob.py, loaded by path: the job's interpreter may not have
memtop installed), then hands over to the sitecustomize the job would have imported without memtop,
if any. Nothing here may disturb the job: the agent's failures are swallowed; the user's own
sitecustomize raises as it would have (site.py reports it the same way)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# off sys.path: the job's imports resolve as without memtop, and the user's sitecustomize is found
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _start_agent() -> None:
    try:
        import importlib.util

        path = os.path.join(os.path.dirname(_HERE), "injob.py")
        spec = importlib.util.spec_from_file_location("_memtop_agent", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["_memtop_agent"] = module
        module.start_from_environment()
    except Exception:  # no agent: the job runs as it would have
        pass


def _chain() -> None:
    """Import the sitecustomize that this one shadows, under its own name, as site.py would have."""
    import importlib

    ours = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_start_agent()
_chain()
