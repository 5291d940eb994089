"""Seconds per GCA and FedAvg round on a vision preset, from timed components, for two stacked engines.

    .venv/bin/python benchmarks/bench_vision.py [--data-dir ../shared/data] [--dataset fashion_mnist]
                                                [--threads 1] [--engines vmap,per-client] [--device cpu|cuda]

Builds the preset federation (Fashion-MNIST: C = 20, 300 images each, ConvAE with P = 334,609 and
F = 16.8 M multiply-adds per image, K = 10, ρ = 0.1) and times, with the simulator's own functions:
one stacked reconstruction epoch, one alignment epoch, one evaluation of all clients (thresholds on
their shards + the 2,000-image test set), one 100-init diagonal GMM fit on a real round's 600 uploaded
codes. Then

    GCA round    = 5 recon + 5 align epochs + 6 evaluations (paper protocol) + GMM,
    FedAvg round = 10 local epochs + 1 evaluation of the global model (+ an average, negligible).

Side by side, the same federation (same seed, same starting models) under each engine for the conv AE's
client axis: ``vmap`` (torch.func's batching rule: C convolutions become one grouped convolution; the
engine before this benchmark) and ``per-client`` (one convolution per client, the engine now;
``StackedModels._per_client``). Protocol FLOPs per ``fedgca.experiments.cost`` (6F per trained image,
6F_enc per aligned image, 2F per scored image), against this run's sgemm rate at the same thread count.
The round totals are sums of measured components (a full run measures the same: summary.json's
wall_seconds). ``--device cuda``: the same on a GPU (each component timed to its last kernel; the roof is the card's
sgemm rate), where one grouped convolution (vmap) may beat the CPU's choice of one convolution per client.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_roofline import sgemm_gflops  # noqa: E402

from fedgca import seeding  # noqa: E402
from fedgca.config import RunConfig  # noqa: E402
from fedgca.data.source import DataSource  # noqa: E402
from fedgca.experiments import cost  # noqa: E402
from fedgca.protocol import gca  # noqa: E402
from fedgca.protocol.clustering import ClusterSummary  # noqa: E402
from fedgca.algorithms import method_class  # noqa: E402
from fedgca.simulation import evaluation  # noqa: E402
from fedgca.simulation.driver import Simulation  # noqa: E402
from fedgca.simulation.federation import build_federation  # noqa: E402
from fedgca.threads import limit_threads  # noqa: E402
from fedgca.training import gca as gca_training  # noqa: E402


_sync = (lambda: None)  # torch.cuda.synchronize under --device cuda: a component's time includes its kernels


def timed(fn) -> float:
    _sync()
    t = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - t


def use_vmap(clients) -> None:
    """The engine before: torch.func.vmap over the client axis for the conv parts."""
    from torch.func import vmap

    clients._encode, clients._decode = vmap(clients._call("encoder")), vmap(clients._call("decoder"))


def components(cfg: RunConfig, data_dir, engine: str) -> dict:
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    if engine == "vmap":
        use_vmap(fed.clients)
    method = Simulation(fed)
    g, part, ids = method.method.gcfg, fed.participants(0), range(fed.num_clients)
    out = {"fed": fed, "g": g}
    out["recon"] = timed(lambda: gca_training.reconstruction_epoch(
        fed.clients, fed.shards, seeding.client_rngs(0, "recon", (0, 0), ids), g, part))
    uploads = gca_training.encode_uploads(fed.clients, fed.shards, seeding.client_rngs(0, "upload", (0,), ids),
                                          g.rho, part)
    box = {}
    out["gmm"] = timed(lambda: box.setdefault("s", gca.aggregate_codes(uploads, g, 0)))
    summary = ClusterSummary(box["s"].centroids, box["s"].counts)
    out["align"] = timed(lambda: gca_training.alignment_epoch(
        fed.clients, fed.shards, seeding.client_rngs(0, "align", (0, 0), ids), g, summary, part))
    out["eval"] = timed(lambda: evaluation.metric_row(method.deployed, 0, "round", -1))
    # FedAvg's round on the same federation: its evaluation scores the test set once, with the global model
    fedavg = Simulation(fed, method_class("fedavg")(fed.cfg, fed.dataset.kind, fed.shards.sizes))
    out["eval_one"] = timed(lambda: evaluation.metric_row(fedavg.deployed, 0, "round", -1))
    out["codes"], out["k_kept"] = sum(len(u) for u in uploads), box["s"].centroids.shape[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--dataset", default="fashion_mnist")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engines", default="vmap,per-client")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    limit_threads(args.threads)
    cfg = RunConfig(dataset=args.dataset, method="gca", rounds=1, device=args.device).resolved()
    engines = args.engines.split(",")
    if args.device.startswith("cuda"):
        import torch

        from bench_throughput import sgemm_gflops as device_sgemm

        global _sync
        _sync = torch.cuda.synchronize
        rate = (lambda: device_sgemm("cuda", 8192))
    else:
        rate = sgemm_gflops
    roof = rate()
    runs = {e: components(cfg, args.data_dir, e) for e in engines}
    roof = max(roof, rate())
    first = runs[engines[0]]
    fed, g = first["fed"], first["g"]
    sizes = cost.sizes(cfg, DataSource.builtin(cfg.dataset, args.data_dir))
    parts = cost.round_parts(cfg, sizes)
    fl = {"recon": parts["recon"] / g.recon_epochs, "align": parts["align"] / g.align_epochs,
          "eval": parts["eval"] / (g.recon_epochs + 1), "gmm": 0.0}
    print(f"{args.dataset}: C = {fed.num_clients}, {int(fed.shards.sizes.sum())} training images, "
          f"U = {first['codes']} codes of {fed.latent_dim} dims, K = {g.k} ({first['k_kept']} kept); "
          f"F = {sizes.forward:,} multiply-adds per image; device {args.device}, {args.threads} thread(s); "
          f"sgemm {roof:.1f} GFLOP/s; "
          f"load average {tuple(round(x, 2) for x in os.getloadavg())}")
    head = "".join(f" {e + ' s':>15} {'% roof':>7}" for e in engines)
    print(f"\n{'component':<52} {'GFLOP':>8}{head}" + (f" {'ratio':>7}" if len(engines) == 2 else ""))

    def line(name, sec, flops):
        cells = "".join(f" {s:>15.1f} {(f'{100 * flops / s / 1e9 / roof:.0f}%' if flops else '-'):>7}" for s in sec)
        ratio = f" {sec[0] / sec[1]:>6.2f}x" if len(sec) == 2 else ""
        print(f"{name:<52} {flops / 1e9:>8.0f}{cells}{ratio}")

    names = {"recon": "1 reconstruction epoch (all clients)", "align": "1 alignment epoch",
             "eval": "1 evaluation (thresholds + test set, all clients)", "gmm": "GMM fit, diag, 100 inits"}
    for part_name, label in names.items():
        line(label, [runs[e][part_name] for e in engines], fl[part_name])
    n_eval = g.recon_epochs + 1
    gca_round = [g.recon_epochs * r["recon"] + g.align_epochs * r["align"] + n_eval * r["eval"] + r["gmm"]
                 for r in runs.values()]
    line(f"GCA round = {g.recon_epochs} recon + {g.align_epochs} align + {n_eval} evals + GMM", gca_round,
         sum(parts.values()))
    fedavg = cost.round_parts(RunConfig(dataset=args.dataset, method="fedavg", rounds=1).resolved(), sizes)
    line("1 FedAvg evaluation (the test set scored once)", [r["eval_one"] for r in runs.values()], fedavg["eval"])
    line(f"FedAvg round = {cfg.local_epochs} local epochs + 1 eval",
         [cfg.local_epochs * r["recon"] + r["eval_one"] for r in runs.values()], sum(fedavg.values()))


if __name__ == "__main__":
    main()
