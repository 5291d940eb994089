"""FedYogi (Reddi et al. 2021, Algorithm 2), as Flower's ``FedYogi`` computes it: m of Δ = mean − θ,
v ← v − (1 − β₂)·Δ²·sign(v − Δ²) (Yogi's additive second moment), θ ← θ + η·m / (√v + τ)."""
from __future__ import annotations

from fedgca.protocol.fedavg import Params
from fedgca.protocol.fedopt import ServerOptOptions, adaptive_step, delta, first_moment

DEFAULT_LR = 0.01  # Flower's; the best of 0.001/0.01/0.1 on the 25 ADBench files (docs/results/server_opt)


def step(theta: Params, mean: Params, state: dict, opts: ServerOptOptions, round_idx: int) -> tuple[Params, dict]:
    d = delta(theta, mean)
    m = first_moment(state, d, opts.beta1)
    v = state.get("v") or {k: x.new_zeros(x.shape) for k, x in d.items()}
    v = {k: v[k] - (1.0 - opts.beta2) * d[k] ** 2 * (v[k] - d[k] ** 2).sign() for k in d}
    return adaptive_step(theta, m, v, opts.lr, opts.tau), {"m": m, "v": v}
