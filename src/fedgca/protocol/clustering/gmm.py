"""Gaussian mixture backend: scikit-learn's GaussianMixture, or a batched EM in torch that reproduces
scikit-learn's algorithm step for step (k-means++ seeding and random stream, M-step, convergence rule, best
lower bound kept) and runs every initialisation at once: diagonal covariances here, full ones in
``gmm_full``."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.mixture import GaussianMixture
from sklearn.utils import check_random_state

from fedgca.devices import to_numpy
from fedgca.protocol.clustering.base import HostOrTorch, _as_float64
from fedgca.protocol.clustering.gmm_full import _EPS10, fit_full_gmm_torch
from fedgca.protocol.clustering.kmeanspp import batched_kmeanspp

TORCH_COVARIANCES = ("diag", "full")  # what the torch engines fit (gmm: diag; gmm_full: full)


@dataclass
class _DiagState:
    """Parameters of a batch of diagonal GMMs: weights [I,K], means and covariances [I,K,d]."""

    weights: torch.Tensor
    means: torch.Tensor
    covs: torch.Tensor

    def take(self, sel: torch.Tensor) -> "_DiagState":
        return _DiagState(self.weights[sel], self.means[sel], self.covs[sel])

    def put(self, sel: torch.Tensor, other: "_DiagState") -> None:
        self.weights[sel], self.means[sel], self.covs[sel] = other.weights, other.means, other.covs


def _initial_state(X, idx, reg_covar, means_init=None) -> _DiagState:
    """sklearn's ``_initialize`` from one-hot k-means++ responsibilities (weights = N_k / n, unnormalised)."""
    nk = 1.0 + _EPS10
    means = X[idx] / nk
    covs = (X * X)[idx] / nk - means**2 + reg_covar
    weights = torch.full(idx.shape, nk / X.shape[0], dtype=X.dtype, device=X.device)
    if means_init is not None:
        means = torch.as_tensor(means_init, dtype=X.dtype, device=X.device).expand_as(means).clone()
    return _DiagState(weights, means, covs)


def _log_density_params(s: _DiagState):
    """B [I·K, 2d] and bias [I·K] with A @ Bᵀ + bias = log w_k + log N(x | μ_k, diag σ_k²), A = [X², X].

    The diag log-density is sklearn's expansion −½(d·log 2π + Σ μ²p − 2 x·(μp) + x²·p) + Σ log p^½,
    p = 1/σ², folded into one GEMM with a bias so that the [n, I, K] tensor is built in one pass.
    """
    I, K, d = s.means.shape
    prec_chol = 1.0 / torch.sqrt(s.covs)
    prec = prec_chol**2
    B = torch.cat([-0.5 * prec, s.means * prec], dim=-1).reshape(I * K, 2 * d)
    bias = (
        -0.5 * (d * math.log(2 * math.pi) + (s.means**2 * prec).sum(-1))
        + torch.log(prec_chol).sum(-1)
        + torch.log(s.weights)
    )
    return B, bias.reshape(I * K)


def _e_step(A: torch.Tensor, s: _DiagState):
    """Mean log-likelihood per init [I] (sklearn's lower bound) and log responsibilities [n, I, K]."""
    I, K, _ = s.means.shape
    B, bias = _log_density_params(s)
    wlp = torch.addmm(bias, A, B.T).view(-1, I, K)
    log_norm = torch.logsumexp(wlp, dim=-1)  # [n, I]
    return log_norm.mean(0), wlp.sub_(log_norm.unsqueeze(-1))


def _m_step(A: torch.Tensor, log_resp: torch.Tensor, reg_covar: float) -> _DiagState:
    """sklearn's ``_estimate_gaussian_parameters`` for diag covariances, batched over inits.

    Consumes ``log_resp`` (exponentiated in place).
    """
    n, I, K = log_resp.shape
    d = A.shape[1] // 2
    resp = log_resp.exp_()
    nk = resp.sum(0) + _EPS10  # [I, K]
    sums = (resp.reshape(n, I * K).T @ A).div_(nk.reshape(I * K, 1)).view(I, K, 2 * d)
    means = sums[..., d:].contiguous()
    covs = sums[..., :d] - means**2 + reg_covar
    return _DiagState(nk / nk.sum(-1, keepdim=True), means, covs)


