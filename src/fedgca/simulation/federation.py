"""Everything a simulated federation holds: data shards, client models, test set."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedgca.config import RunConfig
from fedgca.data import load_dataset
from fedgca.data.dataset import FederatedDataset
from fedgca.data.partition import partition_rows, split_validation
from fedgca.models import init_model
from fedgca.protocol import sampling
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
        """The clients the server samples this round (SPEC §2: ⌊φ·C⌋ of them, all when φ = 1)."""
        return sampling.participants(self.cfg.seed, round_idx, self.num_clients, self.cfg.participation)


def build_federation(cfg: RunConfig, data_dir=None, dataset: FederatedDataset | None = None) -> Federation:
    cfg = cfg.resolved()
    dataset = dataset or load_dataset(cfg.dataset, data_dir, seed=cfg.seed)
    parts, val = split_validation(partition_rows(cfg, dataset.train), cfg.val_fraction, cfg.seed)
    n_models = 1 if cfg.method == "centralized" else cfg.clients
    models = [init_model(cfg.seed, dataset.input_shape, i) for i in range(n_models)]
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
