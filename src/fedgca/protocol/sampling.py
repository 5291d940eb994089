"""Client sampling (SPEC §2): each round the server draws m = max(1, ⌊φ·C⌋) of the C clients."""
from __future__ import annotations

import math

import torch

from fedgca import seeding


def num_participants(participation: float, n_clients: int) -> int:
    """m = max(1, ⌊φ·C⌋) (the epsilon guards products such as 0.3·10 = 2.999…)."""
    return max(1, math.floor(participation * n_clients + 1e-9))


def participants(seed: int, round_idx: int, n_clients: int, participation: float) -> torch.Tensor:
    """Boolean mask of this round's clients: all when φ = 1, else m drawn without replacement (on the CPU, with
    the draws: bookkeeping, moved where it meets the run's tensors)."""
    if participation >= 1:
        return torch.ones(n_clients, dtype=torch.bool, device="cpu")
    m = num_participants(participation, n_clients)
    chosen = seeding.rng(seed, "participation", round_idx).choice(n_clients, size=m, replace=False)
    mask = torch.zeros(n_clients, dtype=torch.bool, device="cpu")
    mask[torch.as_tensor(chosen, device="cpu")] = True
    return mask
