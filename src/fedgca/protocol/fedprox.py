"""FedProx (SPEC §2): FedAvg plus a proximal term on the client loss.

L = L_recon + c·||θ_i − θ^(r)||²₂. The reference implementation writes the
term as (μ/2)·||θ_i − θ^(r)||² next to a reconstruction loss *summed* over the
batch; fedgca's L_recon is the batch *mean*, so the same optimisation problem
has c = μ / (2B): μ = 1e-2, B = 50 → c = 1e-4. Both are in the config
(``fedprox_mu``, ``fedprox_coef``); an explicit coefficient wins.
"""
from __future__ import annotations

from torch import Tensor

from fedgca.protocol.fedavg import aggregate  # the server rule is FedAvg's

__all__ = ["aggregate", "effective_coefficient", "proximal_term"]


def effective_coefficient(mu: float, batch_size: int) -> float:
    return mu / (2 * batch_size)


def proximal_term(params: dict[str, Tensor], global_params: dict[str, Tensor]) -> Tensor:
    """||θ_i − θ^(r)||²₂ per client: stacked params [C, ...] against the round's global model."""
    total = 0
    for k, p in params.items():
        total = total + (p - global_params[k].detach()).pow(2).flatten(1).sum(-1)
    return total
