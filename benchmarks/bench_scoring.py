"""Time test-set scoring (every client's model on the shared test rows): one model at a time, by rows per pass,
beside the stacked passes the engine used before.

GCA evaluates after every reconstruction epoch, so scoring is most of a GCA run's work (87 % of a magic
round's protocol FLOPs). ``fedgca.evaluation.metrics.shared_scores`` scores one client's model at a time in
``chunk_rows`` passes (512 rows for the MLP). Side by side in one run: that default, other pass sizes, and
the previous implementation — every client's model in one stacked ``baddbmm`` pass per block of rows, blocks
sized to keep the [C, rows, 256] activations in cache (2^19 elements) — each with its seconds (minimum over
``--repeat`` calls), GFLOP/s (2F per scored row), the ratio to the default, and whether its scores are
identical to the default's. For images (``--dataset fashion_mnist``), also the conv AE's passes in plain
NCHW layout, as the engine scored before channels-last.

    python benchmarks/bench_scoring.py [--dataset magic] [--data-dir DIR] [--rows 512 1024 2048 4096]
"""
from __future__ import annotations

import argparse
import os
import time

import torch

import fedgca.evaluation.metrics as metrics
from fedgca.config import RunConfig
from fedgca.models import forward_cost
from fedgca.protocol.losses import reconstruction_per_row
from fedgca.data.source import DataSource
from fedgca.simulation.federation import build_federation
from fedgca.threads import limit_threads


@torch.no_grad()
def stacked_scores(clients, x, budget: int = 1 << 19) -> torch.Tensor:
    """The engine before: every client's model on the same block of rows in one stacked pass."""
    rows = max(16, min(4096, budget // (clients.num_clients * max(int(x[0].numel()), 256))))
    step = 1 << (rows.bit_length() - 1)
    out = []
    for start in range(0, len(x), step):
        part = x[start : start + step]
        chunk = part.unsqueeze(0).expand(clients.num_clients, *part.shape)
        out.append(reconstruction_per_row(chunk, clients.reconstruct(chunk), x.dim() - 1))
    return torch.cat(out, dim=1)


@torch.no_grad()
def nchw_scores(clients, x) -> torch.Tensor:
    """The engine before channels-last: each client's conv AE on NCHW images and weights."""
    def reconstruct(i, part):
        params = {k: v[i].detach() for k, v in clients.params.items()}
        return clients._call("decoder")(params, clients._call("encoder")(params, part))

    own = clients.reconstruct_client
    clients.reconstruct_client = reconstruct
    try:
        return metrics.shared_scores(clients, x)
    finally:
        clients.reconstruct_client = own


def seconds(fn, repeat: int) -> tuple[float, torch.Tensor]:
    best, scores = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        scores = fn()
        best = min(best, time.perf_counter() - t)
    return best, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="magic")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    limit_threads(args.threads)
    fed = build_federation(RunConfig(dataset=args.dataset, method="gca").resolved(),
                           DataSource.builtin(args.dataset, args.data_dir))
    clients, x = fed.clients, fed.test_x
    flops = 2 * forward_cost(fed.template, tuple(x.shape[1:]))[0] * clients.num_clients * len(x)
    default_rows = metrics.chunk_rows(x.shape[1:])
    seconds(lambda: metrics.shared_scores(clients, x), 1)  # warm-up: first-call allocations
    base, reference = seconds(lambda: metrics.shared_scores(clients, x), args.repeat)
    print(f"{args.dataset}: {clients.num_clients} clients × {len(x)} test rows ({flops / 1e9:.2f} GFLOP), "
          f"{args.threads} thread(s), load average {tuple(round(v, 2) for v in os.getloadavg())}")
    print(f"{'implementation':<34} {'seconds':>8} {'GFLOP/s':>8} {'÷ default':>10}  scores")

    def line(name, s, scores):
        same = "identical" if torch.equal(scores, reference) else \
            f"max rel diff {float(((scores - reference).abs() / reference.abs()).max()):.1e}"
        print(f"{name:<34} {s:>8.3f} {flops / s / 1e9:>8.1f} {s / base:>10.2f}  {same}")

    line(f"one model at a time, {default_rows} rows (default)", base, reference)
    original = metrics.chunk_rows
    try:
        for rows in args.rows:
            if rows == default_rows:
                continue
            metrics.chunk_rows = lambda row_shape, rows=rows: rows
            line(f"one model at a time, {rows} rows", *seconds(lambda: metrics.shared_scores(clients, x), args.repeat))
    finally:
        metrics.chunk_rows = original
    if x.dim() == 4:
        line("NCHW layout (before)", *seconds(lambda: nchw_scores(clients, x), args.repeat))
    else:
        line("stacked passes (before)", *seconds(lambda: stacked_scores(clients, x), args.repeat))


if __name__ == "__main__":
    main()
