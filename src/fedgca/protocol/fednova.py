"""FedNova (SPEC §2): normalised averaging over unequal local step counts."""
from __future__ import annotations

import torch
from torch import Tensor

from fedgca.protocol.fedavg import Params, sample_weights


def local_steps(sizes, local_epochs: int, batch_size: int) -> Tensor:
    """τ_i = local epochs × the client's mini-batches per epoch."""
    n = torch.as_tensor(sizes, dtype=torch.float64, device="cpu")
    return local_epochs * torch.ceil(n / batch_size)


def aggregate(global_params: Params, stacked: Params, sizes, tau: Tensor) -> Params:
    """d_i = (θ^(r) − θ_i)/τ_i; τ_eff = Σ p_i τ_i; θ^(r+1) = θ^(r) − τ_eff Σ p_i d_i."""
    p = sample_weights(sizes)
    tau = tau.to("cpu", torch.float64)
    tau_eff = float((p * tau).sum())
    out = {}
    for k, g in global_params.items():
        d = (g.unsqueeze(0) - stacked[k]) / (tau.to(g.device, g.dtype).view(-1, *[1] * g.dim()))
        out[k] = g - tau_eff * torch.einsum("c,c...->...", p.to(g.device, g.dtype), d)
    return out
