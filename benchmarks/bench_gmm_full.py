"""The tabular preset's GMM (SPEC §1: full covariances, reg_covar 1e-6, one init) for S runs at once: scikit-learn,
one fit after another on one CPU thread (what every CPU run does), against the torch engine
(``protocol.clustering.gmm_full``) with the S runs' fits as one batch on ``--device`` (what the device engine's
GCA servers do under the batched engine's broker).

Codes: magic's shape by default (2,472 pooled codes of 16 dimensions, K = 80: the README's main job), drawn from
a mixture of K Gaussian blobs, one draw per run. Each line gives the best of ``--repeat`` times, the time per run,
the EM iterations (sklearn's and the engine's, which must be equal) and the largest difference of the fitted means
from scikit-learn's. Read side by side, in one invocation (the machines are shared; the load is printed).

``--backend kmeans``: the same for the K-means backend (SPEC §1: 10 inits of k-means++ and Lloyd): scikit-learn's
KMeans against the torch engine (``protocol.clustering.kmeans_torch``); Lloyd iterations of the chosen init, and the
largest difference of the centres. ``--backend softkmeans``: the soft K-means backend's host engine against its
torch engine.

    python benchmarks/bench_gmm_full.py [--backend gmm|kmeans|softkmeans] [--device cuda] [--runs 1 8 64]
        [--n 2472] [--d 16] [--k 80] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from fedgca.protocol.clustering import GMMBackend, KMeansBackend, SoftKMeansBackend


def one_thread_on(name: str, what: str) -> torch.device:
    """torch on one thread, on device ``name``; prints the load, torch, the device (a GPU's name) and ``what``."""
    torch.set_num_threads(1)
    device = torch.device(name)
    print(f"load {os.getloadavg()[0]:.2f}; torch {torch.__version__}; device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "") + f"; {what}")
    return device


# per backend: the fedgca backend with a torch engine, and the host's fit one run after another (k, seed → model)
HOST_FITS = {
    "gmm": (GMMBackend, lambda k, r: GaussianMixture(k, covariance_type="full", init_params="k-means++",
                                                     random_state=r)),
    "kmeans": (KMeansBackend, lambda k, r: KMeans(k, n_init=10, random_state=r)),
    "softkmeans": (SoftKMeansBackend, lambda k, r: SoftKMeansBackend(k, random_state=r)),  # the host's engine
}
ITERATIONS = {"gmm": "EM", "kmeans": "Lloyd", "softkmeans": "soft-update"}


def _centres(fitted) -> np.ndarray:
    for name in ("cluster_centers_", "means_", "centroids_"):  # KMeans, GaussianMixture, a fedgca backend
        if hasattr(fitted, name):
            return getattr(fitted, name)
    raise TypeError(type(fitted).__name__)


def codes(runs: int, n: int, d: int, k: int) -> list[np.ndarray]:
    out = []
    for r in range(runs):
        rng = np.random.default_rng(r)
        mu = rng.normal(scale=3.0, size=(k, d))
        out.append(mu[rng.integers(0, k, n)] + rng.normal(size=(n, d)))
    return out


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["gmm", "kmeans", "softkmeans"], default="gmm")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--n", type=int, default=2472)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--k", type=int, default=80)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    device = one_thread_on(args.device, f"{args.backend}; {args.n} codes × {args.d}, K = {args.k}")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for runs in args.runs:
        Zs = codes(runs, args.n, args.d, args.k)
        backend, host = HOST_FITS[args.backend]
        with threadpool_limits(1):
            sk_s, sk = best(lambda: [host(args.k, r).fit(Z) for r, Z in enumerate(Zs)], args.repeat)

        def batched():
            models = [backend(args.k, engine="torch", random_state=r, device=device) for r in range(runs)]
            errors = backend.fit_batch(models, Zs)
            sync()
            assert not any(errors), errors
            return models

        batched()  # warm-up: the device's first kernels, the allocator
        t_s, ours = best(batched, args.repeat)
        gap = max(float(np.abs(m.centroids_ - _centres(g)).max()) for m, g in zip(ours, sk))
        same_iters = all(m.n_iter_ == g.n_iter_ for m, g in zip(ours, sk))
        print(f"S = {runs:3d}: scikit-learn {sk_s:7.3f} s ({sk_s / runs * 1e3:6.1f} ms/run) | torch batched "
              f"{t_s:7.3f} s ({t_s / runs * 1e3:6.1f} ms/run) | {sk_s / t_s:5.2f}× | {ITERATIONS[args.backend]} "
              f"iterations {'equal' if same_iters else 'DIFFER'} (max {max(g.n_iter_ for g in sk)}) | max |Δ centres| "
              f"{gap:.1e}")


if __name__ == "__main__":
    main()
