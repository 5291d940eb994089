"""Time the vision-preset GMM (SPEC §1: diag, reg_covar 0.1, 100 inits) — torch batched EM vs scikit-learn.

Data: 600 codes of 784 dims (the Fashion-MNIST upload size, SPEC §4) drawn
from a mixture of 10 Gaussian blobs. For each K the torch engine runs the
full 100-init fit; scikit-learn's GaussianMixture runs ``--sk-inits`` inits
(default 5) with the same seed and its time per init ×100 is reported as an
ESTIMATE (an extrapolation, not a measurement) of the 100-init fit.

    python benchmarks/bench_gmm.py [--ks 10 80] [--n-init 100] [--sk-inits 5] [--threads N]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

from fedgca.protocol.clustering import GMMBackend


def blobs(n: int = 600, d: int = 784, centres: int = 10, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = rng.normal(scale=2.0, size=(centres, d))
    return (mu[rng.integers(0, centres, n)] + rng.normal(size=(n, d))).astype(np.float32)


def time_torch(Z, k, n_init, seed):
    t = time.perf_counter()
    gm = GMMBackend(k, covariance_type="diag", reg_covar=0.1, n_init=n_init, random_state=seed, engine="torch").fit(Z)
    return time.perf_counter() - t, gm.lower_bound_


def time_sklearn(Z, k, n_init, seed):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GaussianMixture(
            k, covariance_type="diag", reg_covar=0.1, n_init=n_init, max_iter=200, tol=1e-3,
            init_params="k-means++", random_state=seed,
        ).fit(Z.astype(np.float64))
    return time.perf_counter() - t, float(gm.lower_bound_)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[10, 80])
    ap.add_argument("--n-init", type=int, default=100)
    ap.add_argument("--sk-inits", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    Z = blobs()
    print(f"data {Z.shape}, torch threads {torch.get_num_threads()}, diag / reg_covar 0.1 / max_iter 200 / tol 1e-3")
    header = (f"{'K':>3} | {'torch ' + str(args.n_init) + ' inits (s)':>22} | "
              f"{'sklearn ' + str(args.sk_inits) + ' inits (s)':>20} | {'sklearn est. ' + str(args.n_init) + ' (s)*':>22} | "
              f"{'est. speed-up':>13} | {'best LB torch':>13} | {'best LB sk(' + str(args.sk_inits) + ')':>14}")
    print(header)
    print("-" * len(header))
    for k in args.ks:
        t_torch, lb_torch = time_torch(Z, k, args.n_init, args.seed)
        t_sk, lb_sk = time_sklearn(Z, k, args.sk_inits, args.seed)
        est = t_sk / args.sk_inits * args.n_init
        print(f"{k:>3} | {t_torch:>22.2f} | {t_sk:>20.2f} | {est:>22.1f} | {est / t_torch:>12.2f}x | "
              f"{lb_torch:>13.3f} | {lb_sk:>14.3f}")
    print(f"* EXTRAPOLATION: sklearn time per init over {args.sk_inits} inits × {args.n_init}; not measured.")


if __name__ == "__main__":
    main()
