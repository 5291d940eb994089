"""A registry of named specs (the methods in ``fedgca.methods``, the datasets in ``fedgca.data.registry``): each
registered once, kept in registration order, looked up with one clear error for an unknown name."""
from __future__ import annotations

from typing import Callable


class Registry(dict):
    """name → spec (a ``dict``: iteration, ``in``, ``items()`` as usual)."""

    def __init__(self, kind: str, unknown: Callable[[str, list[str]], Exception]):
        super().__init__()
        self.kind, self._unknown = kind, unknown

    def register(self, spec):
        if spec.name in self:
            raise ValueError(f"{self.kind} {spec.name!r} is registered twice")
        self[spec.name] = spec
        return spec

    def lookup(self, name: str):
        """The spec registered as ``name``; an unknown name raises the registry's one-line error."""
        if name not in self:
            raise self._unknown(name, list(self))
        return self[name]
