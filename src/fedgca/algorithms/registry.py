"""Which round each registered method runs: the built-in methods' modules (imported here, each registers its
class with ``base.implements``) and any added with ``base.register``."""
from __future__ import annotations

from fedgca import methods
from fedgca.algorithms import alone, gca, secure, secure_gca, server_opt, sharing  # noqa: F401 — the built-in methods register on import
from fedgca.algorithms.base import _CLASSES, FederatedMethod


def method_class(name: str) -> type[FederatedMethod]:
    if name not in _CLASSES:
        methods.get(name)  # an unknown name: the registry's one-line error
        raise ValueError(f"method {name!r} has no implementation")
    return _CLASSES[name]


def method_for(cfg, kind: str, sizes) -> FederatedMethod:
    """The run's method object (``cfg.method``): ``kind`` "tabular" | "vision", ``sizes`` the N_i it may read."""
    return method_class(cfg.method)(cfg, kind, sizes)


def later_step_names() -> list[str]:
    """The names of every implemented method's steps after its first (the Flower ClientApp routes them)."""
    return sorted({s.name for cls in _CLASSES.values() for s in cls.steps[1:]})