def _em_chunk(A, s: _DiagState, reg_covar, max_iter, tol):
    """Run EM on a batch of inits, each until |Δ lower bound| < tol or max_iter (sklearn's rule).

    Returns (final state, lower bound [I], n_iter [I], converged [I], failed [I]);
    an init whose covariances become non-positive or non-finite is marked failed
    (sklearn would raise for the whole fit; here the other inits carry on).
    """
    I = s.means.shape[0]
    dev = s.means.device
    lb = torch.full((I,), -math.inf, dtype=A.dtype, device=dev)
    n_iter = torch.zeros(I, dtype=torch.long, device=dev)
    converged = torch.zeros(I, dtype=torch.bool, device=dev)
    failed = ~torch.isfinite(s.covs).all(-1).all(-1) | (s.covs <= 0).any(-1).any(-1)
    active = ~failed
    for _ in range(max_iter):
        sel = active.nonzero().squeeze(1)
        if sel.numel() == 0:
            break
        new_lb, log_resp = _e_step(A, s.take(sel))
        new_s = _m_step(A, log_resp, reg_covar)
        bad = ~torch.isfinite(new_lb) | (new_s.covs <= 0).any(-1).any(-1) | ~torch.isfinite(new_s.covs).all(-1).all(-1)
        done = (new_lb - lb[sel]).abs() < tol
        s.put(sel, new_s)
        lb[sel], n_iter[sel] = new_lb, n_iter[sel] + 1
        converged[sel] = done & ~bad
        failed[sel] = bad
        active[sel] = ~(done | bad)
    return s, lb, n_iter, converged, failed


