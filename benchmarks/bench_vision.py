"""Seconds per GCA and FedAvg round on a vision preset, from timed components.

    .venv/bin/python benchmarks/bench_vision.py [--data-dir ../shared/data] [--dataset fashion_mnist]

Builds the preset federation (Fashion-MNIST: C = 20, 300 images each, ConvAE with
P = 334,609, K = 10, ρ = 0.1) and times, with the simulator's own functions:
one stacked reconstruction epoch, one alignment epoch, one evaluation of all
clients (thresholds on their shards + the 2,000-image test set), one 100-init
diagonal GMM fit on a real round's 600 uploaded codes. Then

    GCA round    = 5 recon + 5 align epochs + 6 evaluations (paper protocol) + GMM,
    FedAvg round = 10 local epochs + 1 evaluation (+ an average, negligible).

Prints the table. The component times are measurements; the round totals are
their sums (a full run measures the same, see summary.json's wall_seconds).
"""
from __future__ import annotations

import argparse
import time

import torch

from fedgca import seeding
from fedgca.config import RunConfig
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.simulation.federation import build_federation
from fedgca.simulation.registry import method_class
from fedgca.simulation.runner import _evaluate
from fedgca.training import gca as gca_training


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--dataset", default="fashion_mnist")
    args = ap.parse_args()
    cfg = RunConfig(dataset=args.dataset, method="gca", rounds=1).resolved()
    fed = build_federation(cfg, args.data_dir)
    method = method_class("gca")(fed)
    g, part, ids = method.gcfg, fed.participants(0), range(fed.num_clients)
    t_recon = timed(lambda: gca_training.reconstruction_epoch(fed.clients, fed.shards,
                                                     seeding.client_rngs(0, "recon", (0, 0), ids), g, part))
    uploads = gca_training.encode_uploads(fed.clients, fed.shards, seeding.client_rngs(0, "upload", (0,), ids), g.rho, part)
    box = {}
    t_gmm = timed(lambda: box.setdefault("s", gca.aggregate_codes(uploads, g, 0)))
    summary = ClusterSummary(box["s"].centroids, box["s"].counts)
    t_align = timed(lambda: gca_training.alignment_epoch(fed.clients, fed.shards,
                                                seeding.client_rngs(0, "align", (0, 0), ids), g, summary, part))
    t_eval = timed(lambda: _evaluate(fed, method, 0, "round", -1))
    gca_round = g.recon_epochs * t_recon + g.align_epochs * t_align + (g.recon_epochs + 1) * t_eval + t_gmm
    fedavg_round = cfg.local_epochs * t_recon + t_eval
    print(f"{args.dataset}: C = {fed.num_clients}, {int(fed.shards.sizes.sum())} training images, "
          f"U = {sum(len(u) for u in uploads)} codes of {fed.latent_dim} dims, K = {g.k}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, sec in [("1 reconstruction epoch (all clients)", t_recon), ("1 alignment epoch", t_align),
                      ("1 evaluation (thresholds + test set, all clients)", t_eval),
                      (f"GMM fit, diag, {box['s'].centroids.shape[0]} components kept, 100 inits", t_gmm),
                      ("GCA round = 5 recon + 5 align + 6 evals + GMM", gca_round),
                      ("FedAvg round = 10 local epochs + 1 eval", fedavg_round)]:
        print(f"{name:<58} {sec:>8.1f} s")


if __name__ == "__main__":
    main()
