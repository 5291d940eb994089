"""FedAvg (SPEC §2): the server averages client parameters weighted by N_i."""
from __future__ import annotations

import torch
from torch import Tensor

Params = dict[str, Tensor]


def sample_weights(sizes) -> Tensor:
    """p_i = N_i / Σ_j N_j over the participating clients (on the CPU; moved to the parameters' device where used)."""
    n = torch.as_tensor(sizes, dtype=torch.float64, device="cpu")
    return n / n.sum()


def weighted_average(stacked: Params, weights: Tensor) -> Params:
    """Σ_i p_i θ_i for every tensor; ``stacked`` holds participants only, [m, ...]."""
    return {k: torch.einsum("c,c...->...", weights.to(v.device, v.dtype), v) for k, v in stacked.items()}


def aggregate(global_params: Params, stacked: Params, sizes) -> Params:
    return weighted_average(stacked, sample_weights(sizes))
