"""Everything a simulated federation holds: data shards, client models, test set."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from fedgca import devices, privacy
from fedgca.binding import load_for
from fedgca.config import RunConfig
from fedgca.data import DataError, DataSource
from fedgca.data.dataset import FederatedDataset
from fedgca.data.partition import check_per_site, client_splits
from fedgca.evaluation.threshold import few_threshold_rows
from fedgca.models import build_model, init_model, param_count
from fedgca.protocol import sampling
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import AdamConfig, StackedModels

log = logging.getLogger("fedgca")


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
    device: torch.device = torch.device("cpu")  # where it computes (fedgca.devices); seeded draws stay on the CPU
    # Per-site test split (own data): each client's own test rows and labels; None = one shared test set.
    client_tests: list[tuple[torch.Tensor, np.ndarray]] | None = None

    @property
    def num_clients(self) -> int:
        return self.shards.num_clients

    @property
    def latent_dim(self) -> int:
        return int(self.template.latent_dim)

    def participants(self, round_idx: int) -> torch.Tensor:
        """The clients the server samples this round (SPEC §2: ⌊φ·C⌋ of them, all when φ = 1)."""
        return sampling.participants(self.cfg.seed, round_idx, self.num_clients, self.cfg.participation)


MODEL_BYTES_PER_PARAMETER = 120  # measured peak plus a margin, see memory_estimate


def memory_estimate(cfg: RunConfig, input_shape: tuple[int, ...], shard_sizes: list[int], n_test: int) -> int:
    """Bytes a simulated run needs at its peak, counted before anything large is allocated.

    Stacked client models: MODEL_BYTES_PER_PARAMETER per parameter and model — parameters,
    gradients and Adam's two moments are 16 of them; the rest is what a run was measured to hold
    on top at its peak (docs/results/reliability.md: up to 5.5 GiB for 1,000 credit-shaped
    models of 50,349 parameters, ~110 B each; the peak comes inside an evaluation pass), plus a
    margin. Shards are padded to the largest (train + validation), the test set once; an
    evaluation holds every client's test scores in float32 and, for AUROC/AUPRC, about four
    float64-sized working copies.
    """
    n_models = 1 if cfg.spec.pooled else cfg.clients
    row = math.prod(input_shape)
    params = param_count(build_model(input_shape))
    models = MODEL_BYTES_PER_PARAMETER * params * n_models
    shards = 4 * row * n_models * max(shard_sizes) * (2 if cfg.val_fraction > 0 else 1)
    if cfg.spec.pooled:
        shards += 4 * row * sum(shard_sizes)
    scores = (4 + 4 * 8) * n_models * (n_test + max(shard_sizes))
    return int(models + shards + 4 * row * n_test + scores)


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (Linux MemAvailable), else None."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(cfg: RunConfig, input_shape, shard_sizes, n_test: int) -> None:
    """A clear error, not an out-of-memory kill, when the run cannot fit in this machine's memory."""
    need, have = memory_estimate(cfg, input_shape, shard_sizes, n_test), available_memory()
    if have is not None and need > 0.9 * have:
        raise ValueError(f"this run needs about {need / 2**30:.1f} GiB of memory and {have / 2**30:.1f} GiB are "
                         f"available: reduce --clients ({cfg.clients}) or the data per client")


def build_federation(cfg: RunConfig, source: DataSource, dataset: FederatedDataset | None = None) -> Federation:
    """The federation of ``cfg`` on ``source``'s records (``dataset``: them already loaded)."""
    cfg = cfg.resolved()  # a no-op for the drivers' configs, resolved once where the run starts
    if source.label != cfg.dataset:
        raise DataError(f"the run's dataset is {cfg.dataset!r} but the data source is {source.label!r}")
    dataset = dataset or load_for(cfg, source)
    if "encoding_fit" in dataset.info:  # fitted from per-site statistics, as a deployment fits it
        privacy.refuse_plain_statistics(cfg)
        if dataset.info.get("stats_sigma") != privacy.stats_noise(cfg):
            raise ValueError(f"the dataset given was encoded with --dp-stats-sigma {dataset.info.get('stats_sigma')}, "
                             f"the run asks for {privacy.stats_noise(cfg)}")
    if cfg.data_digest is not None and dataset.info.get("digest") not in (None, cfg.data_digest):
        raise ValueError(f"the data given is not the data this run was made with (content digest "
                         f"{dataset.info['digest']}, the run's {cfg.data_digest})")
    parts, val = client_splits(cfg, dataset)
    check_memory(cfg, dataset.input_shape, [len(p) for p in parts], len(dataset.test_x))
    n_models = 1 if cfg.spec.pooled else cfg.clients
    device = devices.resolve(cfg.device)
    models = [init_model(cfg.seed, dataset.input_shape, i) for i in range(n_models)]
    adam = AdamConfig(lr=cfg.lr, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma)
    shards = ClientShards.from_arrays([dataset.train[p] for p in parts], device=device)
    has_val = cfg.val_fraction > 0 and all(len(v) for v in val)
    if has_val and cfg.threshold == "val-quantile" and (few := few_threshold_rows([len(v) for v in val],
                                                                                  cfg.quantile)):
        log.warning("%s", few)
    client_tests = None
    if dataset.test_sites is not None:  # client i is site i: the natural partition without dropped or merged sites
        check_per_site(cfg.partition, cfg.small_sites, cfg.spec.pooled)
        client_tests = [(torch.as_tensor(dataset.test_x[dataset.test_sites == i], dtype=torch.float32, device=device),
                         dataset.test_y[dataset.test_sites == i]) for i in range(len(parts))]
    return Federation(
        cfg=cfg,
        dataset=dataset,
        partition=parts,
        validation=val,
        shards=shards,
        val_shards=ClientShards.from_arrays([dataset.train[v] for v in val], device=device) if has_val else None,
        test_x=torch.as_tensor(dataset.test_x, dtype=torch.float32, device=device),
        template=models[0],
        clients=StackedModels(models, adam, device),
        device=device,
        client_tests=client_tests,
    )
