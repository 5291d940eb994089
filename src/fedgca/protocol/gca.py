"""GCA — Global Centroid Alignment (SPEC §1), as small pure functions.

Hold this file beside SPEC §1: Phase 1 is ``reconstruction_per_row``,
the upload is ``upload_size`` / ``sample_upload``, Phase 2 is
``fedgca.protocol.clustering.cluster_codes``, Phase 3 is
``alignment_weights`` + ``nearest_centroid`` + ``alignment_per_row``.
The epoch drivers that apply these to a stack of client models are in
``fedgca.training.gca``; the simulator, the Flower apps and the attacks call
both. This module imports nothing above ``fedgca.protocol``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from fedgca.protocol.clustering import ClusterSummary
from fedgca.protocol.dp import RecordDP
from fedgca.protocol.losses import masked_batch_mean_and_grad


class UploadError(ValueError):
    """A client's upload is not what the protocol allows (shape, dtype, NaN/inf, size)."""


def upload_size(n_rows: int, rho: float) -> int:
    """⌊ρ·N_i⌋ codes per client and round (the epsilon guards 0.29·100 = 28.999…)."""
    return int(math.floor(rho * n_rows + 1e-9))


def sample_upload(rng: np.random.Generator, n_rows: int, rho: float) -> np.ndarray:
    """A fresh uniformly random index set of size ⌊ρ·N_i⌋, without replacement."""
    return np.sort(rng.choice(n_rows, size=upload_size(n_rows, rho), replace=False))


def validate_upload(codes, *, max_rows: int, latent_dim: int) -> np.ndarray:
    """Server-side guard: a 2-D float32 array (≤ max_rows, latent_dim), all finite."""
    if not isinstance(codes, np.ndarray):
        raise UploadError(f"upload is {type(codes).__name__}, expected a numpy array")
    if codes.dtype != np.float32:
        raise UploadError(f"upload dtype {codes.dtype}, expected float32")
    if codes.ndim != 2 or codes.shape[1] != latent_dim:
        raise UploadError(f"upload shape {codes.shape}, expected (n, {latent_dim})")
    if codes.shape[0] > max_rows:
        raise UploadError(f"upload has {codes.shape[0]} rows, more than the {max_rows} allowed")
    if not np.isfinite(codes).all():
        raise UploadError("upload contains NaN or inf")
    return codes


def alignment_weights(
    counts: Tensor, *, gamma: float = 1.0, w_max: float = 6.0, eps: float = 1e-6, uniform: bool = False
) -> Tensor:
    """Inverse-support weights w_k of SPEC §1, Phase 3.

    N̂_k = max(N_k, ε); N̄ = mean N̂; w̃_k = min(w_max, (N̄/N̂_k)^γ); w_k = w̃_k / (mean w̃ + ε).
    Rare clusters pull harder (capped at w_max), so that the encoder does not
    collapse every code onto the few dominant centroids.
    """
    counts = (counts if isinstance(counts, Tensor) else torch.as_tensor(counts, device="cpu")).to(torch.float64)
    if uniform:
        return torch.ones_like(counts)
    n_hat = counts.clamp_min(eps)
    w_tilde = (n_hat.mean() / n_hat).pow(gamma).clamp_max(w_max)
    return w_tilde / (w_tilde.mean() + eps)


def nearest_centroid(z: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor]:
    """a = argmin_k ||z − μ_k||₂ (the first on ties) and that squared distance, for z of shape [..., dz].

    The assignment is a constant of the loss, so it is found without autograd; only ||z − μ_a||² is
    differentiated: the gradients of differentiating the min over all K distances (whose backward reaches
    only the argmin), bit for bit, without carrying the [..., K, dz] tensor through the backward pass
    (alignment epochs ~1.5–2× faster on magic, K = 80). ``contiguous`` gives the gradient the layout that
    path gave it, so the reductions downstream run in the same order; the distance itself may differ
    from the all-K computation in the last bit (it is only reported, as the epoch's loss).
    """
    assign, d = _offset_to_nearest(z, centroids)
    return assign, d.pow(2).sum(-1)


def _offset_to_nearest(z: Tensor, centroids: Tensor) -> tuple[Tensor, Tensor]:
    """(a, z − μ_a): the nearest centroid and the offset to it, contiguous (see ``nearest_centroid``)."""
    assign = nearest_assignment(z, centroids)
    return assign, z.contiguous() - _lookup(centroids, assign, centroids.dim() == 3)


