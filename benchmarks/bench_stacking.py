"""What stacking S seeds into one computation could buy: the engine's per-seed cost at S = 1 vs S = 3.

    .venv/bin/python benchmarks/bench_stacking.py --data-dir ../shared/data [--configs magic,academic] [--repeat 3]

Seeds of one (dataset, method, config) are independent federations with identical shapes, so S of them
can run as one stack of S·C client slots. This measures the UPPER BOUND of that idea, without building
it: the same stacked engine with the client axis tripled (the shards repeated; identical shapes and
work per slot), timed per seed for each part of a GCA round that stacks —

* a reconstruction epoch, an alignment epoch (the mini-batch loop: where per-step overhead would be
  amortised over 3× the slots), and
* scoring the test set with every slot's model (the evaluation: 6 per GCA round),

next to the parts that cannot stack (one GMM fit per seed: the server's clustering is per federation).
The same for Centralized, the overhead-bound method (one model, B = 50 on the pooled rows): S seeds'
pooled models as S slots, timed per seed for a local-training epoch and a test-set scoring, projected
over its round (``local_epochs`` epochs, one evaluation).
Per seed, S = 3 time / S = 1 time is the fraction a 3-seed stack would take; the round's projected
speed-up weights the parts as one GCA round does (5 recon + 5 align epochs, 6 evaluations, 1 fit).
S = 1 and S = 3 alternate ``--repeat`` times (minimum kept), at 1 torch thread.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_simulator import config_args, shards_for, timed  # noqa: E402

from fedgca import seeding  # noqa: E402
from fedgca.config import RunConfig  # noqa: E402
from fedgca.data import load_dataset  # noqa: E402
from fedgca.evaluation.metrics import shared_scores  # noqa: E402
from fedgca.models import TabularAE  # noqa: E402
from fedgca.protocol import gca  # noqa: E402
from fedgca.protocol.clustering import ClusterSummary  # noqa: E402
from fedgca.training import gca as gca_training  # noqa: E402
from fedgca.training.local import local_training  # noqa: E402
from fedgca.training.loop import ClientShards  # noqa: E402
from fedgca.training.stacked import StackedModels  # noqa: E402


def per_seed_times(arrays, cfg, test_x, seeds: int) -> dict:
    """Seconds per seed of one recon epoch, one align epoch and one test-set scoring, S = ``seeds`` stacked."""
    arrays = arrays * seeds
    n = len(arrays)
    torch.manual_seed(0)
    stack = StackedModels([TabularAE(arrays[0].shape[1]) for _ in range(n)])
    shards = ClientShards.from_arrays(arrays)
    part, ids = torch.ones(n, dtype=torch.bool), range(n)
    codes = gca_training.encode_uploads(stack, shards, seeding.client_rngs(0, "upload", (0,), ids), cfg.rho, part)
    pay = gca.broadcast_payload(gca.aggregate_codes(codes[: len(codes) // seeds], cfg, 0))
    summary = ClusterSummary(pay["centroids"], pay["counts"])
    recon = lambda: gca_training.reconstruction_epoch(  # noqa: E731
        stack, shards, seeding.client_rngs(0, "recon", (0, 0), ids), cfg, part)
    align = lambda: gca_training.alignment_epoch(  # noqa: E731
        stack, shards, seeding.client_rngs(0, "align", (0, 0), ids), cfg, summary, part)
    score = lambda: shared_scores(stack, test_x)  # noqa: E731
    recon(), score()  # warm-up
    return {"recon": timed(recon) / seeds, "align": timed(align) / seeds, "eval": timed(score) / seeds}


def centralized_per_seed_times(pooled: np.ndarray, test_x, seeds: int, batch_size: int) -> dict:
    """Seconds per seed of one Centralized epoch and one test-set scoring, S = ``seeds`` pooled models stacked."""
    torch.manual_seed(0)
    stack = StackedModels([TabularAE(pooled.shape[1]) for _ in range(seeds)])
    shards = ClientShards.from_arrays([pooled] * seeds)
    part = torch.ones(seeds, dtype=torch.bool)
    epoch = lambda: local_training(stack, shards, 0, 0, 1, part, batch_size)  # noqa: E731
    score = lambda: shared_scores(stack, test_x)  # noqa: E731
    epoch(), score()  # warm-up
    return {"epoch": timed(epoch) / seeds, "eval": timed(score) / seeds}


def best_of(repeat: int, measure) -> dict:
    """Per part, the minimum over ``repeat`` alternations of S = 1 and S = 3: {S: {part: seconds}}."""
    best = {1: {}, 3: {}}
    for _ in range(repeat):
        for s in (1, 3):
            for part, sec in measure(s).items():
                best[s][part] = min(best[s].get(part, np.inf), sec)
    return best


def print_projection(name: str, label: str, one: float, three: float) -> None:
    print(f"{name:<10} {label:<24} {1e3 * one:>8.1f} {1e3 * three:>8.1f} {three / one:>10.2f}"
          f"   → 3 seeds stacked at most {one / three:.2f}x faster than 3 sequential runs")


def main() -> None:
    args = config_args(__doc__.splitlines()[0])
    load = os.getloadavg()
    print(f"# bench_stacking.py --configs {args.configs} --repeat {args.repeat}; torch {torch.__version__}, 1 thread; "
          f"load average before {tuple(round(x, 2) for x in load)}")
    print(f"\n{'config':<10} {'part (per seed)':<24} {'S=1 ms':>8} {'S=3 ms':>8} {'S=3 / S=1':>10}")
    for name in args.configs.split(","):
        arrays, preset = shards_for(name, args.data_dir)
        cfg = gca.GCAConfig(k=preset["k"], rho=preset["rho"])
        test_x = torch.as_tensor(load_dataset(name, args.data_dir).test_x, dtype=torch.float32)
        best = best_of(args.repeat, lambda s: per_seed_times(arrays, cfg, test_x, s))
        rng = np.random.default_rng(0)
        codes = [rng.normal(size=(gca.upload_size(len(a), cfg.rho), 16)).astype(np.float32) for a in arrays]
        fit = min(timed(lambda: gca.aggregate_codes(codes, cfg, 0)) for _ in range(args.repeat))
        labels = {"recon": "recon epoch", "align": "align epoch", "eval": "test-set scoring"}
        for part, label in labels.items():
            a, b = best[1][part], best[3][part]
            print(f"{name:<10} {label:<24} {1e3 * a:>8.1f} {1e3 * b:>8.1f} {b / a:>10.2f}")
        print(f"{name:<10} {'GMM fit (cannot stack)':<24} {1e3 * fit:>8.1f} {1e3 * fit:>8.1f} {1.0:>10.2f}")
        weights = {"recon": cfg.recon_epochs, "align": cfg.align_epochs, "eval": cfg.recon_epochs + 1}
        one = sum(w * best[1][p] for p, w in weights.items()) + fit
        three = sum(w * best[3][p] for p, w in weights.items()) + fit
        print_projection(name, "GCA round, projected", one, three)
        run_cfg = RunConfig(dataset=name, method="centralized").resolved()
        pooled = np.concatenate(arrays)
        central = best_of(args.repeat, lambda s: centralized_per_seed_times(pooled, test_x, s, run_cfg.batch_size))
        for part, label in {"epoch": "Centralized epoch", "eval": "Centralized scoring"}.items():
            a, b = central[1][part], central[3][part]
            print(f"{name:<10} {label:<24} {1e3 * a:>8.1f} {1e3 * b:>8.1f} {b / a:>10.2f}")
        one = run_cfg.local_epochs * central[1]["epoch"] + central[1]["eval"]
        three = run_cfg.local_epochs * central[3]["epoch"] + central[3]["eval"]
        print_projection(name, "Centralized round, proj.", one, three)
    print(f"load average after {tuple(round(x, 2) for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
