"""Training epochs with the hand-written backward pass vs autograd, side by side, same data and state.

    .venv/bin/python benchmarks/bench_training_step.py [--data-dir ../shared/data]
                                                       [--configs magic,adult,credit-shaped] [--repeat 5]

Per config, the stacked engine's epochs two ways from the same starting models:

* autograd — the loss function alone, ``run_epoch`` records a graph and calls ``torch.autograd.grad``;
* by hand  — the same loss as ``HandDifferentiated`` (``StackedModels.loss_and_grads``): the forward
  pass without a graph and ``_stacked_mlp_backward``, autograd's formulas on the same layouts.

Kinds: GCA's reconstruction epoch (all C clients), its alignment epoch (encoder only, against centroids of
the round's codes), FedProx's local epoch (the reconstruction loss plus c·||θ_i − θ^(r)||², its gradient by hand
too: compare its "by hand" time with the reconstruction epoch's for the term's own cost), and Centralized's epoch
(one model over all rows: C = 1, the per-step overhead case).
The two paths must end with bit-identical parameters (checked here; tests/test_stacked.py checks the
gradients). Timings alternate the two paths, ``--repeat`` times, and report medians; GFLOP/s counts the
protocol's FLOPs (6·F per row and reconstruction epoch, 6·F_enc per row and alignment epoch) against the
same-run sgemm rate at one thread. Compare the ratios: the machine is shared; the load average is printed.
"""
from __future__ import annotations

import copy
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_roofline import sgemm_gflops  # noqa: E402
from bench_simulator import config_args, shards_for  # noqa: E402

from fedgca import seeding  # noqa: E402
from fedgca.models import TabularAE, forward_cost  # noqa: E402
from fedgca.protocol import gca  # noqa: E402
from fedgca.training.gca import alignment_loss  # noqa: E402
from fedgca.training.local import ProximalTerm, reconstruction_loss  # noqa: E402
from fedgca.training.loop import ClientShards, HandDifferentiated, run_epoch  # noqa: E402
from fedgca.training.stacked import StackedModels  # noqa: E402


def kinds(name: str, data_dir):
    """(kind, shards, models, loss maker, keys of the trained part, protocol FLOPs of one epoch)."""
    arrays, preset = shards_for(name, data_dir)
    torch.manual_seed(0)
    models = [TabularAE(arrays[0].shape[1]) for _ in arrays]
    F, F_enc = forward_cost(models[0], arrays[0].shape[1:])
    N = sum(len(a) for a in arrays)
    shards = ClientShards.from_arrays(arrays)
    # centroids of the initial models' codes: what an alignment epoch pulls towards, at the preset K
    codes = StackedModels(copy.deepcopy(models)).encode(shards.x).detach().reshape(-1, 16).numpy()
    rng = np.random.default_rng(0)
    centroids = torch.as_tensor(codes[rng.choice(len(codes), preset["k"], replace=False)])
    weights = gca.alignment_weights(torch.ones(preset["k"]))
    pooled = ClientShards.from_arrays([np.concatenate(arrays)])
    yield ("GCA recon epoch", shards, models, lambda s: reconstruction_loss(s, 1), "all", 6 * F * N)
    yield ("GCA align epoch", shards, models, lambda s: alignment_loss(s, centroids, weights), "encoder",
           6 * F_enc * N)
    # FedProx: the round's global model near the clients' (one per parameter), SPEC's c = μ/(2B) = 1e-4
    start = StackedModels(copy.deepcopy(models)).params
    global_params = {k: v.detach()[0] + 0.01 * torch.randn_like(v.detach()[0]) for k, v in start.items()}
    yield ("FedProx epoch", shards, models, lambda s: reconstruction_loss(s, 1, ProximalTerm(1e-4, s.params,
                                                                                              global_params)),
           "all", 6 * F * N)
    yield ("Centralized epoch", pooled, models[:1], lambda s: reconstruction_loss(s, 1), "all", 6 * F * N)


def main() -> None:
    args = config_args(__doc__.splitlines()[0], configs="magic,adult,credit-shaped", repeat=5)
    peak = sgemm_gflops()
    print(f"torch {torch.__version__}, 1 thread; sgemm 1024³ {peak:.1f} GFLOP/s; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"\n{'config':<14} {'epoch':<18} {'C':>3} {'rows':>7} | {'autograd s':>10} {'by hand s':>9} "
          f"{'ratio':>6} | {'GFLOP/s':>7} {'% roof':>6} (by hand)  identical")
    for name in args.configs.split(","):
        for kind, shards, models, make_loss, part, flops in kinds(name, args.data_dir):
            stacks = {way: StackedModels(copy.deepcopy(models)) for way in ("autograd", "hand")}
            part_mask = torch.ones(shards.num_clients, dtype=torch.bool)
            ids = range(shards.num_clients)
            times = {"autograd": [], "hand": []}
            for rep in range(args.repeat + 1):  # the first repetition warms up and is not counted
                for way, stack in stacks.items():
                    loss = make_loss(stack)
                    assert isinstance(loss, HandDifferentiated)
                    fn = loss if way == "hand" else loss.value
                    keys = list(stack.params) if part == "all" else stack.encoder_keys
                    rngs = seeding.client_rngs(0, "bench", (rep,), ids)
                    t = time.perf_counter()
                    run_epoch(stack, shards, rngs, 50, fn, keys, part_mask)
                    if rep:
                        times[way].append(time.perf_counter() - t)
            same = all(torch.equal(stacks["autograd"].params[k], stacks["hand"].params[k])
                       for k in stacks["hand"].params)
            ta, th = statistics.median(times["autograd"]), statistics.median(times["hand"])
            rate = flops / th / 1e9
            print(f"{name:<14} {kind:<18} {shards.num_clients:>3} {int(shards.sizes.sum()):>7} | {ta:>10.3f} "
                  f"{th:>9.3f} {ta / th:>5.2f}x | {rate:>7.1f} {100 * rate / peak:>5.0f}%            {same}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
