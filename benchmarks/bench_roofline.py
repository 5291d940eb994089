"""Roofline: each part of a GCA round and of a baseline round against this machine's own sgemm rate.

    .venv/bin/python benchmarks/bench_roofline.py [--data-dir ../shared/data] [--configs magic,adult,credit-shaped]
                                                  [--threads 1] [--no-flower]

Per config, one round of each kind on the stacked simulator's own functions, timed part by part at the
given torch thread count, beside the sgemm rate measured in the same run at the same thread count:

* GCA round = T_recon reconstruction epochs + T_recon evaluations (the paper evaluates after every
  reconstruction epoch) + upload + clustering + T_align alignment epochs + the end-of-round evaluation;
* baseline round = E local epochs + one evaluation of the global model (the test set scored once).

Protocol FLOPs (``fedgca.experiments.cost``, which the sweep's ETA also uses; F = multiply-adds of one
row's forward pass, = P the parameter count for these MLPs, F_enc the encoder's, N = training rows of all
clients, M = test rows, C clients): reconstruction epoch 6·F·N (forward 2F, backward 4F per row);
alignment epoch 6·F_enc·N (the encoder alone, ≈ half the model); evaluation 2·F·(C·M + N) (every client
scores the test set with its own model, and its own training rows for τ; a baseline's global model scores
the test set once: 2·F·(M + N)); clustering and Adam are overhead by this count. % of roofline =
achieved / sgemm.

Side by side in the same run: the same GCA round's training epochs as a plain per-client loop with
PyTorch's fused Adam (``torch.optim.Adam(fused=True)``), and (magic only) the Flower simulation engine's
wall time per round on the same config (``bench_flower_engines.py``'s in-process engine, 2 rounds).
Compare ratios and percentages, not seconds: the machine is shared; the load average is printed.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_simulator import shards_for  # noqa: E402

from fedgca import seeding  # noqa: E402
from fedgca.config import DATASET_PRESETS, RunConfig  # noqa: E402
from fedgca.data import load_dataset  # noqa: E402
from fedgca.evaluation.metrics import evaluate_clients  # noqa: E402
from fedgca.experiments import cost  # noqa: E402
from fedgca.models import TabularAE, forward_cost  # noqa: E402
from fedgca.protocol import gca  # noqa: E402
from fedgca.protocol.clustering import ClusterSummary  # noqa: E402
from fedgca.threads import limit_threads  # noqa: E402
from fedgca.training import gca as gca_training  # noqa: E402
from fedgca.training.local import local_training  # noqa: E402
from fedgca.training.loop import ClientShards  # noqa: E402
from fedgca.training.reference import ReferenceClient  # noqa: E402
from fedgca.training.stacked import StackedModels  # noqa: E402


def sgemm_gflops(n: int = 1024, repeat: int = 5) -> float:
    """The machine's single-precision matmul rate at the current thread count (best of ``repeat``)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):  # warm-up: the first products run below the core's sustained rate
        torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeat))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _test_set(name: str, data_dir, dx: int):
    if name == "credit-shaped":  # the credit test set's shape: 2 × 492 balanced rows (SPEC §4) → random
        rng = np.random.default_rng(1)
        return torch.as_tensor(rng.normal(size=(984, dx)).astype(np.float32)), np.repeat([0, 1], 492)
    ds = load_dataset(name, data_dir)
    return torch.as_tensor(ds.test_x, dtype=torch.float32), np.asarray(ds.test_y)


