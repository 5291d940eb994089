"""Server-side clustering for GCA Phase 2 (SPEC §1 "Clustering backends"): one backend per module, one interface.

The server pools the uploaded latent codes Z and fits a K-component model;
what it broadcasts is a :class:`ClusterSummary` — the centroids and support
counts of the *non-empty* components only (SPEC §1, Phase 2).

Backends follow the scikit-learn estimator shape: hyperparameters are stored in
``__init__``, ``fit(Z)`` returns ``self``, learned attributes end in ``_`` and
all randomness comes from one ``random_state``. Each exposes ``centroids_``
(all K components), ``counts_`` (all K, may contain zeros) and ``summary()``.

- :class:`GMMBackend` — Gaussian mixture, means initialised by k-means++,
  N_k = Σ_n γ_nk (soft counts). ``engine="sklearn"`` wraps
  :class:`sklearn.mixture.GaussianMixture`; ``engine="torch"`` is a batched
  diagonal-covariance EM that runs every initialisation at once (the vision
  preset has 100 of them) and reproduces scikit-learn's algorithm step for
  step — same k-means++ seeding (and random stream), same M-step, same
  convergence rule, best lower bound kept. Its full-covariance twin
  (``gmm_full``) is the GCA server's GMM under the device engine, batched
  over runs as well (``GMMBackend.fit_batch``).
- :class:`KMeansBackend`, :class:`MiniBatchKMeansBackend` — scikit-learn,
  counts = cluster sizes. K-means also has a torch engine (``kmeans_torch``:
  scikit-learn's Lloyd step for step, batched over inits and runs), the
  device engine's.
- :class:`SoftKMeansBackend` — our own (scikit-learn has none); its torch
  engine (``kmeans_torch``) batches its init and updates over runs.

:func:`cluster_codes` is the one function the server calls; it validates the
input, caps K at the number of distinct codes and never lets a collapsed EM
crash a round (SPEC §1: "fit what is fittable").

Modules: ``base`` (ClusterSummary, the shared ``summary()``), ``kmeans``, ``kmeans_torch``,
``softkmeans``, ``kmeanspp`` (the torch engines' seeding), ``gmm``,
``gmm_full``, and ``fit`` (the presets, the factory and
:func:`cluster_codes`). Only ``ClusterSummary`` is imported eagerly; everything
else loads on first use (PEP 562), so that a client, which never clusters,
never imports scikit-learn.
"""
from __future__ import annotations

from fedgca.protocol.clustering.base import ClusterSummary

__all__ = [
    "ClusterSummary",
    "GMMBackend",
    "KMeansBackend",
    "MiniBatchKMeansBackend",
    "SoftKMeansBackend",
    "BACKENDS",
    "PRESETS",
    "batched_kmeanspp",
    "fit_diag_gmm_torch",
    "fit_full_gmm_torch",
    "make_backend",
    "cluster_codes",
    "soft_responsibilities",
]


def __getattr__(name: str):
    if name in __all__:
        from fedgca.protocol.clustering import fit

        return getattr(fit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
