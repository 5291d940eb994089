"""Stacked simulator vs the per-client loop: one local epoch and one GCA round.

    .venv/bin/python benchmarks/bench_simulator.py [--data-dir ../shared/data] [--configs magic,adult,credit-shaped]

Prints, per config, seconds for each path, the speed-up ratio (the figure to
compare across machines) and the stacked path's effective training
throughput, counting 6·P FLOPs per row per epoch.
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from fedgca import seeding
from fedgca.config import DATASET_PRESETS
from fedgca.data import iid_partition, load_dataset
from fedgca.models import TabularAE, param_count
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.training import gca as gca_training
from fedgca.training.loop import ClientShards
from fedgca.training.reference import ReferenceClient, reference_gca_round
from fedgca.training.stacked import StackedModels


def shards_for(name: str, data_dir) -> tuple[list[np.ndarray], dict]:
    if name == "credit-shaped":  # 50 clients × 5,676 rows × 29 features of random data
        rng = np.random.default_rng(0)
        return [rng.normal(size=(5676, 29)).astype(np.float32) for _ in range(50)], DATASET_PRESETS["credit"]
    ds = load_dataset(name, data_dir)
    preset = DATASET_PRESETS[name]
    return [ds.train[p] for p in iid_partition(len(ds.train), preset["clients"], 100)], preset


def stacked_round(stack, shards, cfg, r):
    part = torch.ones(shards.num_clients, dtype=torch.bool)
    ids = range(shards.num_clients)
    for e in range(cfg.recon_epochs):
        gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(0, "recon", (r, e), ids), cfg, part)
    uploads = gca_training.encode_uploads(stack, shards, seeding.client_rngs(0, "upload", (r,), ids), cfg.rho, part)
    payload = gca.broadcast_payload(gca.aggregate_codes(uploads, cfg, seeding.int_seed(0, "cluster", r)))
    summary = ClusterSummary(payload["centroids"], payload["counts"])
    for e in range(cfg.align_epochs):
        gca_training.alignment_epoch(stack, shards, seeding.client_rngs(0, "align", (r, e), ids), cfg, summary, part)


def config_args(description: str, configs: str = "magic,academic", repeat: int = 3) -> argparse.Namespace:
    """--data-dir, --configs, --repeat — and one torch thread: what the per-config benchmarks share."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--configs", default=configs)
    ap.add_argument("--repeat", type=int, default=repeat)
    args = ap.parse_args()
    from fedgca.threads import limit_threads

    limit_threads(1)
    return args


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(name: str, data_dir, skip_round: bool) -> list[dict]:
    arrays, preset = shards_for(name, data_dir)
    dx = arrays[0].shape[1]
    torch.manual_seed(0)
    models = [TabularAE(dx) for _ in arrays]
    cfg = gca.GCAConfig(k=preset["k"], rho=preset["rho"])
    stack, shards = StackedModels([copy.deepcopy(m) for m in models]), ClientShards.from_arrays(arrays)
    refs = [ReferenceClient(copy.deepcopy(m), a, cid=i) for i, (m, a) in enumerate(zip(models, arrays))]
    part = torch.ones(len(arrays), dtype=torch.bool)
    ids = range(len(arrays))
    rows_total = sum(len(a) for a in arrays)
    flops_epoch = 6 * param_count(models[0]) * rows_total

    def stacked_epoch(e):
        gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(0, "recon", (99, e), ids), cfg, part)

    def reference_epoch(e):
        for c in refs:
            c.epoch(seeding.rng(0, "recon", 99, e, c.cid), cfg.batch_size, c.recon_per_row)

    stacked_epoch(0)  # warm-up (allocations, thread pools)
    t_stack = min(timed(lambda e=e: stacked_epoch(e)) for e in (1, 2))
    t_ref = timed(lambda: reference_epoch(1))
    out = [{"config": name, "what": "1 local epoch", "clients": len(arrays), "rows": rows_total,
            "stacked_s": t_stack, "loop_s": t_ref, "gflops": flops_epoch / t_stack / 1e9}]
    if not skip_round:
        t_stack_r = timed(lambda: stacked_round(stack, shards, cfg, 0))
        t_ref_r = timed(lambda: reference_gca_round(refs, cfg, 0, 0))
        out.append({"config": name, "what": "1 GCA round", "clients": len(arrays), "rows": rows_total,
                    "stacked_s": t_stack_r, "loop_s": t_ref_r,
                    "gflops": (cfg.recon_epochs + cfg.align_epochs) * flops_epoch / t_stack_r / 1e9})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--configs", default="magic,adult,credit-shaped")
    p.add_argument("--epoch-only", action="store_true", help="skip the (slow) full-round comparison")
    args = p.parse_args()
    rows = [r for name in args.configs.split(",") for r in bench(name, args.data_dir, args.epoch_only)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'config':<14} {'what':<14} {'C':>3} {'rows':>7} {'stacked s':>10} {'loop s':>9} {'ratio':>7} {'GFLOP/s':>8}")
    for r in rows:
        print(f"{r['config']:<14} {r['what']:<14} {r['clients']:>3} {r['rows']:>7} {r['stacked_s']:>10.3f} "
              f"{r['loop_s']:>9.3f} {r['loop_s'] / r['stacked_s']:>6.1f}x {r['gflops']:>8.1f}")
    print("GFLOP/s counts 6·P per row per epoch (alignment epochs counted as full epochs, an upper bound).")


if __name__ == "__main__":
    main()
