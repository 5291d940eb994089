"""GCA's client side over a stack of client models (C = 1 for a Flower client): SPEC §1 epochs and the upload.

The per-row math is ``fedgca.protocol.gca``; this module drives it over
mini-batches with the stacked engine. Orchestration — which clients, when to
evaluate — lives in ``fedgca.simulation`` and ``fedgca.flower``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedgca import devices
from fedgca.devices import to_numpy
from fedgca.protocol import dp as dp_protocol
from fedgca.protocol.clustering import ClusterSummary
from fedgca.protocol.gca import (
    GCAConfig,
    alignment_loss_and_grad,
    alignment_per_row,
    alignment_weights,
    sample_upload,
)
from fedgca.protocol.losses import masked_batch_mean
from fedgca.training import stacked
from fedgca.training.dpsgd import run_dp_epoch
from fedgca.training.local import reconstruction_loss, reconstruction_per_example
from fedgca.training.loop import ClientShards, HandDifferentiated, LossFn, run_epoch
from fedgca.training.stacked import StackedModels


def gca_config(cfg, kind: str, dp: dp_protocol.RecordDP | None = None) -> GCAConfig:
    """A RunConfig's GCA slice (``kind``: the dataset's kind, tabular or vision, picks the clustering preset;
    ``dp``: DP-GCA's resolved noise, ``fedgca.privacy.resolve``)."""
    return GCAConfig(
        dp=dp,
        k=cfg.k, rho=cfg.rho, recon_epochs=cfg.recon_epochs, align_epochs=cfg.align_epochs,
        batch_size=cfg.batch_size, backend=cfg.backend,
        cluster_preset="tabular" if kind == "tabular" else "vision",
        gamma=cfg.gamma, w_max=cfg.w_max, eps=cfg.weight_eps, uniform_weights=cfg.weights == "uniform",
        warm_start=cfg.gmm_warm_start,
        cluster_options=_cluster_options(cfg),
    )


def _cluster_options(cfg) -> dict:
    """The GMM's torch engine (the vision preset's 100 batched inits) fits on the run's device; so do the tabular
    preset's full-covariance GMM, K-means and soft K-means under the device engine (``stacked.device_engine``),
    where the server would otherwise fit on the host every round while the device waits. Elsewhere the host's
    engines (scikit-learn's GMM and K-means, soft K-means in NumPy; mini-batch K-means always) fit on the CPU: the
    CPU's numbers are what they were."""
    device = devices.resolve(cfg.device)
    on_device = stacked.device_engine(device)
    if not devices.has_float64(device):  # the torch engines compute in float64: on the CPU beside an MPS run
        device = devices.resolve("cpu")
        on_device = False
    if cfg.backend == "gmm":
        return {"device": device, **({"engine": "torch"} if on_device else {})}
    if cfg.backend in ("kmeans", "softkmeans") and on_device:
        return {"device": device, "engine": "torch"}
    return {}


def alignment_loss(clients: StackedModels, centroids: Tensor, weights: Tensor) -> LossFn:
    """Phase 3 loss L_align per client; assignments recomputed every batch."""

    def loss(xb: Tensor, mask: Tensor) -> Tensor:
        return masked_batch_mean(alignment_per_row(clients.encode(xb), centroids, weights), mask)

    if clients.hand_backward:
        return HandDifferentiated(loss, lambda xb, mask: clients.loss_and_grads(
            xb, mask, lambda z, m: alignment_loss_and_grad(z, centroids, weights, m), parts=("encoder",)),
            form=("align", centroids.shape[-1]), merge=_merge_alignment, merge_data=(centroids, weights))
    return loss


