"""Hard clustering backends: K-means (scikit-learn's, or the torch engine) and mini-batch K-means (scikit-learn's);
counts are cluster sizes."""
from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans

from fedgca.protocol.clustering.base import HostOrTorch, _as_float64, _Backend
from fedgca.protocol.clustering.kmeans_torch import fit_kmeans_torch


def _fit_hard(backend: "_Backend", model, Z) -> "_Backend":
    """Fit a scikit-learn hard clusterer; counts are the sizes of its clusters on Z."""
    Z = _as_float64(Z)
    backend.model_ = model.fit(Z)
    backend.centroids_ = model.cluster_centers_
    backend.labels_ = model.predict(Z)
    backend.counts_ = np.bincount(backend.labels_, minlength=backend.n_clusters).astype(np.float64)
    return backend


class KMeansBackend(HostOrTorch):
    """K-means with ``n_init`` initialisations (SPEC §1: 10); counts = cluster sizes.

    ``engine``: "sklearn" (scikit-learn's KMeans, on the CPU) or "torch" (``kmeans_torch``: the same algorithm,
    every init in one batched computation on ``device``; the device engine's GCA server uses it:
    ``training.gca``). Both seed the same initialisations from ``random_state``. A torch fit can share one batched
    computation with other runs' fits of the same shape (:meth:`batch_key`, :meth:`fit_batch`), with the numbers
    it gives alone.
    """

    def __init__(self, n_clusters: int, n_init: int = 10, max_iter: int = 300, random_state=None,
                 engine: str = "sklearn", device=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state
        self.engine = engine
        self.device = device

    def _batch_options(self) -> tuple:
        return self.n_clusters, self.n_init, self.max_iter

    @staticmethod
    def _fit_torch(models: list["KMeansBackend"], Zs: list[np.ndarray]) -> list[dict]:
        first = models[0]
        return fit_kmeans_torch(Zs, first.n_clusters, random_states=[m.random_state for m in models],
                                n_init=first.n_init, max_iter=first.max_iter, device=first.device)

    def _keep(self, out: dict) -> None:
        self.centroids_, self.labels_ = out["cluster_centers"], out["labels"]
        self.inertia_, self.n_iter_ = out["inertia"], out["n_iter"]
        self.counts_ = np.bincount(out["labels"], minlength=self.n_clusters).astype(np.float64)

    def _fit_host(self, Z: np.ndarray) -> "KMeansBackend":
        return _fit_hard(self, KMeans(
            n_clusters=self.n_clusters, n_init=self.n_init, max_iter=self.max_iter,
            random_state=self.random_state,
        ), Z)


class MiniBatchKMeansBackend(_Backend):
    """Mini-batch K-means (SPEC §1: batch 4096, 10 initialisations); counts = sizes of predict(Z)."""

    def __init__(
        self, n_clusters: int, batch_size: int = 4096, n_init: int = 10, max_iter: int = 100,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.batch_size = batch_size
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, Z) -> "MiniBatchKMeansBackend":
        return _fit_hard(self, MiniBatchKMeans(
            n_clusters=self.n_clusters, batch_size=self.batch_size, n_init=self.n_init,
            max_iter=self.max_iter, random_state=self.random_state,
        ), Z)