def _chunk_size(n: int, k: int, d: int, n_init: int, max_batch_bytes: int) -> int:
    """Inits per chunk so that one chunk's working tensors stay within ``max_batch_bytes``.

    The 128 MiB default keeps each [n, I, K] / [I, K, 2d] float64 tensor small
    enough to be reused by the allocator (much larger ones are mmapped and
    page-faulted afresh on every EM step); measured fastest on CPU for
    600 × 784 codes, K = 10 and 80.
    """
    per_init = 8 * (4 * n * k + 8 * k * d)  # float64 log-probs/resp and parameter/sufficient-stat tensors
    return int(max(1, min(n_init, max_batch_bytes // per_init)))


def fit_diag_gmm_torch(
    X: np.ndarray, n_components: int, *, reg_covar: float = 1e-6, n_init: int = 1, max_iter: int = 200,
    tol: float = 1e-3, random_state=None, means_init=None, device=None, max_batch_bytes: int = 128 * 2**20,
) -> dict:
    """Batched diagonal-covariance EM over all ``n_init`` initialisations (SPEC §1, vision preset).

    Reproduces ``GaussianMixture(covariance_type="diag", init_params="k-means++")``
    in float64: identical seeding (and use of ``random_state``), M-step and
    stopping rule; the init with the highest final lower bound wins (first on
    ties). Inits are processed in chunks bounded by ``max_batch_bytes``.
    Returns a dict: weights, means, covariances (numpy), lower_bound, n_iter,
    converged, resp_counts (Σ_n γ_nk under the best model) and lower_bounds
    (per init; −inf for an init whose covariances became ill-defined — sklearn
    would abort the whole fit there, here the other inits carry on).
    """
    rs = check_random_state(random_state)
    Xt = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float64), device=device)
    n, d = Xt.shape
    idx = torch.as_tensor(batched_kmeanspp(X, n_components, n_init, rs), device=Xt.device)
    A = torch.cat([Xt * Xt, Xt], dim=1)
    step = _chunk_size(n, n_components, d, n_init, max_batch_bytes)
    best, lower_bounds = None, []
    for a in range(0, n_init, step):
        state, lb, n_iter, converged, failed = _em_chunk(
            A, _initial_state(Xt, idx[a : a + step], reg_covar, means_init), reg_covar, max_iter, tol
        )
        lb = lb.masked_fill(failed, -math.inf)
        lower_bounds.append(lb)
        j = int(lb.argmax())  # first maximum, like sklearn's strict ">" over inits
        if not bool(failed[j]) and (best is None or float(lb[j]) > best["lower_bound"]):
            best = {"state": state.take(torch.tensor([j], device=lb.device)), "lower_bound": float(lb[j]),
                    "n_iter": int(n_iter[j]), "converged": bool(converged[j])}
    if best is None:
        raise ValueError(
            "Fitting the mixture model failed because every initialisation has ill-defined "
            "covariances; increase reg_covar or decrease the number of components."
        )
    return _result(A, best, torch.cat(lower_bounds))


def _result(A: torch.Tensor, best: dict, lower_bounds: torch.Tensor) -> dict:
    """Numpy view of the winning init, with its soft counts Σ_n γ_nk on the fitted data."""
    s = best.pop("state")
    _, log_resp = _e_step(A, s)
    return {
        **best,
        "weights": to_numpy(s.weights[0]),
        "means": to_numpy(s.means[0]),
        "covariances": to_numpy(s.covs[0]),
        "resp_counts": to_numpy(log_resp[:, 0].exp().sum(0)),
        "lower_bounds": to_numpy(lower_bounds),
    }


class GMMBackend(HostOrTorch):
    """Gaussian mixture with k-means++-initialised means (SPEC §1, primary backend).

    ``centroids_`` = means; ``counts_`` = soft counts N_k = Σ_n γ_nk of the
    fitted model on Z (they sum to n). Presets (see :data:`PRESETS`): tabular
    full / reg_covar 1e-6 / 1 init; vision diag / 0.1 / 100 inits. EM: at most
    ``max_iter`` iterations, stop when the change in the mean log-likelihood
    lower bound is below ``tol``; best lower bound over inits kept.

    ``engine``: "sklearn" (any covariance type), "torch" (diag or full; every init in one batched computation,
    optionally on ``device``; the device engine's GCA server uses it: ``training.gca.gca_config``) or "auto"
    (torch for diag with n_init > 1, else sklearn). Both engines use ``random_state`` identically, so they seed
    the same initialisations. A full-covariance torch fit can share one batched computation with
    other runs' fits of the same shape (:meth:`batch_key`, :meth:`fit_batch`), with the numbers it gives alone.
    """

    def __init__(
        self, n_components: int, covariance_type: str = "full", reg_covar: float = 1e-6, n_init: int = 1,
        max_iter: int = 200, tol: float = 1e-3, random_state=None, engine: str = "auto",
        means_init=None, device=None, max_batch_bytes: int = 128 * 2**20,
    ):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.reg_covar = reg_covar
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.engine = engine
        self.means_init = means_init
        self.device = device
        self.max_batch_bytes = max_batch_bytes

    def _resolve_engine(self) -> str:
        if self.engine == "auto":
            return "torch" if self.covariance_type == "diag" and self.n_init > 1 else "sklearn"
        if self.engine not in ("sklearn", "torch"):
            raise ValueError(f"unknown GMM engine {self.engine!r}; choose auto, sklearn or torch")
        if self.engine == "torch" and self.covariance_type not in TORCH_COVARIANCES:
            raise ValueError(f"the torch GMM engine supports covariance_type {' or '.join(TORCH_COVARIANCES)} "
                             f"only, got {self.covariance_type!r}")
        return self.engine

    def batch_key(self, Z: np.ndarray):
        """Fits with equal keys can run as one batched computation (:meth:`fit_batch`); None: this one cannot
        (scikit-learn's engine, or the diagonal engine, which batches its initialisations only)."""
        if self.covariance_type != "full":
            self._resolve_engine()  # a bad engine name is an error here too
            return None
        return super().batch_key(Z)

    def _batch_options(self) -> tuple:
        return self.n_components, self.n_init, self.reg_covar, self.max_iter, self.tol

    @staticmethod
    def _fit_torch(models: list["GMMBackend"], Zs: list[np.ndarray]) -> list:
        first = models[0]
        return fit_full_gmm_torch(Zs, first.n_components, random_states=[m.random_state for m in models],
                                  reg_covar=first.reg_covar, n_init=first.n_init, max_iter=first.max_iter,
                                  tol=first.tol, means_inits=[m.means_init for m in models], device=first.device)

    def fit(self, Z) -> "GMMBackend":
        if self._resolve_engine() == "torch" and self.covariance_type == "diag":  # its inits batched, not runs
            Z = _as_float64(Z)
            if Z.shape[0] < self.n_components:
                raise ValueError(f"Expected n_samples >= n_components, got {Z.shape[0]} < {self.n_components}")
            self.engine_ = "torch"
            self._keep(fit_diag_gmm_torch(
                Z, self.n_components, reg_covar=self.reg_covar, n_init=self.n_init, max_iter=self.max_iter,
                tol=self.tol, random_state=self.random_state, means_init=self.means_init, device=self.device,
                max_batch_bytes=self.max_batch_bytes,
            ))
            return self
        return super().fit(Z)

    def _fit_host(self, Z: np.ndarray) -> "GMMBackend":
        gm = GaussianMixture(
            n_components=self.n_components, covariance_type=self.covariance_type, reg_covar=self.reg_covar,
            n_init=self.n_init, max_iter=self.max_iter, tol=self.tol, random_state=self.random_state,
            init_params="k-means++", means_init=self.means_init,
        ).fit(Z)
        self.model_ = gm
        self.weights_, self.means_, self.covariances_ = gm.weights_, gm.means_, gm.covariances_
        self.lower_bound_, self.n_iter_, self.converged_ = float(gm.lower_bound_), gm.n_iter_, gm.converged_
        self.counts_ = gm.predict_proba(Z).sum(0)
        self.centroids_ = self.means_
        return self

    def _keep(self, out: dict) -> None:
        """A torch engine's result as the fitted attributes."""
        self.weights_, self.means_, self.covariances_ = out["weights"], out["means"], out["covariances"]
        self.lower_bound_, self.n_iter_, self.converged_ = out["lower_bound"], out["n_iter"], out["converged"]
        self.lower_bounds_per_init_ = out["lower_bounds"]
        self.counts_ = out["resp_counts"]
        self.centroids_ = self.means_
