"""Datasets (SPEC §4): loaders, preprocessing and client partitions.

``load_dataset(name)`` is the one entry point; tabular datasets are handled by
:mod:`fedgca.data.tabular`, vision datasets by :mod:`fedgca.data.vision`
(imported lazily, so tabular use never imports the vision stack).
"""
from __future__ import annotations

from pathlib import Path

from .dataset import FederatedDataset
from .partition import dirichlet_partition, iid_partition
from .paths import DataError, resolve_data_dir

TABULAR = ("academic", "adult", "bank", "credit", "magic")
VISION = ("fashion_mnist", "cifar10")
DATASETS = TABULAR + VISION


def load_dataset(
    name: str, data_dir: Path | str | None = None, *, seed: int = 100, download: bool = True
) -> FederatedDataset:
    """Load dataset ``name`` from ``<data_dir>/<name>/`` (downloading missing files if allowed).

    ``seed`` selects the normal/anomaly class pair for vision datasets (SPEC §4);
    tabular datasets do not depend on it.
    """
    if name in TABULAR:
        from .tabular import load_tabular

        return load_tabular(name, data_dir, download=download)
    if name in VISION:
        from .vision import load_vision

        return load_vision(name, data_dir, seed=seed, download=download)
    raise DataError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


__all__ = [
    "DATASETS",
    "TABULAR",
    "VISION",
    "DataError",
    "FederatedDataset",
    "dirichlet_partition",
    "iid_partition",
    "load_dataset",
    "resolve_data_dir",
]
