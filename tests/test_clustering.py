"""Server clustering backends (SPEC §1 "Clustering backends"), checked against scikit-learn and by brute force."""
from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedgca import rundir
from fedgca.protocol.clustering import (
    ClusterSummary,
    GMMBackend,
    KMeansBackend,
    MiniBatchKMeansBackend,
    SoftKMeansBackend,
    batched_kmeanspp,
    cluster_codes,
    fit_full_gmm_torch,
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


# --- GMM (full-covariance torch engine: the device engine's server) ------------------------------
@pytest.mark.parametrize("n,d,k,n_init,reg_covar,warm", [(300, 6, 5, 1, 1e-6, False), (1500, 8, 40, 1, 1e-6, False),
                                                         (600, 4, 10, 3, 1e-3, False), (400, 5, 6, 1, 1e-6, True)])
def test_torch_full_em_is_sklearns(n, d, k, n_init, reg_covar, warm):
    """Step for step scikit-learn's full-covariance EM: same seeding, same iterations, the same fit to round-off."""
    Z = blobs(n=n, d=d, centres=k, seed=n)
    common = dict(covariance_type="full", reg_covar=reg_covar, n_init=n_init, random_state=3,
                  means_init=Z[np.random.default_rng(1).choice(n, k, replace=False)] if warm else None)
    ours = GMMBackend(k, engine="torch", **common).fit(Z)
    ref = GaussianMixture(k, init_params="k-means++", max_iter=200, tol=1e-3, **common).fit(Z)
    assert ours.engine_ == "torch" and ours.n_iter_ == ref.n_iter_ and ours.converged_ == ref.converged_
    np.testing.assert_allclose(ours.lower_bound_, ref.lower_bound_, rtol=1e-12)
    for mine, theirs in [(ours.means_, ref.means_), (ours.covariances_, ref.covariances_),
                         (ours.weights_, ref.weights_), (ours.counts_, ref.predict_proba(Z).sum(0))]:
        np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the overflowing run, on purpose
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_full_fit_gives_the_same_numbers_alone_or_in_a_batch(threads):
    """Runs of one shape fitted as one batch (the broker's ``fit_batch``): each run's fit bit for bit its fit
    alone, whatever shares its batch — a run warm-started, and one whose covariances overflow (its own error,
    as alone; the others unaffected)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        Zs = [blobs(n=500, d=5, centres=8, seed=s) for s in range(4)] + [blobs(n=500, d=5, seed=9) * 1e160]
        warm = [None, Zs[1][:8], None, None, None]

        def model(i):
            return GMMBackend(8, engine="torch", random_state=10 + i, means_init=warm[i])

        alone = []
        for i, Z in enumerate(Zs):
            try:
                alone.append(model(i).fit(Z))
            except ValueError as err:
                alone.append(err)
        assert isinstance(alone[4], ValueError) and "ill-defined" in str(alone[4])
        for batch in ([0, 1, 2, 3, 4], [3, 0], [2]):
            models = [model(i) for i in batch]
            assert len({m.batch_key(Zs[i]) for m, i in zip(models, batch)}) == 1
            errors = GMMBackend.fit_batch(models, [Zs[i] for i in batch])
            for m, i, err in zip(models, batch, errors):
                if i == 4:
                    assert isinstance(err, ValueError)
                    continue
                assert err is None
                a = alone[i]
                assert (m.n_iter_, m.converged_, m.lower_bound_) == (a.n_iter_, a.converged_, a.lower_bound_)
                for name in ("means_", "covariances_", "weights_", "counts_", "lower_bounds_per_init_"):
                    np.testing.assert_array_equal(getattr(m, name), getattr(a, name), err_msg=name)
        one_by_one = fit_full_gmm_torch(Zs[:2], 8, random_states=[10, 11], means_inits=warm[:2], max_batch_bytes=1)
        for out, a in zip(one_by_one, alone):  # a memory budget that fits one run per batch
            np.testing.assert_array_equal(out["means"], a.means_)
    finally:
        torch.set_num_threads(before)


def test_full_fit_operator_calls_do_not_grow_with_the_batch():
    """The operators the fit calls (the torch profiler's top-level ``aten::`` events: what launches kernels on a
    GPU) for 1, 8 and 64 runs, name by name the same (8 EM iterations each: ``tol`` < 0 never stops early);
    the host reads none per EM iteration but one every ``CHECK_EVERY``. (Inside ``aten::any`` the CPU takes
    another internal route for 1 element than for 8: bookkeeping below the operator, not a launch.)"""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    from fedgca.protocol.clustering.gmm_full import CHECK_EVERY

    def calls(runs):
        models = [GMMBackend(6, engine="torch", random_state=i, max_iter=8, tol=-1.0) for i in range(runs)]
        Zs = [blobs(n=300, d=4, seed=i) for i in range(runs)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            GMMBackend.fit_batch(models, Zs)
        assert all(m.n_iter_ == 8 for m in models)
        return collections.Counter(e.name for e in prof.events()
                                   if e.name.startswith("aten::") and e.cpu_parent is None)

    one, eight, many = calls(1), calls(8), calls(64)
    assert one == eight == many
    assert one["aten::is_nonzero"] == 8 // CHECK_EVERY  # ``bool(active.any())``: the only read inside the EM


# --- K-means (torch engine: the device engine's server) --------------------------------------------
@pytest.mark.parametrize("n,d,k,rounded", [(300, 3, 3, False), (900, 8, 10, True), (2472, 16, 80, False),
                                           (120, 2, 40, False)])
def test_torch_kmeans_is_sklearns(n, d, k, rounded):
    """Step for step scikit-learn's KMeans (10 inits of k-means++ and Lloyd): the same labels, iterations and
    chosen init; centres and inertia to float64 rounding; the backend's counts the cluster sizes of predict."""
    Z = blobs(n=n, d=d, centres=k, seed=n)
    if rounded:
        Z = np.round(Z, 1)  # duplicated codes
    ours = KMeansBackend(k, random_state=7, engine="torch").fit(Z)
    ref = KMeans(k, n_init=10, random_state=7).fit(Z)
    assert ours.engine_ == "torch" and ours.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.centroids_, ref.cluster_centers_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-12)
    np.testing.assert_array_equal(ours.counts_, np.bincount(ref.predict(Z), minlength=k))


