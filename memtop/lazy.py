"""A module imported on first use (live mode's first screen and its updates never need numpy, ~15 MiB
resident: the modules that use it for the report only name it through this)."""

from __future__ import annotations

import importlib
from typing import Any


class Lazy:
    """Stands for the module ``name``: the first attribute read imports it; each attribute read is
    then kept on this object, so later reads cost what a module attribute costs."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self._name), attr)
        setattr(self, attr, value)
        return value
