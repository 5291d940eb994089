"""GCA and DP-GCA (SPEC §1): clients keep their own models; only codes go up, centroids and counts come down.

Step ``train``: Phase 1 (T_recon reconstruction epochs) and the upload of ⌊ρ·N_i⌋ fresh codes (DP-GCA: each
clipped and noised). The server checks each upload, pools the accepted ones in client-id order and clusters
them (Phase 2, seed ``int_seed(seed, "cluster", r)``). Step ``align``: the centroids and counts go to the
clients whose upload was accepted, which run Phase 3 (T_align alignment epochs on the encoder).
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import privacy, seeding
from fedgca.algorithms.base import ClientWork, FederatedMethod, Reply, Step, implements
from fedgca.devices import to_numpy
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.protocol.gca import UploadError
from fedgca.protocol.sampling import num_participants
from fedgca.training import gca as gca_training

CODES, CODES_ARRAY = "codes", "z"  # a train reply: one array of codes
BROADCAST = "broadcast"  # what the align step sends: centroids and counts


def received_summary(received: dict, latent_dim: int) -> ClusterSummary:
    """The broadcast as a client checks it before aligning to it."""
    centroids, counts = np.asarray(received["centroids"]), np.asarray(received["counts"])
    if (centroids.ndim != 2 or counts.shape != (len(centroids),) or not np.isfinite(centroids).all()
            or not np.isfinite(counts).all() or len(centroids) == 0):
        raise ValueError(f"malformed broadcast: centroids {centroids.shape}, counts {counts.shape}")
    if centroids.shape[1] != latent_dim:
        raise ValueError(f"broadcast centroids have width {centroids.shape[1]}, latent dim is {latent_dim}")
    return ClusterSummary(centroids, counts)


@implements("gca", "dpgca")
class GlobalCentroidAlignment(FederatedMethod):
    steps = (Step("train", reply=CODES), Step("align", sends=BROADCAST))

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.gcfg = gca_training.gca_config(cfg, kind, privacy.resolve(cfg, self.sizes))
        self.previous: ClusterSummary | None = None  # the last broadcast (--gmm-warm-start starts the EM there)
        self.broadcast: dict | None = None

    def evaluation_points(self) -> list[tuple[str, int]]:
        cfg = self.cfg
        return ([("recon", self.gcfg.recon_epochs)] if cfg.eval_recon_epochs else []) + \
            ([("align", self.gcfg.align_epochs)] if cfg.eval_align_epochs else [])

    # ------------------------------------------------------------------ client

    def reconstruction(self, r: int, work: ClientWork) -> None:
        """Phase 1: T_recon reconstruction epochs (evaluated after each with --eval-recon-epochs)."""
        for e in range(self.gcfg.recon_epochs):
            gca_training.reconstruction_epoch(work.models, work.shards,
                                              seeding.client_rngs(work.cfg.seed, "recon", (r, e), work.ids), self.gcfg,
                                              work.part)
            if work.cfg.eval_recon_epochs:
                work.evaluate("recon", e)

    def upload_sample(self, r: int, work: ClientWork) -> list:
        """Round ``r``'s ⌊ρ·N_i⌋ fresh codes of every participating slot (the same draws however often asked)."""
        return gca_training.encode_uploads(work.models, work.shards,
                                           seeding.client_rngs(work.cfg.seed, "upload", (r,), work.ids), self.gcfg.rho,
                                           work.part, self.gcfg.dp)

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        g, seed, ids = self.gcfg, work.cfg.seed, work.ids
        if step.name == "train":
            self.reconstruction(r, work)
            uploads = self.upload_sample(r, work)
            return {slot: Reply({CODES_ARRAY: uploads[slot]}) for slot in work.slots}
        summary = received_summary(received, int(work.models.base.latent_dim))
        for e in range(g.align_epochs):
            gca_training.alignment_epoch(work.models, work.shards, seeding.client_rngs(seed, "align", (r, e), ids), g,
                                         summary, work.part)
            if work.cfg.eval_align_epochs:
                work.evaluate("align", e)
        return {slot: Reply() for slot in work.slots}

    # ------------------------------------------------------------------ server

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        if step.name != "train":
            return super().check(step, reply, num_examples, latent_dim)
        if list(reply.arrays) != [CODES_ARRAY] or reply.metrics:
            raise UploadError(f"reply must hold exactly one array {CODES_ARRAY!r}, got {list(reply.arrays)}"
                              + (f" and metrics {list(reply.metrics)}" if reply.metrics else ""))
        gca.validate_upload(reply.arrays[CODES_ARRAY], max_rows=gca.upload_size(num_examples, self.cfg.rho),
                            latent_dim=latent_dim)
        return reply

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        if step.name != "train":
            return
        uploads = [replies[i].arrays[CODES_ARRAY] for i in sorted(replies)]  # pooled in client-id order
        self.broadcast = gca.broadcast_payload(gca.aggregate_codes(uploads, self.gcfg,
                                                                   seeding.int_seed(self.cfg.seed, "cluster", r),
                                                                   self.previous, fit=self.fit_clustering))
        if self.gcfg.warm_start:
            self.previous = ClusterSummary(self.broadcast["centroids"], self.broadcast["counts"])

    def send(self, step: Step, r: int) -> dict | None:
        if step.name == "train":  # a new round: nothing clustered yet
            self.broadcast = None
            return None
        return self.broadcast

    def uploads(self, step: Step, replies: dict[int, Reply]) -> int:
        return sum(len(rep.arrays[CODES_ARRAY]) for rep in replies.values()) if step.name == "train" else 0

    def size_note(self, sizes) -> str | None:
        """GCA clusters at most as many codes as the clients upload; say so when K asks for more."""
        cfg = self.cfg
        # the most codes a round can bring: the ⌊φC⌋ largest uploads (all of them when φ = 1)
        per_client = sorted((gca.upload_size(int(n), cfg.rho) for n in sizes), reverse=True)
        per_round = sum(per_client[:num_participants(cfg.participation, len(per_client))])
        if per_round == 0:
            raise ValueError(f"--rho {cfg.rho}: no client uploads a code (⌊ρ·N_i⌋ = 0 for every client); "
                             "raise --rho")
        if cfg.k > per_round:
            return (f"--k {cfg.k} exceeds the {per_round} codes uploaded per round; each round clusters at most "
                    f"{per_round} (the broadcast K per round is in comm.json: broadcast_k)")
        return None

    def round_record(self) -> dict:
        return {"broadcast_k": int(len(self.broadcast["counts"])) if self.broadcast is not None else 0}

    def state_dict(self) -> dict:
        if self.previous is None:
            return {}
        return {"previous": {"centroids": torch.as_tensor(self.previous.centroids),
                             "counts": torch.as_tensor(self.previous.counts)}}

    def load_state_dict(self, state: dict) -> None:
        prev = state.get("previous")
        self.previous = None if prev is None else ClusterSummary(to_numpy(prev["centroids"]), to_numpy(prev["counts"]))
