"""Server clustering backends (SPEC §1 "Clustering backends"), checked against scikit-learn and by brute force."""
from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedgca.protocol.clustering import (
    ClusterSummary,
    GMMBackend,
    KMeansBackend,
    MiniBatchKMeansBackend,
    SoftKMeansBackend,
    batched_kmeanspp,
    cluster_codes,
    make_backend,
    soft_responsibilities,
)


def blobs(n=240, d=6, centres=4, scale=4.0, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = rng.normal(scale=scale, size=(centres, d))
    return mu[rng.integers(0, centres, n)] + rng.normal(size=(n, d))


def nearest_sizes(Z, centroids) -> np.ndarray:
    d = ((Z[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)
    return np.bincount(d.argmin(1), minlength=len(centroids))


@pytest.fixture(autouse=True)
def _quiet_sklearn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


# --- GMM (scikit-learn engine) ---------------------------------------------------------------
@pytest.mark.parametrize("cov", ["full", "diag"])
def test_gmm_backend_equals_sklearn(cov):
    Z = blobs()
    ours = GMMBackend(4, covariance_type=cov, engine="sklearn", random_state=7).fit(Z)
    ref = GaussianMixture(
        4, covariance_type=cov, init_params="k-means++", max_iter=200, tol=1e-3, random_state=7
    ).fit(Z)
    np.testing.assert_allclose(ours.centroids_, ref.means_)
    np.testing.assert_allclose(ours.counts_, ref.predict_proba(Z).sum(0))
    assert ours.counts_.sum() == pytest.approx(len(Z))


def test_make_backend_presets_and_overrides():
    tab = make_backend("gmm", 10, seed=1)
    assert (tab.covariance_type, tab.reg_covar, tab.n_init, tab.max_iter, tab.tol) == ("full", 1e-6, 1, 200, 1e-3)
    vis = make_backend("gmm", 20, seed=1, preset="vision")
    assert (vis.covariance_type, vis.reg_covar, vis.n_init, vis._resolve_engine()) == ("diag", 0.1, 100, "torch")
    assert make_backend("gmm", 20, seed=1, preset="vision", n_init=3, engine="sklearn").n_init == 3
    assert make_backend("minibatch", 5, seed=2).batch_size == 4096
    soft = make_backend("softkmeans", 5, seed=2)
    assert (soft.temperature, soft.max_iter, soft.tol, soft.n_init) == (1.0, 200, 1e-3, 10)
    assert make_backend("kmeans", 5, seed=2).n_init == 10
    with pytest.raises(ValueError, match="backend"):
        make_backend("dbscan", 5, seed=0)


# --- GMM (batched torch engine) vs scikit-learn ------------------------------------------------
def test_batched_kmeanspp_reproduces_sklearn_seeding():
    Z = blobs(n=150, d=5)
    rs_ref, rs_ours = np.random.RandomState(3), np.random.RandomState(3)
    ref = np.stack([kmeans_plusplus(Z, 6, random_state=rs_ref)[1] for _ in range(8)])
    ours = batched_kmeanspp(Z, 6, 8, rs_ours)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("reg_covar", [1e-6, 0.1])
def test_torch_diag_em_matches_sklearn_with_same_means_init(reg_covar):
    Z = blobs(n=300, d=8, centres=5)
    means_init = Z[np.random.default_rng(1).choice(len(Z), 5, replace=False)]
    common = dict(covariance_type="diag", reg_covar=reg_covar, n_init=1, random_state=11, means_init=means_init)
    ours = GMMBackend(5, engine="torch", **common).fit(Z)
    ref = GaussianMixture(5, init_params="k-means++", max_iter=200, tol=1e-3, **common).fit(Z)
    np.testing.assert_allclose(ours.means_, ref.means_, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(ours.covariances_, ref.covariances_, rtol=1e-4)
    np.testing.assert_allclose(ours.lower_bound_, ref.lower_bound_, rtol=1e-4)
    np.testing.assert_allclose(ours.lower_bound_, ref.score(Z), rtol=1e-2)  # bound = log-lik before last M-step
    np.testing.assert_allclose(ours.counts_, ref.predict_proba(Z).sum(0), rtol=1e-4, atol=1e-8)
    assert ours.n_iter_ == ref.n_iter_


def test_torch_diag_em_many_inits_not_worse_than_sklearn():
    Z = blobs(n=400, d=10, centres=6, scale=2.0, seed=5)
    kw = dict(covariance_type="diag", reg_covar=0.1, n_init=12)
    ours = GMMBackend(6, engine="torch", random_state=0, **kw).fit(Z)
    ref = GaussianMixture(6, init_params="k-means++", random_state=0, **kw).fit(Z)
    # Same random_state → same k-means++ starts → the same best fit (up to round-off).
    assert ours.lower_bound_ == pytest.approx(ref.lower_bound_, rel=1e-6)
    # Other seeds: the best of 12 batched inits is statistically as good as sklearn's best.
    other = GMMBackend(6, engine="torch", random_state=123, **kw).fit(Z)
    assert other.lower_bound_ >= ref.lower_bound_ - 1e-2 * abs(ref.lower_bound_)
    assert len(ours.lower_bounds_per_init_) == 12 and ours.lower_bound_ == ours.lower_bounds_per_init_.max()
    assert ours.counts_.sum() == pytest.approx(len(Z))


def test_torch_engine_chunking_does_not_change_result():
    Z = blobs(n=200, d=6)
    kw = dict(covariance_type="diag", reg_covar=0.1, n_init=4, random_state=4, engine="torch")
    one = GMMBackend(5, **kw).fit(Z)
    chunked = GMMBackend(5, max_batch_bytes=1, **kw).fit(Z)  # one init per chunk
    np.testing.assert_allclose(one.lower_bounds_per_init_, chunked.lower_bounds_per_init_, rtol=1e-10)
    np.testing.assert_allclose(one.means_, chunked.means_, rtol=1e-8, atol=1e-10)


# --- Hard K-means ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [KMeansBackend, MiniBatchKMeansBackend])
def test_hard_counts_are_cluster_sizes(cls):
    Z = blobs(n=300, centres=5)
    b = cls(5, random_state=3).fit(Z)
    np.testing.assert_array_equal(b.counts_, nearest_sizes(Z, b.centroids_))
    assert b.counts_.sum() == len(Z)
    s = b.summary()
    assert s.centroids.dtype == np.float32 and s.counts.dtype == np.float64 and (s.counts > 0).all()


# --- Soft K-means ------------------------------------------------------------------------------
def test_soft_kmeans_counts_and_weighted_means():
    Z = blobs(n=200, d=4, centres=3, scale=2.0)
    b = SoftKMeansBackend(3, temperature=1.0, random_state=0).fit(Z)
    assert b.counts_.sum() == pytest.approx(len(Z))
    r = b.responsibilities_  # the r of the last update, recomputed independently below
    np.testing.assert_allclose(b.counts_, r.sum(0))
    np.testing.assert_allclose(b.centroids_, (r.T @ Z) / r.sum(0)[:, None], rtol=1e-10)
    # Converged: a fixed point of the update up to the tolerance (max centroid shift < tol).
    d2 = ((Z[:, None] - b.centroids_[None]) ** 2).sum(-1)
    r_np = np.exp(-d2 - (-d2).max(1, keepdims=True))
    r_np /= r_np.sum(1, keepdims=True)
    np.testing.assert_allclose(soft_responsibilities(Z, b.centroids_, 1.0), r_np, atol=1e-10)
    assert b.converged_
    assert np.abs((r_np.T @ Z) / r_np.sum(0)[:, None] - b.centroids_).max() < 1e-3


def test_soft_kmeans_tiny_temperature_is_hard_kmeans():
    Z = blobs(n=200, d=4, centres=4, scale=5.0)
    soft = SoftKMeansBackend(4, temperature=1e-9, random_state=2).fit(Z)
    hard = KMeans(4, n_init=10, random_state=2).fit(Z)
    np.testing.assert_allclose(soft.centroids_, hard.cluster_centers_, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(soft.counts_, np.bincount(hard.labels_, minlength=4))


# --- cluster_codes robustness -------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["gmm", "kmeans", "softkmeans", "minibatch"])
def test_k_larger_than_points_and_duplicates(backend):
    Z = blobs(n=7, d=3)
    s = cluster_codes(Z, 20, backend=backend, seed=0)
    assert isinstance(s, ClusterSummary) and 1 <= s.k <= 7 and (s.counts > 0).all()
    assert s.counts.sum() == pytest.approx(7)
    dup = np.repeat(blobs(n=3, d=3), 5, axis=0).astype(np.float32)  # 15 codes, 3 distinct
    s = cluster_codes(dup, 10, backend=backend, seed=0)
    assert s.k <= 3 and s.counts.sum() == pytest.approx(15)
    assert s.centroids.dtype == np.float32 and s.centroids.shape[1] == 3


@pytest.mark.parametrize("backend", ["gmm", "kmeans", "softkmeans", "minibatch"])
def test_single_point_and_constant_codes(backend):
    one = np.ones((1, 4), dtype=np.float32)
    s = cluster_codes(one, 10, backend=backend, seed=0)
    np.testing.assert_array_equal(s.centroids, one)
    np.testing.assert_array_equal(s.counts, [1.0])
    s = cluster_codes(np.zeros((5, 4)), 3, backend=backend, seed=0, preset="vision")
    assert s.k == 1 and s.counts[0] == 5


def test_vision_preset_runs_through_cluster_codes():
    Z = blobs(n=60, d=16, centres=3).astype(np.float32)
    s = cluster_codes(Z, 5, seed=0, preset="vision", n_init=4)
    assert 1 <= s.k <= 5 and s.counts.sum() == pytest.approx(60, rel=1e-6)


@pytest.mark.parametrize("bad", [np.array([[0.0, np.nan]]), np.array([[np.inf, 1.0]]), np.zeros(5),
                                 np.zeros((2, 2), dtype=np.int64), np.zeros((0, 3))])
def test_invalid_codes_raise(bad):
    with pytest.raises(ValueError):
        cluster_codes(bad, 3, seed=0)


def test_collapsed_em_retries_then_falls_back(monkeypatch, caplog):
    calls = []

    def fail(self, Z):
        calls.append(self.reg_covar)
        raise ValueError("ill-defined empirical covariance")

    monkeypatch.setattr(GMMBackend, "fit", fail)
    Z = blobs(n=50)
    with caplog.at_level(logging.WARNING, logger="fedgca.protocol.clustering"):
        s = cluster_codes(Z, 4, seed=0)
    assert calls == pytest.approx([1e-6, 1e-5, 1e-4, 1e-3])
    assert "failed" in caplog.text
    np.testing.assert_array_equal(s.counts, nearest_sizes(Z, s.centroids.astype(np.float64)))  # K-means sizes
    assert s.k == 4 and s.counts.sum() == 50


def test_empty_components_are_dropped():
    b = KMeansBackend(3)
    b.centroids_, b.counts_ = np.eye(3), np.array([4.0, 0.0, 2.0])
    s = b.summary()
    np.testing.assert_array_equal(s.counts, [4.0, 2.0])
    np.testing.assert_array_equal(s.centroids, np.eye(3, dtype=np.float32)[[0, 2]])


def test_config_errors_are_not_swallowed():
    Z = blobs(n=30)
    with pytest.raises(TypeError):
        cluster_codes(Z, 3, seed=0, not_an_option=1)
    with pytest.raises(ValueError, match="engine"):
        cluster_codes(Z, 3, seed=0, engine="cuda-magic")
    with pytest.raises(ValueError):
        cluster_codes(Z, 3, seed=0, covariance_type="bogus")


def test_gmm_warm_start_starts_each_round_at_the_previous_broadcast(tmp_path, data_dir, monkeypatch,
                                                                     kill_after_round):
    """--gmm-warm-start: round 1 fits from k-means++ (no means_init); every later round's EM starts at the
    previous round's broadcast centroids; a killed and resumed run carries them over (same metrics); the
    Flower ServerApp does the same (byte-identical metrics.csv); the default stays the fresh fit."""
    import torch

    from fedgca.config import RunConfig
    from fedgca.flower.simulation import simulate
    from fedgca.protocol.clustering import gmm
    from fedgca.simulation import runner

    seen = []
    real_init = gmm.GMMBackend.__init__

    def recording_init(self, *args, means_init=None, **kw):
        seen.append(None if means_init is None else np.array(means_init))
        real_init(self, *args, means_init=means_init, **kw)

    monkeypatch.setattr(gmm.GMMBackend, "__init__", recording_init)
    cfg = RunConfig("magic", clients=3, rounds=3, recon_epochs=1, align_epochs=1, k=10, seed=100,
                    gmm_warm_start=True)
    runner.run(cfg, tmp_path / "warm", data_dir=data_dir, progress=False)
    firsts = seen[::4]  # each round builds the GMM and its three reg_covar retries (unused here)
    assert len(firsts) == 3 and firsts[0] is None and all(s.shape == (10, 16) for s in firsts[1:])
    assert not np.array_equal(firsts[1], firsts[2])  # each round starts where the one before ended
    rows = torch.load(tmp_path / "warm" / "checkpoint.pt", weights_only=True)
    assert rows["method"]["previous"]["centroids"].shape == (10, 16)

    kill_after_round(lambda: runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False), 1)
    runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False, resume=True)
    warm_rows = (tmp_path / "warm" / "metrics.csv").read_bytes()
    assert (tmp_path / "resumed" / "metrics.csv").read_bytes() == warm_rows
    simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == warm_rows
    runner.run(RunConfig(**{**cfg.to_dict(), "gmm_warm_start": False}), tmp_path / "fresh", data_dir=data_dir,
               progress=False)
    assert (tmp_path / "fresh" / "metrics.csv").read_bytes() != warm_rows
