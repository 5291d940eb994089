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
    return (per_row * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)


def masked_batch_mean_grad(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """∂ Σ_c masked_batch_mean(per_row, mask)_c / ∂ per_row [C, B] for per_row of ``dtype``: 1/B on real
    rows, 0 on padding.

    The ops autograd runs for ``masked_batch_mean`` (divide, expand, multiply), so the hand-written
    backward passes below give autograd's gradients bit for bit (tests/test_stacked.py)."""
    per_client = torch.ones(mask.shape[:-1], dtype=dtype) / mask.sum(-1).clamp_min(1.0)
    return per_client.unsqueeze(-1).expand(mask.shape) * mask


def reconstruction_loss_and_grad(x: Tensor, x_hat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``masked_batch_mean(reconstruction_per_row(x, x_hat), mask)`` for rows x, x_hat [C, B, F], and its
    gradient with respect to x_hat — as autograd computes it (pow's backward is g·(2·d¹), the
    subtraction's is −g), so that training by hand steps exactly as training through autograd."""
    d = x - x_hat
    loss = masked_batch_mean(d.pow(2).sum(-1), mask)
    g_row = masked_batch_mean_grad(mask, d.dtype).unsqueeze(-1).expand(d.shape)
    return loss, -(g_row * (2.0 * d.pow(1.0)))
