"""FedAvgM (Hsu et al. 2019; Reddi et al. 2021): server SGD with momentum on the pseudo-gradient g = θ − mean,
as Flower's ``FedAvgM`` and torch.optim.SGD write it: u ← g (first round), u ← β·u + g, θ ← θ − η·u."""
from __future__ import annotations

from fedgca.protocol.fedavg import Params
from fedgca.protocol.fedopt import ServerOptOptions

DEFAULT_LR = 1.0  # the best of 0.1/0.3/1.0 on the 25 ADBench files (docs/results/server_opt); Flower's default


def step(theta: Params, mean: Params, state: dict, opts: ServerOptOptions, round_idx: int) -> tuple[Params, dict]:
    g = {k: v - mean[k] for k, v in theta.items()}
    if opts.momentum > 0:
        u = state.get("u")
        g = g if u is None else {k: opts.momentum * u[k] + g[k] for k in g}
        state = {"u": g}
    return {k: v - opts.lr * g[k] for k, v in theta.items()}, state
