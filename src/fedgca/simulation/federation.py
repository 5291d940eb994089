"""Everything a simulated federation holds: data shards, client models, test set."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedgca import seeding
from fedgca.config import RunConfig
from fedgca.data import dirichlet_partition, iid_partition, load_dataset
from fedgca.data.dataset import FederatedDataset
from fedgca.models import build_model
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import AdamConfig, StackedModels


@dataclass
class Federation:
    cfg: RunConfig
    dataset: FederatedDataset
    partition: list[np.ndarray]  # training-row indices per client (validation rows removed)
    validation: list[np.ndarray]  # held-out validation rows per client (may be empty)
    shards: ClientShards
    val_shards: ClientShards | None
    test_x: torch.Tensor
    template: torch.nn.Module
    clients: StackedModels

    @property
    def num_clients(self) -> int:
        return self.shards.num_clients

    @property
    def latent_dim(self) -> int:
        return int(self.template.latent_dim)

    def participants(self, round_idx: int) -> torch.Tensor:
        """The clients the server samples this round: ⌊φ·C⌋ of them (all when φ = 1)."""
        n = self.num_clients
        if self.cfg.participation >= 1:
            return torch.ones(n, dtype=torch.bool)
        m = max(1, math.floor(self.cfg.participation * n + 1e-9))
        chosen = seeding.rng(self.cfg.seed, "participation", round_idx).choice(n, size=m, replace=False)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.as_tensor(chosen)] = True
        return mask


def partition_rows(cfg: RunConfig, train: np.ndarray) -> list[np.ndarray]:
    """The realised partition; every method uses the same one for a dataset and seed."""
    if cfg.partition == "iid":
        return iid_partition(len(train), cfg.clients, cfg.seed)
    return dirichlet_partition(train, cfg.clients, cfg.seed, alpha=cfg.alpha, min_size=cfg.batch_size)


def split_validation(parts: list[np.ndarray], fraction: float, seed: int) -> tuple[list, list]:
    """Hold out ⌊fraction·N_i⌋ rows of each shard before training (and before any upload)."""
    train, val = [], []
    for i, rows in enumerate(parts):
        n_val = int(math.floor(fraction * len(rows)))
        perm = seeding.rng(seed, "validation", i).permutation(len(rows))
        val.append(np.sort(rows[perm[:n_val]]))
        train.append(np.sort(rows[perm[n_val:]]))
    return train, val


def init_models(cfg: RunConfig, input_shape: tuple[int, ...], client_ids) -> list[torch.nn.Module]:
    """Client i's initial model depends only on (seed, i): a Flower client rebuilds the same one."""
    return [init_model(cfg.seed, input_shape, i) for i in client_ids]


def init_model(seed: int, input_shape: tuple[int, ...], client_id: int) -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seeding.int_seed(seed, "init", client_id))
        return build_model(input_shape)


def build_federation(cfg: RunConfig, data_dir=None, dataset: FederatedDataset | None = None) -> Federation:
    cfg = cfg.resolved()
    dataset = dataset or load_dataset(cfg.dataset, data_dir, seed=cfg.seed)
    parts, val = split_validation(partition_rows(cfg, dataset.train), cfg.val_fraction, cfg.seed)
    n_models = 1 if cfg.method == "centralized" else cfg.clients
    models = init_models(cfg, dataset.input_shape, range(n_models))
    adam = AdamConfig(lr=cfg.lr, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma)
    shards = ClientShards.from_arrays([dataset.train[p] for p in parts])
    has_val = cfg.val_fraction > 0 and all(len(v) for v in val)
    return Federation(
        cfg=cfg,
        dataset=dataset,
        partition=parts,
        validation=val,
        shards=shards,
        val_shards=ClientShards.from_arrays([dataset.train[v] for v in val]) if has_val else None,
        test_x=torch.as_tensor(dataset.test_x, dtype=torch.float32),
        template=models[0],
        clients=StackedModels(models, adam),
    )
