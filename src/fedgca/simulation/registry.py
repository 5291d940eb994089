"""Method name → simulator implementation (the class its ``MethodSpec`` names)."""
from __future__ import annotations

from fedgca import methods
from fedgca.simulation.base import SimMethod


def method_class(name: str) -> type[SimMethod]:
    return methods.get(name).simulator_class()
