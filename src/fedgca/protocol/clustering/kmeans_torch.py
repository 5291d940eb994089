"""K-means (Lloyd) in torch, batched over initialisations and over runs.

scikit-learn's ``KMeans(algorithm="lloyd", init="k-means++")`` step for step — the codes centred on their mean, the
tolerance from their variance, the k-means++ seeding from the same random stream (``kmeanspp.batched_kmeanspp``),
the E-step (argmin of ‖c‖² − 2x·c), the M-step (sums times the reciprocal of the counts), empty clusters moved to
the codes farthest from their centres, the stopping rules (labels unchanged; else the summed squared centre shift
within the tolerance), the last E-step, the inertia, and the choice of the best init (lower inertia and not the
same clustering) — on any torch device. It is the K-means backend's fit under the device engine, where the
server would otherwise fit on the host every round while the device waits (230 ms a fit at magic's K = 80).

Every operation acts on one init of one run alone and a stopped init is frozen by ``where``, so a run's numbers
do not depend on which runs share its batch (``tests/test_clustering.py``). The host reads the batch's progress
once every ``CHECK_EVERY`` iterations, and the labels and inertias at the end (the best init is chosen there).
Sums run in another order than scikit-learn's chunked loops: centres equal to float64 rounding while the labels
agree, which they do but for codes equidistant to the last bit.
"""
from __future__ import annotations

import numpy as np
import torch
from sklearn.utils import check_random_state

from fedgca.devices import to_numpy
from fedgca.protocol.clustering.gmm_full import BATCH_BYTES
from fedgca.protocol.clustering.kmeanspp import batched_kmeanspp

CHECK_EVERY = 4  # Lloyd iterations between two reads of "is any init still iterating?" (results do not depend on it)


