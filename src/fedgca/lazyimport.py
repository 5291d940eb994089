"""A module imported on first attribute access: a Flower ClientApp is one process per message, so what it
imports is paid on every message; pandas (≈1 s) is needed only when a node reads a CSV, not when it serves
a message from its cached arrays."""
from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands in for ``import <name>``; the import happens at the first ``module.attribute``."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
