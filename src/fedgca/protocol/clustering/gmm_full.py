"""Full-covariance Gaussian-mixture EM in torch, batched over initialisations and over runs.

scikit-learn's ``GaussianMixture(covariance_type="full", init_params="k-means++")`` step for step — the same
k-means++ seeding from the same random stream (``kmeanspp.batched_kmeanspp``), the initialisation from one-hot
responsibilities, M-step, precision Cholesky factors, stopping rule and best lower bound — on any torch device.
It is the GCA server's clustering under the device engine: the tabular preset's GMM (SPEC §1: full, K up to 80)
took a fifth of a magic GCA round on a CPU core, host work that a GPU run would otherwise wait for every round.

A batch holds R runs' codes of one shape, each with its own random_state and means_init. Every operation acts
on a run's slice alone (batched matrix products, per-matrix Cholesky and triangular solves, reductions over a
run's own rows or components), and a run that has converged is frozen by ``where``, not dropped from the batch:
so a run's numbers do not depend on which other runs share its batch (``tests/test_clustering.py``). The host
reads the batch's progress once every ``CHECK_EVERY`` EM iterations, and the winning inits' results at the end.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.utils import check_random_state

from fedgca.devices import to_numpy
from fedgca.protocol.clustering.kmeanspp import batched_kmeanspp

_EPS10 = 10 * np.finfo(np.float64).eps  # sklearn adds 10·eps to every N_k
CHECK_EVERY = 4  # EM iterations between two reads of "is any run still iterating?" (results do not depend on it)
# The working tensors of one batch: on CPU cores a batch larger than the caches is bound by memory traffic and
# page faults (benchmarks/bench_gmm_full.py: 8 magic-sized runs in one batch ran at 0.28× the speed of
# scikit-learn's fits one by one, a run alone at 1.2–1.4×), so a CPU batches only what stays small; a GPU is bound
# by launches: batch widely.
BATCH_BYTES = {"cpu": 128 << 20, "other": 4 << 30}
ILL_DEFINED = ("Fitting the mixture model failed because some components have ill-defined empirical covariance "
               "(for instance caused by singleton or collapsed samples). Try to decrease the number of "
               "components, increase reg_covar, or scale the input data.")  # scikit-learn's words


def _precision_cholesky(covs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sklearn's ``_compute_precision_cholesky`` (full): P = (L⁻¹)ᵀ with LLᵀ = Σ, for [..., d, d] → (P, ok [...])."""
    chol, info = torch.linalg.cholesky_ex(covs)
    eye = torch.eye(covs.shape[-1], dtype=covs.dtype, device=covs.device).expand_as(covs)
    return torch.linalg.solve_triangular(chol, eye, upper=False).mT, info == 0


def _e_step(X: torch.Tensor, weights, means, prec_chol):
    """Per run and init: the mean log-likelihood [R, I] (sklearn's lower bound) and log responsibilities
    [R, n, I, K], from sklearn's ``_estimate_log_gaussian_prob`` (y = X P_k − μ_k P_k)."""
    R, n, d = X.shape
    _, I, K, _ = means.shape
    xp = torch.bmm(X, prec_chol.permute(0, 3, 1, 2, 4).reshape(R, d, I * K * d)).view(R, n, I, K, d)
    mp = (means.unsqueeze(-2) @ prec_chol).squeeze(-2)  # [R, I, K, d]
    y = xp.sub_(mp.unsqueeze(1))
    log_det = torch.log(torch.diagonal(prec_chol, dim1=-2, dim2=-1)).sum(-1)  # [R, I, K]
    wlp = (y.mul_(y).sum(-1).add_(d * math.log(2 * math.pi)).mul_(-0.5)
           .add_((log_det + torch.log(weights)).unsqueeze(1)))
    log_norm = torch.logsumexp(wlp, dim=-1)  # [R, n, I]
    return log_norm.mean(1), wlp.sub_(log_norm.unsqueeze(-1))


def _m_step(X: torch.Tensor, log_resp: torch.Tensor, reg_covar: float):
    """sklearn's ``_estimate_gaussian_parameters`` (full), batched over runs and inits; consumes ``log_resp``."""
    R, n, d = X.shape
    _, _, I, K = log_resp.shape
    resp = log_resp.exp_()
    nk = resp.sum(1) + _EPS10  # [R, I, K]
    means = torch.bmm(resp.view(R, n, I * K).mT, X).view(R, I, K, d) / nk.unsqueeze(-1)
    diff = X[:, None, None] - means.unsqueeze(-2)  # [R, I, K, n, d]
    weighted = diff * resp.permute(0, 2, 3, 1).unsqueeze(-1)
    covs = (weighted.mT @ diff) / nk[..., None, None]
    covs.diagonal(dim1=-2, dim2=-1).add_(reg_covar)
    return nk / nk.sum(-1, keepdim=True), means, covs


def _initial_state(X: torch.Tensor, idx: torch.Tensor, reg_covar: float, means_init: list):
    """sklearn's ``_initialize`` from one-hot k-means++ responsibilities: N_k = 1 + 10·eps, means X[idx] / N_k,
    covariances the outer product of the one row's deviation (the other rows' zero terms add nothing) + reg;
    weights N_k / n, not normalised (as sklearn). A run's ``means_init`` replaces its means only."""
    R, n, d = X.shape
    nk = 1.0 + _EPS10
    rows = X[torch.arange(R, device=X.device)[:, None, None], idx]  # [R, I, K, d]
    means = rows / nk
    dev = rows - means
    covs = dev.unsqueeze(-1) * dev.unsqueeze(-2) / nk
    covs.diagonal(dim1=-2, dim2=-1).add_(reg_covar)
    weights = torch.full(idx.shape, nk / n, dtype=X.dtype, device=X.device)
    for r, m in enumerate(means_init):
        if m is not None:
            means[r] = torch.as_tensor(np.asarray(m, dtype=np.float64), device=X.device)
    return weights, means, covs


