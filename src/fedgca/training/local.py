"""Local training of parameter-sharing and single-site methods (SPEC §2): E epochs of Adam on L_recon."""
from __future__ import annotations

import torch

from fedgca import seeding
from fedgca.protocol.losses import masked_batch_mean, reconstruction_per_row
from fedgca.training.loop import ClientShards, run_epoch
from fedgca.training.stacked import StackedModels


def local_training(clients: StackedModels, shards: ClientShards, seed: int, r: int, epochs: int,
                    part: torch.Tensor, batch_size: int, extra_loss=None, client_ids=None) -> None:
    """``epochs`` epochs of mini-batch Adam on L_recon (+ an optional per-client term).

    ``client_ids`` are the slots' global client ids (which key the batch order);
    default: slot i is client i. A Flower client (one slot) passes its own id.
    """
    n_feature_dims = shards.x.dim() - 2

    def loss(xb, mask):
        value = masked_batch_mean(reconstruction_per_row(xb, clients.reconstruct(xb), n_feature_dims), mask)
        return value if extra_loss is None else value + extra_loss()

    ids = range(shards.num_clients) if client_ids is None else client_ids
    for e in range(epochs):
        run_epoch(clients, shards, seeding.client_rngs(seed, "local", (r, e), ids), batch_size, loss,
                  list(clients.params), part)
