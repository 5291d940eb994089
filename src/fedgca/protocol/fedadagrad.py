"""FedAdagrad (Reddi et al. 2021, Algorithm 2), as Flower's ``FedAdagrad`` computes it: no first moment (Flower
fixes β₁ = 0, so m = Δ = mean − θ), v ← v + Δ², θ ← θ + η·Δ / (√v + τ)."""
from __future__ import annotations

from fedgca.protocol.fedavg import Params
from fedgca.protocol.fedopt import ServerOptOptions, adaptive_step, delta

DEFAULT_LR = 0.01  # the best of 0.001/0.01/0.1 on the 25 ADBench files (docs/results/server_opt); Flower's 0.1


def step(theta: Params, mean: Params, state: dict, opts: ServerOptOptions, round_idx: int) -> tuple[Params, dict]:
    d = delta(theta, mean)
    v = state.get("v") or {k: x.new_zeros(x.shape) for k, x in d.items()}
    v = {k: v[k] + d[k] ** 2 for k in d}
    return adaptive_step(theta, d, v, opts.lr, opts.tau), {"v": v}