@pytest.mark.parametrize("empty", [1, 2])
def test_torch_lloyd_moves_empty_clusters_as_sklearn(empty):
    """Initial centres far from every code leave clusters empty after the first E-step: each takes the code
    farthest from its centre (``_relocate_empty_clusters_dense``), to scikit-learn's labels, iterations and
    centres."""
    import torch

    from fedgca.protocol.clustering.kmeans_torch import _lloyd

    rng = np.random.default_rng(empty)
    Z = blobs(n=400, d=3, centres=6, seed=empty)
    init = Z[rng.choice(len(Z), 6, replace=False)].copy()
    init[:empty] = 100.0 + np.arange(empty)[:, None]
    ref = KMeans(6, init=init, n_init=1).fit(Z)
    mean = Z.mean(0)
    tol = torch.tensor([np.mean(np.var(Z, axis=0)) * 1e-4], dtype=torch.float64)
    labels, _, centres, n_iter = _lloyd(torch.as_tensor(Z - mean)[None], torch.as_tensor(init - mean)[None, None],
                                        tol, 300)
    assert int(n_iter[0, 0]) == ref.n_iter_ and np.array_equal(labels[0, 0].numpy(), ref.labels_)
    np.testing.assert_allclose(centres[0, 0].numpy() + mean, ref.cluster_centers_, rtol=0, atol=1e-9)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_kmeans_fit_gives_the_same_numbers_alone_or_in_a_batch(threads):
    """Runs of one shape fitted as one batch (the broker's ``fit_batch``): each run's K-means bit for bit its fit
    alone; a memory budget of one run per batch changes nothing; too few codes is each fit's own error."""
    import torch

    from fedgca.protocol.clustering.kmeans_torch import fit_kmeans_torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        Zs = [blobs(n=500, d=5, centres=8, seed=s) for s in range(4)]
        alone = [KMeansBackend(8, random_state=20 + i, engine="torch").fit(Z) for i, Z in enumerate(Zs)]
        for batch in ([0, 1, 2, 3], [3, 0], [2]):
            models = [KMeansBackend(8, random_state=20 + i, engine="torch") for i in batch]
            assert len({m.batch_key(Zs[i]) for m, i in zip(models, batch)}) == 1
            assert KMeansBackend.fit_batch(models, [Zs[i] for i in batch]) == [None] * len(batch)
            for m, i in zip(models, batch):
                a = alone[i]
                assert (m.n_iter_, m.inertia_) == (a.n_iter_, a.inertia_)
                for name in ("centroids_", "labels_", "counts_"):
                    np.testing.assert_array_equal(getattr(m, name), getattr(a, name), err_msg=name)
        one_by_one = fit_kmeans_torch(Zs[:2], 8, random_states=[20, 21], max_batch_bytes=1)
        for out, a in zip(one_by_one, alone):
            np.testing.assert_array_equal(out["cluster_centers"], a.centroids_)
        errors = KMeansBackend.fit_batch([KMeansBackend(8, engine="torch"), KMeansBackend(8, engine="torch")],
                                         [Zs[0][:5], Zs[1][:5]])
        assert all(isinstance(e, ValueError) and "n_clusters=8" in str(e) for e in errors)
        assert KMeansBackend(8).batch_key(Zs[0]) is None  # scikit-learn's engine: fitted in the run's thread
    finally:
        torch.set_num_threads(before)


