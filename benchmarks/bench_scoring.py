"""Time test-set scoring (every client's model on the shared test rows) by rows per pass.

GCA evaluates after every reconstruction epoch, so on magic (10 clients × 13,376 test rows)
scoring costs more than training. This prints seconds per ``shared_scores`` call for several
pass sizes, the ratio to fedgca's default pass size, and whether the scores are identical.
Times are the minimum over ``--repeat`` calls, on ``--threads`` torch threads.

    python benchmarks/bench_scoring.py [--dataset magic] [--data-dir DIR] [--rows 4096 1638 512 128 64]
"""
from __future__ import annotations

import argparse
import os
import time

import torch

import fedgca.evaluation.metrics as metrics
from fedgca.config import RunConfig
from fedgca.simulation.federation import build_federation


def seconds(clients, x, repeat: int) -> tuple[float, torch.Tensor]:
    best, scores = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        scores = metrics.shared_scores(clients, x)
        best = min(best, time.perf_counter() - t)
    return best, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="magic")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows", type=int, nargs="+", default=[4096, 1638, 512, 256, 128, 64])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fed = build_federation(RunConfig(dataset=args.dataset, method="gca").resolved(), args.data_dir)
    clients, x = fed.clients, fed.test_x
    default_rows = metrics.chunk_rows(clients.num_clients, x.shape[1:])
    seconds(clients, x, 1)  # warm-up: first-call allocations
    base, reference = seconds(clients, x, args.repeat)
    print(f"{args.dataset}: {clients.num_clients} clients × {len(x)} test rows, {args.threads} thread(s), "
          f"load average {os.getloadavg()[0]:.2f}; default pass = {default_rows} rows ({base:.3f} s)")
    print(f"{'rows/pass':>10} {'seconds':>9} {'× default':>10}  scores")
    original = metrics.chunk_rows
    try:
        for rows in args.rows:
            metrics.chunk_rows = lambda num_clients, row_shape, rows=rows: rows
            s, scores = seconds(clients, x, args.repeat)
            same = "identical" if torch.equal(scores, reference) else \
                f"max rel diff {float(((scores - reference).abs() / reference.abs()).max()):.1e}"
            print(f"{rows:>10} {s:>9.3f} {s / base:>10.2f}  {same}")
    finally:
        metrics.chunk_rows = original


if __name__ == "__main__":
    main()
