"""Plain per-client loops: one nn.Module and one torch.optim.Adam per client.

This is the obvious implementation the stacked simulator must reproduce; the
tests compare the two and the benchmark measures the speed-up.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedgca import seeding
from fedgca.devices import to_numpy
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.protocol.losses import masked_batch_mean, reconstruction_per_row
from fedgca.training.loop import batch_plan


class ReferenceClient:
    def __init__(self, model: nn.Module, data: np.ndarray, cid: int, lr: float = 1e-3,
                 lr_step: int = 1000, lr_gamma: float = 0.1):
        self.model, self.cid = model, cid
        self.x = torch.as_tensor(data, dtype=next(model.parameters()).dtype)
        self.optim = torch.optim.Adam(model.parameters(), lr=lr)
        self.sched = torch.optim.lr_scheduler.StepLR(self.optim, lr_step, lr_gamma)

    def epoch(self, rng: np.random.Generator, batch_size: int, per_row) -> None:
        idx, mask = batch_plan([rng], np.array([len(self.x)]), batch_size)
        for step in range(idx.shape[0]):
            m = mask[step, 0]
            if m.sum() == 0:
                continue
            xb = self.x[idx[step, 0]]
            loss = masked_batch_mean(per_row(xb).unsqueeze(0), m.unsqueeze(0)).sum()
            self.optim.zero_grad(set_to_none=True)  # decoder grads stay None in alignment → Adam skips them
            loss.backward()
            self.optim.step()
        self.sched.step()

    def recon_per_row(self, xb):
        return reconstruction_per_row(xb, self.model(xb), xb.dim() - 1)


def reference_gca_round(clients: list[ReferenceClient], cfg: gca.GCAConfig, seed: int, r: int) -> dict:
    """One GCA round, client after client, with the same random draws as the simulator."""
    for c in clients:
        for e in range(cfg.recon_epochs):
            c.epoch(seeding.rng(seed, "recon", r, e, c.cid), cfg.batch_size, c.recon_per_row)
    uploads = []
    with torch.no_grad():
        for c in clients:
            pick = gca.sample_upload(seeding.rng(seed, "upload", r, c.cid), len(c.x), cfg.rho)
            uploads.append(to_numpy(c.model.encoder(c.x[torch.as_tensor(pick)])).astype(np.float32))
    payload = gca.broadcast_payload(gca.aggregate_codes(uploads, cfg, seeding.int_seed(seed, "cluster", r)))
    summary = ClusterSummary(payload["centroids"], payload["counts"])
    centroids = torch.as_tensor(summary.centroids)
    weights = gca.alignment_weights(torch.as_tensor(summary.counts), gamma=cfg.gamma, w_max=cfg.w_max,
                                    eps=cfg.eps, uniform=cfg.uniform_weights)
    for c in clients:
        def per_row(xb, c=c):
            return gca.alignment_per_row(c.model.encoder(xb), centroids, weights)

        for e in range(cfg.align_epochs):
            c.epoch(seeding.rng(seed, "align", r, e, c.cid), cfg.batch_size, per_row)
    return {"uploads": uploads, "payload": payload}
