"""What every clustering backend shares: the broadcast summary and ``summary()``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The clustering backends by name, in the paper's table order: the one list RunConfig's --backend choices, the
# backend factory (``fit.BACKENDS``) and the reports read.
BACKEND_NAMES = ("gmm", "kmeans", "softkmeans", "minibatch")


@dataclass(frozen=True)
class ClusterSummary:
    """What the server broadcasts (SPEC §1 Phase 2): non-empty components only.

    centroids: float32 [K', dz]; counts: float64 [K'], every entry > 0.
    """

    centroids: np.ndarray
    counts: np.ndarray

    @property
    def k(self) -> int:
        """Number of broadcast components K'."""
        return int(len(self.counts))


def _summarise(centroids: np.ndarray, counts: np.ndarray, min_count: float = 0.0) -> ClusterSummary:
    """Keep components with N_k > min_count (SPEC §1: broadcast only non-empty ones)."""
    counts = np.asarray(counts, dtype=np.float64)
    keep = counts > min_count
    return ClusterSummary(
        centroids=np.ascontiguousarray(np.asarray(centroids)[keep], dtype=np.float32),
        counts=np.ascontiguousarray(counts[keep]),
    )


class _Backend:
    """Shared ``summary()`` for every backend (needs ``centroids_`` and ``counts_``)."""

    def batch_key(self, Z) -> tuple | None:
        """Fits with equal keys can share one batched computation (``fit_batch``); None, the default: this one
        cannot (``GMMBackend``'s full-covariance torch engine can)."""
        return None

    def summary(self, min_count: float = 0.0) -> ClusterSummary:
        """Centroids and counts of the components with N_k > ``min_count`` (default: non-empty)."""
        if not hasattr(self, "counts_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(Z) first")
        return _summarise(self.centroids_, self.counts_, min_count)


def _as_float64(Z) -> np.ndarray:
    return np.ascontiguousarray(Z, dtype=np.float64)

