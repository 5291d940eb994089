"""The detectors before any training: the floor a DP run is compared against (docs/results/dp/README.md).

    .venv/bin/python scripts/untrained_reference.py --data-dir ../shared/data [--datasets academic,magic]

Each client's initial autoencoder (the run's seed), τ from its validation rows (--val-fraction 0.1,
--threshold val-quantile, as in examples/sweep_dp.toml); accuracy and AUROC in %, mean ± std over seeds.
"""
from __future__ import annotations

import argparse

import numpy as np

from fedgca.config import SEEDS, RunConfig
from fedgca.evaluation.metrics import evaluate_clients, shard_scores
from fedgca.data.source import DataSource, source_for
from fedgca.simulation.federation import build_federation
from fedgca.threads import limit_threads


def untrained_auroc(cfg: RunConfig, data=None) -> tuple[float, float]:
    """(accuracy, AUROC) of a run's initial models — its federation built, nothing trained, τ from its validation
    rows. ``data``: the built-in datasets' directory, or own data's source. (scripts/dp_frontier.py and
    scripts/adbench_untrained.py use it too.)"""
    fed = build_federation(cfg.resolved(), data if isinstance(data, DataSource) else source_for(cfg.dataset, data))
    val = shard_scores(fed.clients, fed.val_shards)
    r = evaluate_clients(fed.clients, fed.shards, fed.test_x, fed.dataset.test_y, cfg.quantile, val)
    return r["accuracy"], r["auroc"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--datasets", default="academic,magic")
    args = ap.parse_args()
    limit_threads(1)
    for ds in args.datasets.split(","):
        out = []
        for seed in SEEDS:
            cfg = RunConfig(dataset=ds, method="gca", seed=seed, val_fraction=0.1, threshold="val-quantile")
            out.append(untrained_auroc(cfg, args.data_dir))
        a = np.array(out) * 100
        print(f"{ds}: untrained detectors, accuracy {a[:, 0].mean():.1f} ± {a[:, 0].std(ddof=1):.1f}, "
              f"AUROC {a[:, 1].mean():.1f} ± {a[:, 1].std(ddof=1):.1f} (seeds {', '.join(map(str, SEEDS))})")


if __name__ == "__main__":
    main()