def fit_kmeans_torch(
    Xs: list[np.ndarray], n_clusters: int, *, random_states: list, n_init: int = 10, max_iter: int = 300,
    tol: float = 1e-4, device=None, max_batch_bytes: int | None = None,
) -> list[dict]:
    """Fit one K-means per array of ``Xs`` (all [n, d]), every init of every run in one batch.

    Each run keeps its own ``random_states[r]``. Batches of runs keep their largest working tensors ([runs, inits,
    n, K] float64) within ``max_batch_bytes`` (default: ``gmm_full.BATCH_BYTES`` for the device's kind).
    Returns per run: cluster_centers (the codes' units), labels of the winning init, inertia, n_iter.
    """
    n, d = np.shape(Xs[0])
    if n < n_clusters:
        raise ValueError(f"n_samples={n} should be >= n_clusters={n_clusters}.")  # scikit-learn's words
    budget = max_batch_bytes or BATCH_BYTES["cpu" if torch.device(device or "cpu").type == "cpu" else "other"]
    step = int(max(1, budget // (4 * 8 * n * n_init * max(n_clusters, d))))
    out = []
    for a in range(0, len(Xs), step):
        originals = [np.ascontiguousarray(x, dtype=np.float64) for x in Xs[a:a + step]]
        offsets = [x.mean(axis=0) for x in originals]  # scikit-learn centres the codes for accurate distances
        centred = [x - m for x, m in zip(originals, offsets)]
        tols = [float(np.mean(np.var(x, axis=0)) * tol) for x in originals]
        idx = np.stack([batched_kmeanspp(x, n_clusters, n_init, check_random_state(rs))
                        for x, rs in zip(centred, random_states[a:a + step], strict=True)])
        X = torch.as_tensor(np.stack(centred), device=device)
        centres = X[torch.arange(len(centred), device=X.device)[:, None, None], torch.as_tensor(idx, device=X.device)]
        labels, inertia, centres, n_iter = _lloyd(X, centres, torch.as_tensor(tols, device=X.device), max_iter)
        host = [to_numpy(t) for t in (labels, inertia, centres, n_iter)]
        for r, offset in enumerate(offsets):
            best = _best_init(host[0][r], host[1][r], n_clusters)
            out.append({"cluster_centers": host[2][r, best] + offset, "labels": host[0][r, best],
                        "inertia": float(host[1][r, best]), "n_iter": int(host[3][r, best])})
    return out


def fit_soft_kmeans_torch(
    Xs: list[np.ndarray], n_clusters: int, *, random_states: list, temperature: float = 1.0, max_iter: int = 200,
    tol: float = 1e-3, n_init: int = 10, device=None,
) -> list[dict]:
    """``SoftKMeansBackend``'s fit for every array of ``Xs`` (all [n, d]) as one batch: K-means with ``n_init``
    inits (``fit_kmeans_torch``), then the soft updates r = softmax(−‖z − μ‖² / T), N_k = Σ r, μ = rᵀZ / N_k
    until the largest centre shift is below ``tol`` (at least one update; an empty component keeps its centre),
    in ``SoftKMeansBackend._update``'s formulas. Per run: centroids, counts, responsibilities, n_iter, converged."""
    init = fit_kmeans_torch(Xs, n_clusters, random_states=random_states, n_init=n_init, device=device)
    X = torch.as_tensor(np.stack([np.ascontiguousarray(x, dtype=np.float64) for x in Xs]), device=device)
    mu = torch.as_tensor(np.stack([o["cluster_centers"] for o in init]), device=X.device)
    R, n = X.shape[:2]
    resp = torch.zeros((R, n, n_clusters), dtype=X.dtype, device=X.device)
    counts = torch.zeros((R, n_clusters), dtype=X.dtype, device=X.device)
    n_iter = torch.zeros(R, dtype=torch.long, device=X.device)
    converged = torch.zeros(R, dtype=torch.bool, device=X.device)
    active = torch.ones(R, dtype=torch.bool, device=X.device)
    x2 = (X * X).sum(-1, keepdim=True)
    for it in range(max(int(max_iter), 1)):
        dist = (x2 - 2.0 * X @ mu.mT + (mu * mu).sum(-1).unsqueeze(1)).clamp_min(0.0)
        logits = -dist / temperature
        r = (logits - logits.amax(-1, keepdim=True)).exp()
        r = r / r.sum(-1, keepdim=True)
        nk = r.sum(1)  # [R, K]
        new_mu = torch.where((nk > 0).unsqueeze(-1), (r.mT @ X) / nk.unsqueeze(-1), mu)
        shift = ((new_mu - mu) ** 2).sum(-1).sqrt().amax(-1)
        a = active
        mu = torch.where(a[:, None, None], new_mu, mu)
        resp = torch.where(a[:, None, None], r, resp)
        counts = torch.where(a[:, None], nk, counts)
        n_iter = n_iter + a.long()
        converged = torch.where(a, shift < tol, converged)
        active = a & ~(shift < tol)
        if (it + 1) % CHECK_EVERY == 0 and not bool(active.any()):
            break
    host = [to_numpy(t) for t in (mu, counts, resp, n_iter, converged)]
    return [{"centroids": host[0][r], "counts": host[1][r], "responsibilities": host[2][r],
             "n_iter": int(host[3][r]), "converged": bool(host[4][r])} for r in range(R)]


def _e_step(X: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Labels [R, I, n]: argmin_k ‖c_k‖² − 2 x·c_k (first of equal), as scikit-learn's Lloyd iteration."""
    c2 = (centres * centres).sum(-1)  # [R, I, K]
    dots = torch.einsum("rnd,rikd->rink", X, centres)
    return (c2.unsqueeze(2) - 2.0 * dots).min(-1).indices  # the first minimum too; 2× argmin's speed on a CPU


def _m_step(X: torch.Tensor, centres: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """New centres from ``labels``: each cluster's sum times the reciprocal of its size; an empty cluster takes
    the code farthest from its own centre (the j-th empty the j-th farthest), which leaves its old cluster
    (``_relocate_empty_clusters_dense``); one still empty (every code on its centre) sits on the largest."""
    R, I, K, d = centres.shape
    onehot = torch.nn.functional.one_hot(labels, K).to(X.dtype)  # [R, I, n, K]
    weight = onehot.sum(2)  # [R, I, K]
    sums = onehot.mT @ X.unsqueeze(1)  # [R, I, K, d]
    own = torch.gather(centres, 2, labels.unsqueeze(-1).expand(-1, -1, -1, d))  # each code's centre
    far_dist = ((X.unsqueeze(1) - own) ** 2).sum(-1)  # [R, I, n]
    empty = (weight == 0) & (far_dist.amax(-1, keepdim=True) > 0)
    far = far_dist.topk(min(K, far_dist.shape[-1]), dim=-1).indices  # farthest first
    rank = (empty.cumsum(-1) - 1).clamp(min=0, max=far.shape[-1] - 1)
    far_idx = torch.gather(far, 2, rank)  # [R, I, K]: the code an empty cluster takes
    x_far = torch.gather(X.unsqueeze(1).expand(-1, I, -1, -1), 2, far_idx.unsqueeze(-1).expand(-1, -1, -1, d))
    old = torch.gather(labels, 2, far_idx)
    moved = empty.to(X.dtype)
    sums = torch.where(empty.unsqueeze(-1), x_far, sums)
    sums = sums.scatter_add(2, old.unsqueeze(-1).expand(-1, -1, -1, d), -(x_far * moved.unsqueeze(-1)))
    weight = torch.where(empty, 1.0, weight).scatter_add(2, old, -moved)
    largest = torch.gather(sums, 2, weight.argmax(-1)[..., None, None].expand(-1, -1, 1, d))
    largest = largest * (1.0 / weight.amax(-1))[..., None, None]
    return torch.where((weight > 0).unsqueeze(-1), sums * (1.0 / weight).unsqueeze(-1), largest)


def _lloyd(X: torch.Tensor, centres: torch.Tensor, tol: torch.Tensor, max_iter: int):
    """Lloyd iterations for a batch of runs (X [R, n, d], centres [R, I, K, d], tol [R]) until every init has
    stopped; then the labels of the final centres (unless the labels stopped changing), the inertias, n_iter."""
    R, I = centres.shape[:2]
    labels_old = torch.full((R, I, X.shape[1]), -1, dtype=torch.long, device=X.device)
    labels = labels_old
    n_iter = torch.zeros((R, I), dtype=torch.long, device=X.device)
    strict = torch.zeros((R, I), dtype=torch.bool, device=X.device)
    active = torch.ones((R, I), dtype=torch.bool, device=X.device)
    for it in range(max_iter):
        new_labels = _e_step(X, centres)
        new_centres = _m_step(X, centres, new_labels)
        same = (new_labels == labels_old).all(-1)
        shift = ((new_centres - centres) ** 2).sum(-1).sqrt()  # scikit-learn's _center_shift, then squared
        within = (shift ** 2).sum(-1) <= tol[:, None]
        a = active
        centres = torch.where(a[..., None, None], new_centres, centres)
        labels = torch.where(a[..., None], new_labels, labels)
        n_iter = n_iter + a.long()
        strict = torch.where(a, same, strict)
        labels_old = labels
        active = a & ~same & ~within
        if (it + 1) % CHECK_EVERY == 0 and not bool(active.any()):
            break
    labels = torch.where(strict[..., None], labels, _e_step(X, centres))
    own = torch.gather(centres, 2, labels.unsqueeze(-1).expand(-1, -1, -1, X.shape[-1]))
    inertia = ((X.unsqueeze(1) - own) ** 2).sum((-1, -2))
    return labels, inertia, centres, n_iter


def _best_init(labels: np.ndarray, inertia: np.ndarray, k: int) -> int:
    """scikit-learn's choice over inits, in order: a later init wins with a lower inertia, unless its clustering
    is the best one's with the labels permuted (rounding can make the same clustering slightly better)."""
    best = 0
    for i in range(1, len(inertia)):
        if inertia[i] < inertia[best] and not _same_clustering(labels[i], labels[best], k):
            best = i
    return best


def _same_clustering(a: np.ndarray, b: np.ndarray, k: int) -> bool:
    """scikit-learn's ``_is_same_clustering``: every cluster of ``a`` maps to one cluster of ``b``."""
    mapping = np.full(k, -1, dtype=np.int64)
    mapping[a] = b  # the last code of each cluster of a sets its image; then every code must agree
    return bool((mapping[a] == b).all())


__all__ = ["CHECK_EVERY", "fit_kmeans_torch", "fit_soft_kmeans_torch"]