def _lookup(table: Tensor, assign: Tensor, per_client: bool) -> Tensor:
    """table[a]: one table for every client ([K, ...]), or each client's own ([C, K, ...]) for a [C, B] a."""
    if not per_client:
        return table[assign]
    return table[torch.arange(len(table), device=table.device).unsqueeze(-1), assign]


@torch.no_grad()
def nearest_assignment(z: Tensor, centroids: Tensor) -> Tensor:
    """a = argmin_k ||z − μ_k||₂ for z [..., dz] (the first on ties): a constant of the alignment loss.

    The squares are taken in place (~10 % of this step; same values). The layout of z is kept on purpose:
    the sum over dz runs in a layout-dependent order, and the stacked encoder's transposed codes and a
    contiguous copy pick different centroids on near-ties (tests/test_gca_math.py)."""
    if centroids.dim() == 3:  # each client its own centroids [C, K, dz] (the batched engine's runs)
        centroids = centroids.unsqueeze(-3)
    return (z.unsqueeze(-2) - centroids).pow_(2).sum(-1).argmin(dim=-1)


def alignment_per_row(z: Tensor, centroids: Tensor, weights: Tensor) -> Tensor:
    """w_{a_b} · ||E(x_b) − μ_{a_b}||², with μ and w constants (no gradient through them)."""
    assign, sq = nearest_centroid(z, centroids.detach())
    return weights.detach().to(z.dtype)[assign] * sq


def alignment_loss_and_grad(z: Tensor, centroids: Tensor, weights: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``masked_batch_mean(alignment_per_row(z, μ, w), mask)`` for codes z [C, B, dz], and its gradient
    with respect to z, computed with the ops autograd runs for it (bit-identical, tested): a hand-written
    backward pass needs no graph. Centroids [C, K, dz] and weights [C, K]: each client its own."""
    assign, d = _offset_to_nearest(z, centroids)
    w = _lookup(weights.to(z.dtype), assign, centroids.dim() == 3)
    loss, g = masked_batch_mean_and_grad(w * d.pow(2).sum(-1), mask)
    return loss, (g * w).unsqueeze(-1).expand(d.shape) * (2.0 * d)


# ---------------------------------------------------------------------------
# The GCA configuration slice and the server's rule (Phase 2).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GCAConfig:
    """SPEC §1 presets; every value is configurable."""

    k: int = 10
    rho: float = 0.1
    recon_epochs: int = 5
    align_epochs: int = 5
    batch_size: int = 50
    backend: str = "gmm"
    cluster_preset: str = "tabular"
    cluster_options: dict = field(default_factory=dict)
    gamma: float = 1.0
    w_max: float = 6.0
    eps: float = 1e-6
    warm_start: bool = False  # GMM: each round's EM starts at the previous round's centroids (not the paper)
    uniform_weights: bool = False
    dp: RecordDP | None = None  # DP-GCA: DP-SGD epochs and privatised uploads (protocol.dp)


def aggregate_codes(uploads: list[np.ndarray], cfg: GCAConfig, seed: int,
                    previous: ClusterSummary | None = None, fit=None) -> ClusterSummary:
    """Phase 2 (server): pool the uploads and cluster them into non-empty centroids and counts.

    ``previous``: the last round's broadcast, where the EM starts with ``cfg.warm_start`` (GMM only);
    ``fit``: how a clustering model is fitted (``cluster_codes``; None: on its own).
    """
    from fedgca.protocol.clustering import (
        cluster_codes,  # server side only: scikit-learn loads here
    )

    pooled = np.concatenate([u for u in uploads if u is not None and len(u)], axis=0)
    warm = previous.centroids if cfg.warm_start and previous is not None else None
    return cluster_codes(
        pooled, cfg.k, backend=cfg.backend, seed=seed, preset=cfg.cluster_preset, warm_means=warm,
        fit=fit, **cfg.cluster_options
    )


def broadcast_payload(summary: ClusterSummary) -> dict[str, np.ndarray]:
    """What the server sends each client: K' centroids and K' counts, FP32."""
    return {
        "centroids": np.ascontiguousarray(summary.centroids, dtype=np.float32),
        "counts": np.ascontiguousarray(summary.counts, dtype=np.float32),
    }