def _merge_alignment(parts: list, merged: StackedModels) -> HandDifferentiated:
    """For the batched engine: the alignment losses of several runs ``[(loss, its clients)]`` as one over their
    concatenated clients, each client with its own run's centroids and weights. A run with fewer centroids
    is padded with repeats of its first: ``nearest_assignment`` takes the first of equal distances, so a
    repeat is never a client's nearest and the loss is the run's own."""
    k = max(len(loss.merge_data[0]) for loss, _ in parts)
    mus, ws = [], []
    for loss, n in parts:
        mu, w = loss.merge_data
        if len(mu) < k:
            mu = torch.cat([mu, mu[:1].expand(k - len(mu), -1)])
            w = torch.cat([w, w[:1].expand(k - len(w))])
        mus.append(mu.expand(n, -1, -1))
        ws.append(w.expand(n, -1))
    mu, w = torch.cat(mus), torch.cat(ws)
    return HandDifferentiated(None, lambda xb, mask: merged.loss_and_grads(
        xb, mask, lambda z, m: alignment_loss_and_grad(z, mu, w, m), parts=("encoder",)))


def reconstruction_epoch(clients, shards: ClientShards, rngs, cfg: GCAConfig, participating: Tensor) -> Tensor:
    n_feature_dims = shards.x.dim() - 2
    if cfg.dp is not None:
        return run_dp_epoch(clients, shards.x, shards.sizes, rngs, cfg.batch_size,
                            reconstruction_per_example(n_feature_dims), list(clients.params), participating, cfg.dp)
    return run_epoch(
        clients, shards, rngs, cfg.batch_size, reconstruction_loss(clients, n_feature_dims),
        list(clients.params), participating,
    )


def alignment_epoch(
    clients, shards: ClientShards, rngs, cfg: GCAConfig, summary: ClusterSummary, participating: Tensor
) -> Tensor:
    """One alignment epoch: encoder parameters only — decoder tensors and Adam state untouched."""
    dev = shards.device
    centroids = torch.as_tensor(summary.centroids, dtype=torch.float32, device=dev)
    weights = alignment_weights(
        torch.as_tensor(summary.counts, device="cpu"), gamma=cfg.gamma, w_max=cfg.w_max, eps=cfg.eps,
        uniform=cfg.uniform_weights,
    ).to(dev)
    if cfg.dp is not None:
        return run_dp_epoch(
            clients, shards.x, shards.sizes, rngs, cfg.batch_size,
            lambda tape, xb: alignment_per_row(tape.encode(xb), centroids, weights),
            clients.encoder_keys, participating, cfg.dp)
    return run_epoch(
        clients, shards, rngs, cfg.batch_size, alignment_loss(clients, centroids, weights),
        clients.encoder_keys, participating,
    )


@torch.no_grad()
def encode_uploads(clients: StackedModels, shards: ClientShards, rngs, rho: float, participating,
                   dp: dp_protocol.RecordDP | None = None) -> list:
    """Each participating client's ⌊ρ·N_i⌋ freshly sampled codes (float32 arrays); None for others.

    DP-GCA (``dp``): each code clipped to C_z and noised (``protocol.dp.privatize_codes``, the client's rng).
    """
    picks = [
        sample_upload(rngs[c], int(n), rho) if bool(participating[c]) else np.zeros(0, dtype=np.int64)
        for c, n in enumerate(shards.sizes)
    ]
    width = max(1, max(len(p) for p in picks))
    idx = torch.zeros((len(picks), width), dtype=torch.long, device="cpu")
    for c, p in enumerate(picks):
        idx[c, : len(p)] = torch.as_tensor(p, device="cpu")
    dev = shards.device
    codes = to_numpy(clients.encode(shards.x[torch.arange(len(picks), device=dev).unsqueeze(-1), idx.to(dev)]))
    out = [
        codes[c, : len(p)].astype(np.float32, copy=True) if bool(participating[c]) else None
        for c, p in enumerate(picks)
    ]
    if dp is not None:
        out = [None if u is None else dp_protocol.privatize_codes(u, dp, rngs[c]) for c, u in enumerate(out)]
    return out


