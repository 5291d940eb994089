"""The clustering backends' factory and :func:`cluster_codes`, the one function a GCA server calls
(see the package docstring). Imported on first use: a client never clusters, and scikit-learn's
import costs a Flower ClientApp process seconds per message."""
from __future__ import annotations

import logging

import numpy as np
from sklearn.utils._param_validation import InvalidParameterError

from fedgca.protocol.clustering.base import (
    BACKEND_NAMES,
    ClusterSummary,
    _as_float64,
    _summarise,
)
from fedgca.protocol.clustering.gmm import (  # noqa: F401 — re-exported by the package (lazily)
    GMMBackend,
    fit_diag_gmm_torch,
)
from fedgca.protocol.clustering.gmm_full import fit_full_gmm_torch  # noqa: F401 — re-exported (lazily)
from fedgca.protocol.clustering.kmeanspp import batched_kmeanspp  # noqa: F401 — re-exported (lazily)
from fedgca.protocol.clustering.kmeans import KMeansBackend, MiniBatchKMeansBackend
from fedgca.protocol.clustering.softkmeans import (  # noqa: F401 — re-exported by the package (lazily)
    SoftKMeansBackend,
    soft_responsibilities,
)

logger = logging.getLogger(__name__)


PRESETS: dict[str, dict] = {
    "tabular": {"covariance_type": "full", "reg_covar": 1e-6, "n_init": 1},
    "vision": {"covariance_type": "diag", "reg_covar": 0.1, "n_init": 100},
}
"""GMM presets of SPEC §1 (shared by both: max_iter 200, tol 1e-3); every value overridable."""

BACKENDS = dict(zip(BACKEND_NAMES, (  # (class, its K parameter) per name
    (GMMBackend, "n_components"),
    (KMeansBackend, "n_clusters"),
    (SoftKMeansBackend, "n_clusters"),
    (MiniBatchKMeansBackend, "n_clusters"),
), strict=True))


def make_backend(name: str, k: int, *, seed: int, preset: str = "tabular", **overrides):
    """An unfitted backend with SPEC §1 defaults; ``overrides`` replace any hyperparameter.

    ``preset`` ("tabular" or "vision") selects the GMM defaults (other
    backends have one preset). ``seed`` becomes ``random_state``.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown clustering backend {name!r}; choose from {', '.join(BACKENDS)}")
    if preset not in PRESETS:
        raise ValueError(f"unknown clustering preset {preset!r}; choose from {', '.join(PRESETS)}")
    cls, k_name = BACKENDS[name]
    params = dict(PRESETS[preset]) if name == "gmm" else {}
    params.update({k_name: int(k), "random_state": seed}, **overrides)
    return cls(**params)


REG_COVAR_RETRIES = 3  # GMM retries with reg_covar × 10 before falling back to K-means
REG_COVAR_FACTOR = 10.0


def _validate_codes(Z) -> np.ndarray:
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[0] < 1 or Z.shape[1] < 1:
        raise ValueError(f"codes must be a non-empty 2-D array [n, dz], got shape {Z.shape}")
    if not np.issubdtype(Z.dtype, np.floating):
        raise ValueError(f"codes must be floating point, got dtype {Z.dtype}")
    if not np.isfinite(Z).all():
        bad = int((~np.isfinite(Z)).any(axis=1).sum())
        raise ValueError(f"codes contain NaN or infinite values in {bad} of {Z.shape[0]} rows")
    return _as_float64(Z)


def _fit_summary(backend) -> ClusterSummary:
    """Summary of a fitted backend; a non-finite or empty result counts as a failed fit."""
    s = backend.summary()
    if s.k == 0 or not (np.isfinite(s.centroids).all() and np.isfinite(s.counts).all()):
        raise FloatingPointError("clustering produced no finite non-empty component")
    return s


def _attempts(backend: str, k: int, seed: int, preset: str, overrides: dict) -> list:
    """Backends to try in order: the requested one, GMM with reg_covar × 10, × 100, ..., then K-means."""
    first = make_backend(backend, k, seed=seed, preset=preset, **overrides)
    if isinstance(first, GMMBackend):
        first._resolve_engine()  # surface a bad engine name now, not as a "failed fit"
    retries = []
    if backend == "gmm":
        regs = [first.reg_covar * REG_COVAR_FACTOR**i for i in range(1, REG_COVAR_RETRIES + 1)]
        retries = [make_backend("gmm", k, seed=seed, preset=preset, **{**overrides, "reg_covar": r}) for r in regs]
    return [first, *retries, KMeansBackend(k, random_state=seed)]


def cluster_codes(
    Z: np.ndarray, k: int, *, backend: str = "gmm", seed: int, preset: str = "tabular", warm_means=None,
    fit=None, **overrides
) -> ClusterSummary:
    """Phase 2 of a GCA round (SPEC §1): cluster the pooled codes, return the non-empty components.

    Never crashes a round on valid input: K is capped at the number of
    distinct codes; a failing GMM is retried with reg_covar × 10 (up to
    ``REG_COVAR_RETRIES`` times) and then replaced by K-means, each step
    logged as a warning. Raises ``ValueError`` for invalid input (not a
    non-empty 2-D finite float array, K < 1) or an unknown backend, preset,
    engine or parameter value, and ``TypeError`` for an unknown option name.

    ``warm_means`` (GMM only): initial means — the previous round's centroids — used when there is one per
    component to fit (else the fit starts fresh, from k-means++). ``fit(model, Z)``: fits each attempt and
    returns it fitted, or raises as ``model.fit`` does (None: ``model.fit(Z)``; the batched engine's broker fits
    other runs' alike models with it: ``training.lockstep.EpochBroker.clustering``).
    """
    Z = _validate_codes(Z)
    if int(k) < 1:
        raise ValueError(f"K must be a positive integer, got {k!r}")
    distinct = np.unique(Z, axis=0)
    k_fit = min(int(k), len(distinct))
    if warm_means is not None and backend == "gmm" and np.shape(warm_means) == (k_fit, Z.shape[1]):
        overrides = {**overrides, "means_init": np.asarray(warm_means, dtype=np.float64)}
    attempts = _attempts(backend, k_fit, seed, preset, overrides)  # validates names and options
    if len(distinct) == 1:  # every backend's exact answer: one centroid holding all n codes
        return _summarise(distinct, np.array([float(len(Z))]))
    if k_fit < k:
        logger.warning("K=%d exceeds the %d distinct pooled codes; fitting %d components", k, len(distinct), k_fit)
    for model, following in zip(attempts, [*attempts[1:], None]):
        try:
            return _fit_summary(model.fit(Z) if fit is None else fit(model, Z))
        except InvalidParameterError:  # a configuration error, not a numerical failure
            raise
        except (ValueError, FloatingPointError, np.linalg.LinAlgError, RuntimeError) as exc:
            then = f"retrying with {_describe(following)}" if following else "giving up"
            logger.warning("clustering with %s failed (%s); %s", _describe(model), exc, then)
    logger.warning("every clustering attempt failed; broadcasting the mean of the codes as one centroid")
    return _summarise(Z.mean(0, keepdims=True), np.array([float(len(Z))]))


def _describe(model) -> str:
    reg = getattr(model, "reg_covar", None)
    return type(model).__name__ + (f"(reg_covar={reg:g})" if reg is not None else "")
