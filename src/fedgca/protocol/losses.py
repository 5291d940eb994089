"""Losses every method shares: reconstruction per row (= the anomaly score) and batch means."""
from __future__ import annotations

import torch
from torch import Tensor


def reconstruction_per_row(x: Tensor, x_hat: Tensor, n_feature_dims: int = 1) -> Tensor:
    """||x − D(E(x))||²₂ summed over the trailing ``n_feature_dims`` dims (1 tabular, 3 images).

    This is both the Phase 1 loss per row and the anomaly score s(x) of SPEC §5.
    """
    return (x - x_hat).pow(2).flatten(start_dim=x.dim() - n_feature_dims).sum(-1)


def masked_batch_mean(per_row: Tensor, mask: Tensor) -> Tensor:
    """(1/B) Σ_b over the real rows of each client's batch: per_row, mask [C, B] → [C]."""
    return (per_row * mask).sum(-1) / _real_rows(mask)


def _real_rows(mask: Tensor) -> Tensor:
    return mask.sum(-1).clamp_min(1.0)


def masked_batch_mean_and_grad(per_row: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``masked_batch_mean(per_row, mask)`` and ∂ Σ_c of it / ∂ per_row [C, B] (1/B on real rows, 0 on
    padding), the batch sizes counted once.

    The gradient is made with the ops autograd runs for the mean (divide, expand, multiply), so the
    hand-written backward passes give autograd's gradients bit for bit (tests/test_stacked.py)."""
    n = _real_rows(mask)
    grad = (torch.ones(n.shape, dtype=per_row.dtype, device=per_row.device) / n).unsqueeze(-1).expand(mask.shape) * mask
    return (per_row * mask).sum(-1) / n, grad


def reconstruction_loss_and_grad(x: Tensor, x_hat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``masked_batch_mean(reconstruction_per_row(x, x_hat), mask)`` for rows x, x_hat [C, B, F], and its
    gradient with respect to x_hat as autograd computes it: pow's backward g·2d, the subtraction's −g
    (folded into the factor: negation and doubling are exact)."""
    d = x - x_hat
    loss, g = masked_batch_mean_and_grad(d.pow(2).sum(-1), mask)
    return loss, g.unsqueeze(-1).expand(d.shape) * (-2.0 * d)
