"""Run configuration: SPEC §8 presets, every one overridable."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

# SPEC §4 table: (clients C, K*, upload fraction ρ) per dataset.
DATASET_PRESETS: dict[str, dict] = {
    "academic": {"clients": 10, "k": 10, "rho": 0.5},
    "adult": {"clients": 20, "k": 10, "rho": 0.1},
    "bank": {"clients": 20, "k": 10, "rho": 0.1},
    "credit": {"clients": 50, "k": 20, "rho": 0.1},
    "magic": {"clients": 10, "k": 80, "rho": 0.25},
    "cifar10": {"clients": 20, "k": 20, "rho": 0.1},
    "fashion_mnist": {"clients": 20, "k": 10, "rho": 0.1},
}
METHODS = ("gca", "single", "centralized", "fedavg", "fedprox", "fednova", "dpfedavg")
BACKENDS = ("gmm", "kmeans", "softkmeans", "minibatch")
K_GRID = (10, 20, 40, 80)
SEEDS = (100, 200, 300)


@dataclass
class RunConfig:
    """Everything that determines a run's numbers (the data directory does not)."""

    dataset: str
    method: str = "gca"
    seed: int = 100
    rounds: int = 100
    clients: int | None = None  # None → dataset preset
    k: int | None = None
    rho: float | None = None
    recon_epochs: int = 5
    align_epochs: int = 5
    local_epochs: int = 10  # baselines' per-round budget (GCA's 5 + 5)
    participation: float = 1.0
    batch_size: int = 50
    lr: float = 1e-3
    lr_step: int = 1000  # StepLR, stepped once per local epoch
    lr_gamma: float = 0.1
    backend: str = "gmm"
    weights: str = "inverse"  # "inverse" | "uniform" (ablation)
    gamma: float = 1.0
    w_max: float = 6.0
    weight_eps: float = 1e-6
    partition: str = "iid"  # "iid" | "dirichlet"
    alpha: float = 0.1
    quantile: float = 0.75
    val_fraction: float = 0.0  # paper presets: 0 (then "selected" = final round)
    eval_align_epochs: bool = False  # diagnostic evaluations after each alignment epoch
    fedprox_mu: float = 1e-2
    fedprox_coef: float | None = None  # effective c; None → μ / (2B)
    dp_clip: float = 1.0
    dp_sigma: float = 1.0
    dp_delta: float = 1e-5

    def resolved(self) -> "RunConfig":
        """Fill dataset presets and validate."""
        if self.dataset not in DATASET_PRESETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose from {', '.join(DATASET_PRESETS)}")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose from {', '.join(BACKENDS)}")
        if self.weights not in ("inverse", "uniform"):
            raise ValueError("--weights must be 'inverse' or 'uniform'")
        if self.partition not in ("iid", "dirichlet"):
            raise ValueError("--partition must be 'iid' or 'dirichlet'")
        if not 0 < self.participation <= 1:
            raise ValueError("--participation must be in (0, 1]")
        if not 0 <= self.val_fraction < 1:
            raise ValueError("val_fraction must be in [0, 1)")
        if self.rounds < 1:
            raise ValueError("--rounds must be ≥ 1")
        preset = DATASET_PRESETS[self.dataset]
        return dataclasses.replace(
            self,
            clients=self.clients if self.clients is not None else preset["clients"],
            k=self.k if self.k is not None else preset["k"],
            rho=self.rho if self.rho is not None else preset["rho"],
            fedprox_coef=self.fedprox_coef if self.fedprox_coef is not None else self.fedprox_mu / (2 * self.batch_size),
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(sorted(unknown))}")
        return cls(**d)

    def key(self) -> str:
        """A short stable hash of the resolved config: names a run in sweeps and caches."""
        blob = json.dumps(self.resolved().to_dict(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]
