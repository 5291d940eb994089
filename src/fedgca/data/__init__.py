"""Datasets (SPEC §4): sources, schemas, readers, preprocessing and client partitions.

``load_dataset(name_or_source)`` is the one entry point. A built-in tabular dataset is a preset
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
from .source import DataSource

# the registry's lists (``data.registry``), by kind
TABULAR = registry.names("tabular")
VISION = registry.names("vision")
DATASETS = registry.names()


def load_dataset(
    name: str, data_dir: Path | str | DataSource | None = None, *, seed: int = 100, download: bool = True,
    drop_sites_below: int | None = None, stats_sigma: float | None = None,
) -> FederatedDataset:
    """Load dataset ``name``: a preset from ``<data_dir>/<name>/`` (downloading missing files if allowed),
    or own data when ``data_dir`` is a :class:`DataSource` (whose label must be ``name``).

    ``seed`` selects the normal/anomaly class pair for vision datasets (SPEC §4) and draws own
    data's balanced test split; the presets' tabular splits do not depend on it.
    """
    if isinstance(data_dir, DataSource):
        if data_dir.label != name:
            raise DataError(f"the run's dataset is {name!r} but the data source is {data_dir.label!r}")
        return data_dir.load(seed, drop_sites_below=drop_sites_below, stats_sigma=stats_sigma)
    if stats_sigma is not None:
        raise DataError(f"--dp-stats-sigma releases per-site statistics of own data; built-in {name!r} is encoded "
                        "from its pooled training rows (ε does not cover that encoding: summary.json's dp.not_covered)")
    if registry.get(name).kind == "tabular":
        from .presets import load_tabular

        return load_tabular(name, data_dir, download=download, seed=seed)
    from .vision import load_vision

    return load_vision(name, data_dir, seed=seed, download=download)


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
]
