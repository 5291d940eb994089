"""A GCA round in the in-process simulator: SPEC §1 phases over all clients at once."""
from __future__ import annotations

import torch

from fedgca import privacy, seeding
from fedgca.devices import to_numpy
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.simulation.base import CommRecord, EvaluateFn, SimMethod, simulates
from fedgca.training import gca as gca_training


@simulates("gca", "dpgca")
class GCASimulation(SimMethod):
    """Clients keep their own models; only codes go up, centroids and counts come down."""

    def __init__(self, fed):
        super().__init__(fed)
        self.gcfg = gca_training.gca_config(fed.cfg, fed.dataset.kind, privacy.resolve(fed.cfg, fed.shards.sizes))
        self.previous: ClusterSummary | None = None  # the last broadcast (--gmm-warm-start starts the EM there)

    def run_round(self, r: int, part: torch.Tensor, evaluate: EvaluateFn) -> CommRecord:
        fed, cfg, seed = self.fed, self.gcfg, self.fed.cfg.seed
        ids = range(fed.num_clients)
        for e in range(cfg.recon_epochs):
            gca_training.reconstruction_epoch(fed.clients, fed.shards, seeding.client_rngs(seed, "recon", (r, e), ids), cfg, part)
            if fed.cfg.eval_recon_epochs:
                evaluate("recon", e)

        uploads = gca_training.encode_uploads(fed.clients, fed.shards, seeding.client_rngs(seed, "upload", (r,), ids), cfg.rho, part,
                                                 cfg.dp)
        received = [
            gca.validate_upload(u, max_rows=gca.upload_size(int(n), cfg.rho), latent_dim=fed.latent_dim)
            for u, n in zip(uploads, fed.shards.sizes) if u is not None
        ]
        payload = gca.broadcast_payload(gca.aggregate_codes(received, cfg, seeding.int_seed(seed, "cluster", r),
                                                            self.previous))
        broadcast = ClusterSummary(payload["centroids"], payload["counts"])
        if cfg.warm_start:
            self.previous = broadcast

        for e in range(cfg.align_epochs):
            gca_training.alignment_epoch(fed.clients, fed.shards, seeding.client_rngs(seed, "align", (r, e), ids), cfg, broadcast, part)
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

    def state_dict(self) -> dict:
        if self.previous is None:
            return {}
        return {"previous": {"centroids": torch.as_tensor(self.previous.centroids),
                             "counts": torch.as_tensor(self.previous.counts)}}

    def load_state_dict(self, state: dict) -> None:
        prev = state.get("previous")
        self.previous = None if prev is None else ClusterSummary(to_numpy(prev["centroids"]), to_numpy(prev["counts"]))
