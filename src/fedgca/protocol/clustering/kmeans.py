"""Hard clustering backends (scikit-learn): K-means and mini-batch K-means; counts are cluster sizes."""
from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans

from fedgca.protocol.clustering.base import _as_float64, _Backend


def _fit_hard(backend: "_Backend", model, Z) -> "_Backend":
    """Fit a scikit-learn hard clusterer; counts are the sizes of its clusters on Z."""
    Z = _as_float64(Z)
    backend.model_ = model.fit(Z)
    backend.centroids_ = model.cluster_centers_
    backend.labels_ = model.predict(Z)
    backend.counts_ = np.bincount(backend.labels_, minlength=backend.n_clusters).astype(np.float64)
    return backend


class KMeansBackend(_Backend):
    """K-means with ``n_init`` initialisations (SPEC §1: 10); counts = cluster sizes."""

    def __init__(self, n_clusters: int, n_init: int = 10, max_iter: int = 300, random_state=None):
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, Z) -> "KMeansBackend":
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
