"""The server optimizers by name (``fedopt``): what a method's spec names as its ``server_opt``, the step it takes
and its default server learning rate η (each in its own module)."""
from __future__ import annotations

from fedgca.protocol import fedadagrad, fedadam, fedavgm, fedyogi
from fedgca.protocol.fedavg import Params
from fedgca.protocol.fedopt import ServerOptOptions

_MODULES = {"fedavgm": fedavgm, "fedadam": fedadam, "fedyogi": fedyogi, "fedadagrad": fedadagrad}
NAMES = tuple(_MODULES)


def default_lr(name: str) -> float:
    return _MODULES[name].DEFAULT_LR


def step(name: str, theta: Params, mean: Params, state: dict, opts: ServerOptOptions,
         round_idx: int) -> tuple[Params, dict]:
    """θ^(r+1) from θ^(r) and the clients' weighted mean by the optimizer ``name``, and its new state."""
    return _MODULES[name].step(theta, mean, state, opts, round_idx)