def bench(name: str, data_dir) -> dict:
    arrays, preset = shards_for(name, data_dir)
    dx = arrays[0].shape[1]
    test_x, test_y = _test_set(name, data_dir, dx)
    torch.manual_seed(0)
    models = [TabularAE(dx) for _ in arrays]
    (F, F_enc), N, M, C = forward_cost(models[0], arrays[0].shape[1:]), sum(len(a) for a in arrays), len(test_x), len(arrays)
    cfg = gca.GCAConfig(k=preset["k"], rho=preset["rho"])
    shards = ClientShards.from_arrays(arrays)
    stack = StackedModels([copy.deepcopy(m) for m in models])
    part = torch.ones(C, dtype=torch.bool)
    ids = range(C)

    def evaluate(one_model=False):
        evaluate_clients(stack, shards, test_x, test_y, 0.75, one_model=one_model)

    # warm-up: allocations, thread pools, and the clustering stack's first import (it loads lazily)
    gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(0, "recon", (99, 0), ids), cfg, part)
    gca.aggregate_codes([np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32)], cfg, 0)
    t = {"recon": 0.0, "eval": 0.0, "upload": 0.0, "cluster": 0.0, "align": 0.0}
    t0 = time.perf_counter()
    for e in range(cfg.recon_epochs):
        t["recon"] += _timed(lambda e=e: gca_training.reconstruction_epoch(
            stack, shards, seeding.client_rngs(0, "recon", (0, e), ids), cfg, part))
        t["eval"] += _timed(evaluate)
    box = {}
    t["upload"] = _timed(lambda: box.update(up=gca_training.encode_uploads(
        stack, shards, seeding.client_rngs(0, "upload", (0,), ids), cfg.rho, part)))
    t["cluster"] = _timed(lambda: box.update(pay=gca.broadcast_payload(
        gca.aggregate_codes(box["up"], cfg, seeding.int_seed(0, "cluster", 0)))))
    summary = ClusterSummary(box["pay"]["centroids"], box["pay"]["counts"])
    for e in range(cfg.align_epochs):
        t["align"] += _timed(lambda e=e: gca_training.alignment_epoch(
            stack, shards, seeding.client_rngs(0, "align", (0, e), ids), cfg, summary, part))
    t["eval"] += _timed(evaluate)
    t_round = time.perf_counter() - t0
    sizes = cost.Sizes(clients=C, train_rows=N, val_rows=0, test_rows=M, forward=F, encoder_forward=F_enc)
    run_cfg = RunConfig(dataset=name if name in DATASET_PRESETS else "credit", clients=C, k=preset["k"],
                        rho=preset["rho"])
    gca_parts = cost.round_parts(run_cfg, sizes)  # the protocol FLOPs (experiments/cost.py)
    flops = {"recon": gca_parts["recon"], "align": gca_parts["align"], "eval": gca_parts["eval"]}
    base_parts = cost.round_parts(dataclasses.replace(run_cfg, method="fedavg"), sizes)

    # the same round's training epochs as plain per-client loops with torch's fused Adam
    refs = [ReferenceClient(copy.deepcopy(m), a, cid=i) for i, (m, a) in enumerate(zip(models, arrays))]
    for c in refs:
        c.optim = torch.optim.Adam(c.model.parameters(), lr=1e-3, fused=True)
        c.sched = torch.optim.lr_scheduler.StepLR(c.optim, 1000, 0.1)
    centroids = torch.as_tensor(summary.centroids, dtype=torch.float32)
    weights = gca.alignment_weights(torch.as_tensor(summary.counts), gamma=cfg.gamma, w_max=cfg.w_max, eps=cfg.eps)

    def loop_epochs():
        for c in refs:
            for e in range(cfg.recon_epochs):
                c.epoch(seeding.rng(0, "recon", 0, e, c.cid), cfg.batch_size, c.recon_per_row)
            for e in range(cfg.align_epochs):
                c.epoch(seeding.rng(0, "align", 0, e, c.cid), cfg.batch_size,
                        lambda xb, c=c: gca.alignment_per_row(c.model.encoder(xb), centroids, weights))

    t_loop = _timed(loop_epochs)
    t_stacked_train = t["recon"] + t["align"]

    # a baseline round: E = 10 local epochs, one evaluation of the (shared) global model
    base = StackedModels([copy.deepcopy(models[0]) for _ in arrays])
    t_local = _timed(lambda: local_training(base, shards, 0, 0, 10, part, 50))
    t_base_eval = _timed(lambda: evaluate_clients(base, shards, test_x, test_y, 0.75, one_model=True))
    return {"config": name, "C": C, "N": N, "M": M, "P": F, "t": t, "t_round": t_round, "flops": flops,
            "t_loop": t_loop, "t_stacked_train": t_stacked_train, "t_local": t_local, "t_base_eval": t_base_eval,
            "flops_local": base_parts["local"], "flops_base_eval": base_parts["eval"]}


def flower_per_round(data_dir) -> tuple[float, float]:
    """(simulator, Flower in-process engine) seconds per GCA round on the magic preset, 2 rounds each."""
    from bench_flower_engines import _flower, _sim

    cfg = RunConfig(dataset="magic", rounds=2, seed=100)
    with tempfile.TemporaryDirectory() as tmp:
        sim = _sim(cfg, Path(tmp) / "sim", data_dir)["per_round"]
        fl = _flower(cfg, Path(tmp) / "fl", data_dir, "inprocess")["per_round"]
    return sim, fl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--configs", default="magic,adult,credit-shaped")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-flower", action="store_true")
    args = ap.parse_args()
    limit_threads(args.threads)
    peak = sgemm_gflops()
    rows = [bench(name, args.data_dir) for name in args.configs.split(",")]
    peak_after = sgemm_gflops()
    flower = None if args.no_flower else flower_per_round(args.data_dir)
    print(f"torch {torch.__version__}, {args.threads} thread(s); sgemm 1024³: {peak:.1f} GFLOP/s before, "
          f"{peak_after:.1f} after (roofline = the higher); load average (1/5/15 min) {os.getloadavg()}")
    roof = max(peak, peak_after)
    print(f"\n{'config':<14} {'part':<22} {'seconds':>8} {'GFLOP':>8} {'GFLOP/s':>8} {'% roof':>7}")
    for r in rows:
        t, f = r["t"], r["flops"]
        lines = [("GCA recon epochs", t["recon"], f["recon"]), ("GCA align epochs", t["align"], f["align"]),
                 ("GCA evaluations (6)", t["eval"], f["eval"]), ("GCA upload", t["upload"], 0),
                 ("GCA clustering", t["cluster"], 0),
                 ("GCA round (all)", r["t_round"], sum(f.values())),
                 ("baseline 10 epochs", r["t_local"], r["flops_local"]),
                 ("baseline evaluation", r["t_base_eval"], r["flops_base_eval"])]
        for part, sec, fl in lines:
            rate = fl / sec / 1e9 if fl else 0.0
            print(f"{r['config']:<14} {part:<22} {sec:>8.3f} {fl / 1e9:>8.2f} {rate:>8.1f} "
                  f"{(f'{100 * rate / roof:.0f}%' if fl else '-'):>7}")
    print(f"\n{'config':<14} {'C':>3} {'N':>7} {'M':>6} {'P':>7} | GCA training epochs (5 recon + 5 align): stacked s, fused-Adam loop s, ratio")
    for r in rows:
        print(f"{r['config']:<14} {r['C']:>3} {r['N']:>7} {r['M']:>6} {r['P']:>7} | {r['t_stacked_train']:.3f} "
              f"{r['t_loop']:.3f} {r['t_loop'] / r['t_stacked_train']:.1f}x")
    if flower:
        print(f"\nmagic preset, seconds per GCA round: simulator {flower[0]:.2f}, Flower in-process engine "
              f"{flower[1]:.2f} — ratio {flower[1] / flower[0]:.1f}x")


if __name__ == "__main__":
    main()
