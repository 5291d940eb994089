"""The container every loader returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class FederatedDataset:
    """A dataset ready for federation: preprocessed training normals and a labelled test set.

    ``train`` holds only normal records, in file order (partitions shuffle it).
    ``test_y`` is 1 for anomalies (the positive class), 0 for normals.
    ``preprocessor`` is what turns raw records of this dataset into model inputs
    (JSON-serialisable through ``to_dict``); vision datasets use a fixed scaling.
    """

    name: str
    kind: str  # "tabular" | "vision"
    train: np.ndarray  # float32 [N, *input_shape]
    test_x: np.ndarray  # float32 [M, *input_shape]
    test_y: np.ndarray  # int64 [M]
    preprocessor: Any = None
    feature_names: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    schema: Any = None  # tabular: the fedgca.data.schema.Schema that read the records (a detector re-reads with it)
    sites: np.ndarray | None = None  # int64 [N]: each training row's site (natural partition), or None
    site_names: list[str] | None = None  # site code -> name
    test_sites: np.ndarray | None = None  # per-site test split: each test row's site (client) code, else None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.shape[1:])

    def natural(self, min_size: int, small_sites: str = "error") -> tuple[list[np.ndarray], list[str]]:
        """The natural partition of the training rows (``data.partition.natural_partition``), computed once per
        dataset and rule and carried: binding counts the sites from it, the federation trains on it."""
        from .partition import NO_SITES, natural_partition

        memo = self.__dict__.setdefault("_natural", {})
        if (min_size, small_sites) not in memo:
            if self.sites is None:
                raise ValueError(NO_SITES)
            memo[(min_size, small_sites)] = natural_partition(self.sites, self.site_names, min_size, small_sites)
        return memo[(min_size, small_sites)]


def split_info(n_train: int, test_y: np.ndarray, files, test_set: str) -> dict[str, Any]:
    """The provenance block every loader puts in ``FederatedDataset.info``: sizes, files and split."""
    n_anomalies = int(np.asarray(test_y).sum())
    return {
        "n_train": int(n_train),
        "n_test": int(len(test_y)),
        "n_anomalies": n_anomalies,
        "n_test_normals": int(len(test_y) - n_anomalies),
        "files": [str(f) for f in files],  # names only: nothing of this machine goes into a run's files
        "test_set": test_set,
    }
