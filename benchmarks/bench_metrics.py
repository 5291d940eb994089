"""An evaluation's detection metrics (accuracy, AUROC, AUPRC of every client on the test rows) for S runs: the
host's ``detection_metrics`` (numpy, run after run: what each run's thread computed before, and still does on the
CPU engine) against the device engine's ``RowMetrics.of_many`` (torch, where the scores are: all S runs' clients as
one computation and one read back of [S·C, 3]).

Shapes: magic's evaluation by default (C = 10 clients, M = 13,376 test rows, 35 % anomalies). Each line: the best of
``--repeat`` times per evaluation of all S runs, and the host thread's CPU time in it (``time.thread_time``): on a
GPU that is what the run's threads hold the interpreter lock for, the rest is the card's. The largest difference
from the host's figures is printed beside (accuracy and AUROC must be 0; AUPRC ≤ 1e-14). Side by side in one
invocation (the machines are shared; the load is printed).

    python benchmarks/bench_metrics.py [--device cuda] [--runs 1 8 32] [--clients 10] [--rows 13376] [--repeat 5]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gmm_full import one_thread_on  # noqa: E402

from fedgca.evaluation.metrics import RowMetrics, detection_metrics  # noqa: E402


def best(fn, repeat: int) -> tuple[float, float, object]:
    """(wall s, host-thread CPU s, result) of the fastest of ``repeat`` calls."""
    out = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        result = fn()
        wall, cpu = time.perf_counter() - t, time.thread_time() - c
        if out is None or wall < out[0]:
            out = (wall, cpu, result)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rows", type=int, default=13_376)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    device = one_thread_on(args.device, f"{args.clients} clients × {args.rows:,} test rows per run")
    print(f"{'runs':>5} {'host numpy ms':>14} {'device ms':>10} {'its host CPU ms':>16} {'speed-up':>9} "
          f"{'max |Δ| acc, AUROC, AUPRC':>28}")
    rng = np.random.default_rng(0)
    y = rng.random(args.rows) < 0.35
    for runs in args.runs:
        scores = [(rng.random((args.clients, args.rows)) + 0.3 * y).astype(np.float32) for _ in range(runs)]
        thresholds = [np.quantile(s[:, : args.rows // 4], 0.75, axis=1) for s in scores]
        host_wall, _, host = best(lambda: [detection_metrics(s, y, t) for s, t in zip(scores, thresholds)],
                                  args.repeat)
        on_device = [torch.from_numpy(s).to(device) for s in scores]
        thens = [RowMetrics(torch.from_numpy(y).to(device), torch.from_numpy(t).to(device)) for t in thresholds]
        dev_wall, dev_cpu, rows = best(lambda: RowMetrics.of_many(thens, on_device), args.repeat)
        gap = [max(float(np.nanmax(np.abs(np.array(h["per_client"][k]) - r[:, j].numpy())))
                   for h, r in zip(host, rows)) for j, k in enumerate(("accuracy", "auroc", "auprc"))]
        print(f"{runs:>5} {1e3 * host_wall:>14.1f} {1e3 * dev_wall:>10.1f} {1e3 * dev_cpu:>16.1f} "
              f"{host_wall / dev_wall:>8.2f}× {gap[0]:>8.0e} {gap[1]:>8.0e} {gap[2]:>9.0e}")


if __name__ == "__main__":
    main()
