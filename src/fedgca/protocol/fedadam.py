"""FedAdam (Reddi et al. 2021, Algorithm 2), as Flower's ``FedAdam`` computes it: m and v of Δ = mean − θ,
v ← β₂·v + (1 − β₂)·Δ², and θ ← θ + η_r·m / (√v + τ) with Flower's bias correction
η_r = η·√(1 − β₂^(t+1)) / (1 − β₁^(t+1)) for server round t = r + 1 (the paper has none)."""
from __future__ import annotations

import math

from fedgca.protocol.fedavg import Params
from fedgca.protocol.fedopt import ServerOptOptions, adaptive_step, delta, first_moment

DEFAULT_LR = 0.01  # the best of 0.001/0.01/0.1 on the 25 ADBench files (docs/results/server_opt); Flower's 0.1


def step(theta: Params, mean: Params, state: dict, opts: ServerOptOptions, round_idx: int) -> tuple[Params, dict]:
    d = delta(theta, mean)
    m = first_moment(state, d, opts.beta1)
    v = state.get("v") or {k: x.new_zeros(x.shape) for k, x in d.items()}
    v = {k: opts.beta2 * v[k] + (1 - opts.beta2) * d[k] ** 2 for k in d}
    t = round_idx + 1.0  # Flower's server round (from 1); its correction uses t + 1
    lr = opts.lr * math.sqrt(1 - opts.beta2 ** (t + 1.0)) / (1 - opts.beta1 ** (t + 1.0))
    return adaptive_step(theta, m, v, lr, opts.tau), {"m": m, "v": v}