def fit_full_gmm_torch(
    Xs: list[np.ndarray], n_components: int, *, random_states: list, reg_covar: float = 1e-6, n_init: int = 1,
    max_iter: int = 200, tol: float = 1e-3, means_inits: list | None = None, device=None,
    max_batch_bytes: int | None = None,
) -> list:
    """Fit one full-covariance GMM per array of ``Xs`` (all [n, d]), every init of every run in one batch.

    Each run keeps its own ``random_states[r]`` (its k-means++ seeding, drawn as sklearn draws it) and
    ``means_inits[r]``; the init with the highest final lower bound wins (first on ties). Runs are fitted in
    batches whose largest working tensors ([runs, inits, K, n, d] float64) stay within ``max_batch_bytes``
    (default: ``BATCH_BYTES`` for the device's kind).
    Returns, per run, a dict (weights, means, covariances, lower_bound, n_iter, converged, resp_counts Σ_n γ_nk
    under the winning model, lower_bounds per init) or, where every init's covariances became ill-defined, the
    ``ValueError`` scikit-learn would raise (the other runs are unaffected).
    """
    means_inits = list(means_inits) if means_inits is not None else [None] * len(Xs)
    n, d = np.shape(Xs[0])
    if n < n_components:
        raise ValueError(f"Expected n_samples >= n_components, got {n} < {n_components}")
    budget = max_batch_bytes or BATCH_BYTES["cpu" if torch.device(device or "cpu").type == "cpu" else "other"]
    step = int(max(1, budget // (3 * 8 * n * n_init * n_components * d)))
    out = []
    for a in range(0, len(Xs), step):
        X = torch.as_tensor(np.stack([np.ascontiguousarray(x, dtype=np.float64) for x in Xs[a:a + step]]),
                            device=device)
        idx = torch.as_tensor(np.stack([batched_kmeanspp(x, n_components, n_init, check_random_state(rs))
                                        for x, rs in zip(Xs[a:a + step], random_states[a:a + step], strict=True)]),
                              device=X.device)
        out += _em(X, idx, means_inits[a:a + step], reg_covar, max_iter, tol)
    return out


def _em(X: torch.Tensor, idx: torch.Tensor, means_inits: list, reg_covar: float, max_iter: int, tol: float) -> list:
    """EM for a batch of runs (X [R, n, d], k-means++ rows idx [R, I, K]) until every init of every run has
    stopped (sklearn's rule: |Δ lower bound| < tol, or max_iter); a stopped init is frozen by ``where``."""
    R, n_init = idx.shape[:2]
    weights, means, covs = _initial_state(X, idx, reg_covar, means_inits)
    prec, ok = _precision_cholesky(covs)
    lb = torch.full((R, n_init), -math.inf, dtype=X.dtype, device=X.device)
    n_iter = torch.zeros((R, n_init), dtype=torch.long, device=X.device)
    converged = torch.zeros((R, n_init), dtype=torch.bool, device=X.device)
    failed = ~ok.all(-1)
    active = ~failed
    for it in range(max_iter):
        new_lb, log_resp = _e_step(X, weights, means, prec)
        new_w, new_m, new_c = _m_step(X, log_resp, reg_covar)
        new_p, ok = _precision_cholesky(new_c)
        bad = ~torch.isfinite(new_lb) | ~ok.all(-1)
        done = (new_lb - lb).abs() < tol
        a = active
        weights = torch.where(a[..., None], new_w, weights)
        means = torch.where(a[..., None, None], new_m, means)
        covs = torch.where(a[..., None, None, None], new_c, covs)
        prec = torch.where(a[..., None, None, None], new_p, prec)
        lb = torch.where(a, new_lb, lb)
        n_iter = n_iter + a.long()
        converged = torch.where(a, done & ~bad, converged)
        failed = torch.where(a, bad, failed)
        active = a & ~(done | bad)
        if (it + 1) % CHECK_EVERY == 0 and not bool(active.any()):
            break
    lb = lb.masked_fill(failed, -math.inf)
    best = lb.argmax(1)  # first maximum, like sklearn's strict ">" over inits
    pick = torch.arange(R, device=X.device), best
    _, log_resp = _e_step(X, weights[pick].unsqueeze(1), means[pick].unsqueeze(1), prec[pick].unsqueeze(1))
    host = {"weights": weights[pick], "means": means[pick], "covariances": covs[pick], "lower_bound": lb[pick],
            "n_iter": n_iter[pick], "converged": converged[pick], "failed": failed[pick],
            "resp_counts": log_resp[:, :, 0].exp().sum(1), "lower_bounds": lb}
    host = {k: to_numpy(v) for k, v in host.items()}
    out = []
    for r in range(R):
        if host["failed"][r]:
            out.append(ValueError(ILL_DEFINED))
            continue
        out.append({"weights": host["weights"][r], "means": host["means"][r], "covariances": host["covariances"][r],
                    "lower_bound": float(host["lower_bound"][r]), "n_iter": int(host["n_iter"][r]),
                    "converged": bool(host["converged"][r]), "resp_counts": host["resp_counts"][r],
                    "lower_bounds": host["lower_bounds"][r]})
    return out


__all__ = ["BATCH_BYTES", "CHECK_EVERY", "fit_full_gmm_torch"]
