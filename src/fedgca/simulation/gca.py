"""A GCA round in the in-process simulator: SPEC §1 phases over all clients at once."""
from __future__ import annotations

import torch

from fedgca import seeding
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.simulation.base import CommRecord, EvaluateFn, SimMethod


class GCASimulation(SimMethod):
    """Clients keep their own models; only codes go up, centroids and counts come down."""

    paper_phase = "recon"  # the paper evaluates GCA after every reconstruction epoch

    def __init__(self, fed):
        super().__init__(fed)
        c = fed.cfg
        self.gcfg = gca.GCAConfig(
            k=c.k, rho=c.rho, recon_epochs=c.recon_epochs, align_epochs=c.align_epochs,
            batch_size=c.batch_size, backend=c.backend,
            cluster_preset="tabular" if fed.dataset.kind == "tabular" else "vision",
            gamma=c.gamma, w_max=c.w_max, eps=c.weight_eps, uniform_weights=c.weights == "uniform",
        )

    def run_round(self, r: int, part: torch.Tensor, evaluate: EvaluateFn) -> CommRecord:
        fed, cfg, seed = self.fed, self.gcfg, self.fed.cfg.seed
        ids = range(fed.num_clients)
        for e in range(cfg.recon_epochs):
            gca.reconstruction_epoch(fed.clients, fed.shards, seeding.client_rngs(seed, "recon", (r, e), ids), cfg, part)
            evaluate("recon", e)

        uploads = gca.encode_uploads(fed.clients, fed.shards, seeding.client_rngs(seed, "upload", (r,), ids), cfg.rho, part)
        received = [
            gca.validate_upload(u, max_rows=gca.upload_size(int(n), cfg.rho), latent_dim=fed.latent_dim)
            for u, n in zip(uploads, fed.shards.sizes) if u is not None
        ]
        payload = gca.broadcast_payload(gca.aggregate_codes(received, cfg, seeding.int_seed(seed, "cluster", r)))
        broadcast = ClusterSummary(payload["centroids"], payload["counts"])

        for e in range(cfg.align_epochs):
            gca.alignment_epoch(fed.clients, fed.shards, seeding.client_rngs(seed, "align", (r, e), ids), cfg, broadcast, part)
            if fed.cfg.eval_align_epochs:
                evaluate("align", e)

        n_part = int(part.sum())
        return CommRecord(
            bytes_up=sum(u.nbytes for u in received),
            bytes_down=n_part * sum(a.nbytes for a in payload.values()),
            uploads=sum(len(u) for u in received),
            participants=[int(i) for i in torch.nonzero(part).flatten()],
            extra={"broadcast_k": int(len(payload["counts"]))},
        )