def test_kmeans_operator_calls_do_not_grow_with_the_batch():
    """The torch K-means' top-level operator calls for 1, 8 and 64 runs (``max_iter`` = ``CHECK_EVERY``: the
    batch iterates that often whichever inits stop earlier, frozen), name by name the same; the host reads one
    value per ``CHECK_EVERY`` iterations."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    from fedgca.protocol.clustering.kmeans_torch import CHECK_EVERY

    def calls(runs):
        models = [KMeansBackend(6, random_state=i, max_iter=CHECK_EVERY, engine="torch") for i in range(runs)]
        Zs = [blobs(n=300, d=4, centres=30, seed=i) for i in range(runs)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            KMeansBackend.fit_batch(models, Zs)
        assert max(m.n_iter_ for m in models) == CHECK_EVERY
        return collections.Counter(e.name for e in prof.events()
                                   if e.name.startswith("aten::") and e.cpu_parent is None)

    one, eight, many = calls(1), calls(8), calls(64)
    assert one == eight == many
    assert one["aten::is_nonzero"] == 1


@pytest.mark.parametrize("k,temperature", [(4, 1.0), (10, 0.1), (25, 5.0)])
def test_torch_soft_kmeans_is_the_hosts(k, temperature):
    """The soft K-means torch engine (its K-means init on the torch engine, the updates batched) against the
    host's (scikit-learn's init, NumPy updates): the same updates and convergence; centres, counts and
    responsibilities to float64 rounding."""
    Z = blobs(n=700, d=5, centres=k, seed=k)
    host = SoftKMeansBackend(k, temperature=temperature, random_state=4).fit(Z)
    ours = SoftKMeansBackend(k, temperature=temperature, random_state=4, engine="torch").fit(Z)
    assert ours.engine_ == "torch" and (ours.n_iter_, ours.converged_) == (host.n_iter_, host.converged_)
    for name in ("centroids_", "counts_", "responsibilities_"):
        np.testing.assert_allclose(getattr(ours, name), getattr(host, name), rtol=1e-9, atol=1e-9, err_msg=name)


def test_a_soft_kmeans_fit_gives_the_same_numbers_alone_or_in_a_batch():
    """Soft K-means runs of one shape as one batch: each bit for bit its fit alone; fewer codes than clusters is
    each fit's own error; the host's engine has no batch key."""
    Zs = [blobs(n=400, d=4, centres=6, seed=s) for s in range(3)]
    alone = [SoftKMeansBackend(6, random_state=i, engine="torch").fit(Z) for i, Z in enumerate(Zs)]
    models = [SoftKMeansBackend(6, random_state=i, engine="torch") for i in (2, 0, 1)]
    assert len({m.batch_key(Zs[0]) for m in models}) == 1 and SoftKMeansBackend(6).batch_key(Zs[0]) is None
    assert SoftKMeansBackend.fit_batch(models, [Zs[2], Zs[0], Zs[1]]) == [None] * 3
    for m, i in zip(models, (2, 0, 1)):
        assert (m.n_iter_, m.converged_) == (alone[i].n_iter_, alone[i].converged_)
        for name in ("centroids_", "counts_", "responsibilities_"):
            np.testing.assert_array_equal(getattr(m, name), getattr(alone[i], name), err_msg=name)
    (err,) = SoftKMeansBackend.fit_batch([SoftKMeansBackend(6, engine="torch")], [Zs[0][:4]])
    assert isinstance(err, ValueError)


def test_torch_engine_covariance_types_and_the_auto_rule():
    assert GMMBackend(3, covariance_type="full")._resolve_engine() == "sklearn"  # CPU fits stay scikit-learn's
    assert GMMBackend(3, covariance_type="full", engine="torch")._resolve_engine() == "torch"
    assert GMMBackend(3, covariance_type="full").batch_key(np.zeros((9, 2))) is None
    with pytest.raises(ValueError, match="diag or full"):
        GMMBackend(3, covariance_type="tied", engine="torch").fit(blobs(n=30))


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
    rows = rundir.load_tensors(tmp_path / "warm" / "checkpoint.pt")
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
