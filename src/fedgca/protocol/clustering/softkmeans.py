"""Soft K-means (our own: scikit-learn has none); counts are soft responsibilities summed."""
from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from fedgca.protocol.clustering.base import HostOrTorch
from fedgca.protocol.clustering.kmeans_torch import fit_soft_kmeans_torch


def _sq_dists(Z: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """||z_n − μ_k||² for all n, k, clipped at 0 against round-off. [n, K]."""
    d = (Z * Z).sum(1)[:, None] - 2.0 * Z @ centroids.T + (centroids * centroids).sum(1)[None, :]
    return np.maximum(d, 0.0)


def soft_responsibilities(Z: np.ndarray, centroids: np.ndarray, temperature: float) -> np.ndarray:
    """r_nk = softmax_k(−||z_n − μ_k||² / T), computed stably (row max subtracted). [n, K]."""
    logits = -_sq_dists(Z, centroids) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    r = np.exp(logits)
    return r / r.sum(axis=1, keepdims=True)


class SoftKMeansBackend(HostOrTorch):
    """Soft K-means (SPEC §1): temperature T, initialised from a K-means fit.

    Iterates r_nk = softmax(−||z_n − μ_k||² / T), N_k = Σ_n r_nk,
    μ_k = Σ_n r_nk z_n / N_k. Convergence: stop when the largest Euclidean
    centroid shift max_k ||μ_k^new − μ_k^old||₂ is below ``tol`` (absolute, in
    code units), or after ``max_iter`` updates. A component whose N_k
    underflows to 0 keeps its previous centroid and is reported with count 0.

    ``engine``: "sklearn" (scikit-learn's K-means init, NumPy updates, on the host) or "torch" (the same, every
    run of one shape in one batch on ``device``: the device engine's; ``kmeans_torch``).

    After ``fit``: ``responsibilities_`` are the r used in the last update, so
    ``counts_ == responsibilities_.sum(0)`` (summing to n) and
    ``centroids_ == responsibilities_.T @ Z / counts_`` hold exactly (the torch engine: to float64 rounding).
    """

    def __init__(
        self, n_clusters: int, temperature: float = 1.0, max_iter: int = 200, tol: float = 1e-3,
        n_init: int = 10, random_state=None, engine: str = "sklearn", device=None,
    ):
        self.n_clusters = n_clusters
        self.temperature = temperature
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state
        self.engine = engine
        self.device = device

    def _batch_options(self) -> tuple:
        return self.n_clusters, self.temperature, self.max_iter, self.tol, self.n_init

    @staticmethod
    def _fit_torch(models: list["SoftKMeansBackend"], Zs: list[np.ndarray]) -> list[dict]:
        first = models[0]
        return fit_soft_kmeans_torch(Zs, first.n_clusters, random_states=[m.random_state for m in models],
                                     temperature=first.temperature, max_iter=first.max_iter, tol=first.tol,
                                     n_init=first.n_init, device=first.device)

    def _keep(self, out: dict) -> None:
        self.centroids_, self.counts_, self.responsibilities_ = out["centroids"], out["counts"], out["responsibilities"]
        self.n_iter_, self.converged_ = out["n_iter"], out["converged"]

    def _fit_host(self, Z: np.ndarray) -> "SoftKMeansBackend":
        init = KMeans(n_clusters=self.n_clusters, n_init=self.n_init, random_state=self.random_state).fit(Z)
        mu = init.cluster_centers_.astype(np.float64)
        self.converged_ = False
        for self.n_iter_ in range(1, max(int(self.max_iter), 1) + 1):  # at least one update
            r, nk, new_mu = self._update(Z, mu)
            shift = float(np.sqrt(((new_mu - mu) ** 2).sum(1)).max())
            mu = new_mu
            if shift < self.tol:
                self.converged_ = True
                break
        self.centroids_, self.counts_, self.responsibilities_ = mu, nk, r
        return self

    def _update(self, Z: np.ndarray, mu: np.ndarray):
        """One soft K-means step: (r, N_k, new μ) from the current μ."""
        r = soft_responsibilities(Z, mu, self.temperature)
        nk = r.sum(0)
        new_mu = mu.copy()
        nonempty = nk > 0
        new_mu[nonempty] = (r.T @ Z)[nonempty] / nk[nonempty, None]
        return r, nk, new_mu
