"""GMM warm start (``--gmm-warm-start``) against scikit-learn's fresh fit on the same codes.

    .venv/bin/python benchmarks/bench_gmm_warm.py --data-dir ../shared/data [--dataset magic] [--rounds 8]

Runs GCA (the dataset's preset, seed 100, fresh fits: the paper) for ``--rounds`` rounds and keeps each
round's pooled codes and broadcast. Then, on each round's codes from round 2 on, side by side:

* fresh — what the paper does: scikit-learn's GaussianMixture from k-means++ (``cluster_codes``);
* warm — the same GaussianMixture with ``means_init`` = the previous round's broadcast centroids.

Reports per round the seconds (best of ``--repeat``), EM iterations and the fit's mean log-likelihood
lower bound of each. Ratios, not seconds, compare across machines; the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from fedgca.config import RunConfig
from fedgca.protocol import gca
from fedgca.protocol.clustering import GMMBackend
from fedgca.protocol.clustering import fit as clustering_fit
from fedgca.simulation.runner import run
from fedgca.threads import limit_threads


def record_rounds(cfg: RunConfig, data_dir) -> list[tuple[np.ndarray, np.ndarray]]:
    """(pooled codes, broadcast centroids) of every round of a fresh-fit GCA run."""
    seen = []
    real = gca.aggregate_codes

    def recording(uploads, gcfg, seed, previous=None, **kw):
        out = real(uploads, gcfg, seed, previous, **kw)
        seen.append((np.concatenate([u for u in uploads if u is not None and len(u)]), out.centroids))
        return out

    gca.aggregate_codes = recording
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run(cfg, tmp, data_dir=data_dir, progress=False)
    finally:
        gca.aggregate_codes = real
    return seen


def fit(Z, k, seed, means_init=None, repeat=3):
    best, model = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        model = GMMBackend(k, **clustering_fit.PRESETS["tabular"], random_state=seed, means_init=means_init).fit(Z)
        best = min(best, time.perf_counter() - t)
    return best, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir")
    ap.add_argument("--dataset", default="magic")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    limit_threads(1)
    cfg = RunConfig(args.dataset, rounds=args.rounds, seed=100).resolved()
    rounds = record_rounds(cfg, args.data_dir)
    print(f"# bench_gmm_warm.py --dataset {args.dataset} --rounds {args.rounds}; K = {cfg.k}, "
          f"{len(rounds[0][0])} pooled codes of {rounds[0][0].shape[1]} dims per round; 1 thread; "
          f"load average {tuple(round(x, 2) for x in os.getloadavg())}")
    print(f"{'round':>5} | {'fresh s':>8} {'iters':>5} {'bound':>8} | {'warm s':>8} {'iters':>5} {'bound':>8} | "
          f"{'fresh / warm':>12}")
    tf = tw = 0.0
    for r in range(1, len(rounds)):
        Z = rounds[r][0].astype(np.float64)
        prev = rounds[r - 1][1]
        seed = 0
        a, fa = fit(Z, cfg.k, seed, repeat=args.repeat)
        warm = prev if prev.shape[0] == cfg.k else None
        b, fb = fit(Z, cfg.k, seed, means_init=warm, repeat=args.repeat)
        tf, tw = tf + a, tw + b
        print(f"{r + 1:>5} | {a:>8.3f} {fa.n_iter_:>5} {fa.lower_bound_:>8.3f} | {b:>8.3f} {fb.n_iter_:>5} "
              f"{fb.lower_bound_:>8.3f} | {a / b:>11.2f}x" + ("" if warm is not None else "  (K changed: fresh)"))
    print(f"all rounds: fresh {tf:.3f} s, warm {tw:.3f} s — {tf / tw:.2f}x")


if __name__ == "__main__":
    main()
