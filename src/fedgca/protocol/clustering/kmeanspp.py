"""Greedy k-means++ seeding as scikit-learn's ``kmeans_plusplus`` draws it, for many initialisations at once:
the seeding of both torch GMM engines (``gmm``: diagonal, ``gmm_full``: full covariances)."""
from __future__ import annotations

import numpy as np


def _draw_kmeanspp_randomness(n: int, k: int, n_init: int, n_local_trials: int, rs) -> tuple:
    """Pre-draw, init by init, exactly the numbers sklearn's ``kmeans_plusplus`` draws.

    Per init: the first centre (``choice`` with uniform p), then k−1 rounds of
    ``uniform(size=n_local_trials)``. The draws do not depend on the data, so
    drawing them up front keeps sklearn's random stream (a GaussianMixture with
    the same ``random_state`` seeds identically).
    """
    w = np.ones(n, dtype=np.float64)
    first = np.empty(n_init, dtype=np.int64)
    uniforms = np.empty((n_init, max(k - 1, 0), n_local_trials), dtype=np.float64)
    for i in range(n_init):
        first[i] = rs.choice(n, p=w / w.sum())
        uniforms[i] = rs.uniform(size=(max(k - 1, 0), n_local_trials))
    return first, uniforms


class _Distances:
    """Squared distances from chosen rows of X to all of X: through the Gram matrix when the seeding asks for at
    least n rows in all (many inits) and it fits in ``gram_max_bytes``, else row by row (one init: the Gram
    matrix would cost more than every row the seeding asks for)."""

    def __init__(self, X: np.ndarray, rows_asked: int, gram_max_bytes: int = 256 * 2**20):
        self.X = X
        self.sqn = np.einsum("ij,ij->i", X, X)
        n = X.shape[0]
        self.gram = X @ X.T if rows_asked >= n and n * n * X.itemsize <= gram_max_bytes else None

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """rows: int [...] → [..., n] squared distances, clipped at 0 (as sklearn's)."""
        dots = self.gram[rows] if self.gram is not None else self.X[rows] @ self.X.T
        return np.maximum(self.sqn[rows][..., None] + self.sqn - 2.0 * dots, 0.0)


def batched_kmeanspp(X: np.ndarray, k: int, n_init: int, rs, n_local_trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding (sklearn's scheme) for ``n_init`` inits at once → indices int64 [I, k].

    Same algorithm as ``sklearn.cluster.kmeans_plusplus``: first centre uniform;
    each next centre is the best (lowest potential) of 2 + ⌊ln k⌋ candidates
    drawn ∝ D². Uses ``rs`` (a ``RandomState``) exactly as sklearn does, so
    with the same seed it picks the same indices. Vectorised over inits in
    numpy (many small steps: cheaper than torch's per-op threading here).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    trials = n_local_trials or 2 + int(np.log(k))
    first, uniforms = _draw_kmeanspp_randomness(n, k, n_init, trials, rs)
    dist = _Distances(X, rows_asked=n_init * (1 + (k - 1) * trials))
    idx = np.empty((n_init, k), dtype=np.int64)
    idx[:, 0] = first
    closest = dist(first)  # [I, n]
    rows = np.arange(n_init)
    for c in range(1, k):
        cum, targets = np.cumsum(closest, axis=1), uniforms[:, c - 1] * closest.sum(1)[:, None]
        cand = np.stack([np.searchsorted(cum[i], targets[i]) for i in rows]).clip(max=n - 1)  # [I, L]
        cand_d = np.minimum(closest[:, None, :], dist(cand))  # [I, L, n]
        best = cand_d.sum(2).argmin(1)
        closest, idx[:, c] = cand_d[rows, best], cand[rows, best]
    return idx
