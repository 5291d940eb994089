"""Method name → simulator implementation."""
from __future__ import annotations

from fedgca.simulation.base import SimMethod


def method_class(name: str) -> type[SimMethod]:
    from fedgca.simulation.gca import GCASimulation

    methods: dict[str, type[SimMethod]] = {"gca": GCASimulation}
    try:
        from fedgca.simulation import baselines

        methods.update(baselines.METHODS)
    except ImportError:  # baselines not installed in this build
        pass
    if name not in methods:
        raise ValueError(f"method {name!r} is not available in the simulator ({', '.join(methods)})")
    return methods[name]
