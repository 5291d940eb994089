"""Losses every method shares: reconstruction per row (= the anomaly score) and batch means."""
from __future__ import annotations

from torch import Tensor


def reconstruction_per_row(x: Tensor, x_hat: Tensor, n_feature_dims: int = 1) -> Tensor:
    """||x − D(E(x))||²₂ summed over the trailing ``n_feature_dims`` dims (1 tabular, 3 images).

    This is both the Phase 1 loss per row and the anomaly score s(x) of SPEC §5.
    """
    return (x - x_hat).pow(2).flatten(start_dim=x.dim() - n_feature_dims).sum(-1)


def masked_batch_mean(per_row: Tensor, mask: Tensor) -> Tensor:
    """(1/B) Σ_b over the real rows of each client's batch: per_row, mask [C, B] → [C]."""
    return (per_row * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
