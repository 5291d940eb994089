"""Datasets (SPEC §4): sources, schemas, readers, preprocessing and client partitions.

A :class:`DataSource` is the one way in (``source.load(seed)``; ``DataSource.builtin(name, data_dir)`` for a
built-in, ``source_for`` for a run's dataset, ``load_dataset(name)`` as a shorthand). A built-in tabular dataset is a preset
(:mod:`fedgca.data.presets`: a schema and file names) on the same path as your own data
(:mod:`fedgca.data.source`: a :class:`DataSource` — a file, a directory of per-site files, a
DataFrame or arrays — and its :class:`Schema`); vision datasets are :mod:`fedgca.data.vision`
(imported lazily, so tabular use never imports the vision stack).
"""
from __future__ import annotations

from pathlib import Path

from . import registry
from .dataset import FederatedDataset
from .download import resolve_data_dir
from .errors import DataError
from .inference import infer_schema
from .partition import dirichlet_partition, iid_partition
from .schema import Schema
from .source import DataSource, source_for

# the registry's lists (``data.registry``), by kind
TABULAR = registry.names("tabular")
VISION = registry.names("vision")
DATASETS = registry.names()


def load_dataset(name: str, data_dir: Path | str | None = None, *, seed: int = 100,
                 download: bool = True) -> FederatedDataset:
    """Built-in dataset ``name`` from ``<data_dir>/<name>/`` (downloading missing files if allowed):
    ``DataSource.builtin(name, data_dir).load(seed)``. Own data: ``source.load(seed)``.

    ``seed`` selects the normal/anomaly class pair for vision datasets (SPEC §4); the presets' tabular splits
    do not depend on it.
    """
    if not isinstance(data_dir, (str, Path, type(None))):
        raise TypeError(f"data_dir is the built-in datasets' directory, not {type(data_dir).__name__} "
                        "(own data: source.load(seed))")
    return DataSource.builtin(name, data_dir, download=download).load(seed)


__all__ = [
    "DATASETS",
    "TABULAR",
    "VISION",
    "DataError",
    "DataSource",
    "FederatedDataset",
    "Schema",
    "dirichlet_partition",
    "iid_partition",
    "infer_schema",
    "load_dataset",
    "resolve_data_dir",
    "source_for",
]
