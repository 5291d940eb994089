"""Every simulator class by method: importing this module imports them all, and each registers itself
(``simulation.base.simulates``)."""
from __future__ import annotations

from fedgca import methods
from fedgca.simulation import baselines, gca  # noqa: F401 — registered on import
from fedgca.simulation.base import _SIMULATORS, SimMethod


def simulator(name: str) -> type[SimMethod]:
    """The simulator class of a registered method."""
    if name not in _SIMULATORS:
        methods.get(name)  # an unknown name: the registry's one-line error
        raise ValueError(f"method {name!r} has no simulator class")
    return _SIMULATORS[name]


__all__ = ["simulator"]
