"""FedProx (SPEC §2): FedAvg plus a proximal term on the client loss.

L = L_recon + c·||θ_i − θ^(r)||²₂. The reference implementation writes the
term as (μ/2)·||θ_i − θ^(r)||² next to a reconstruction loss *summed* over the
batch; fedgca's L_recon is the batch *mean*, so the same optimisation problem
has c = μ / (2B): μ = 1e-2, B = 50 → c = 1e-4. Both are in the config
(``fedprox_mu``, ``fedprox_coef``); an explicit coefficient wins.
"""
from __future__ import annotations

import torch
from torch import Tensor

from fedgca.protocol.fedavg import aggregate  # the server rule is FedAvg's

__all__ = ["aggregate", "effective_coefficient", "proximal_term_and_gradient", "proximal_term"]


def effective_coefficient(mu: float, batch_size: int) -> float:
    return mu / (2 * batch_size)


def proximal_term(params: dict[str, Tensor], global_params: dict[str, Tensor]) -> Tensor:
    """||θ_i − θ^(r)||²₂ per client: stacked params [C, ...] against the round's global model."""
    return _per_client_sum((p - global_params[k].detach()).pow(2) for k, p in params.items())


def _per_client_sum(squares) -> Tensor:
    """Σ over parameters of each client's sum of squares [C], in the parameters' order (autograd's and the hand
    pass's order: their values agree bit for bit)."""
    total = 0
    for sq in squares:
        total = total + sq.flatten(1).sum(-1)
    return total


def proximal_term_and_gradient(params: dict[str, Tensor], global_params: dict[str, Tensor],
                                coef: float) -> tuple[Tensor, dict[str, Tensor]]:
    """(c·||θ_i − θ^(r)||²₂ per client, its gradient c·2(θ_i − θ^(r)) per parameter) with θ_i − θ^(r) computed once,
    each equal bit for bit to what autograd gives through ``coef * proximal_term(...)``: d·d is pow(d, 2)'s kernel,
    the sums run in the same order, and d·(2c) rounds the exact product 2cd once, as autograd's c·(2d) does (2c
    and 2d are exact), so a hand-written backward pass that adds it keeps autograd's gradients."""
    diffs = torch._foreach_sub([p.detach() for p in params.values()],
                               [global_params[k].detach().expand_as(p) for k, p in params.items()])
    total = _per_client_sum(torch._foreach_mul(diffs, diffs))
    torch._foreach_mul_(diffs, 2.0 * coef)
    return coef * total, dict(zip(params, diffs))
