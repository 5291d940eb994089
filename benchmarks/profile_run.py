"""Where one run's time goes, part by part: local epochs, scoring, the host's detection metrics, the GCA server's
clustering (and its k-means++ seeding), the uploads, checkpoints and metric files — on the CPU or a GPU.

The run is made twice with the same config, after one warm-up round: once plain (its wall time), once under
cProfile, whose cumulative time per function gives the parts. A part's time includes the parts it calls (scoring
is inside evaluation, and the evaluations after each reconstruction epoch are inside a round's steps). On a
GPU, kernels run asynchronously: a part's time there is the time the host spent in it, including waiting at the
reads back it makes — which is what bounds a launch-bound run. The profiler's own overhead is the difference of
the two walls.

    python benchmarks/profile_run.py [--dataset magic] [--method gca] [--rounds 10] [--device cpu|cuda]
        [--data-dir ../shared/data] [--threads 1]
"""
from __future__ import annotations

import argparse
import cProfile
import inspect
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path

def parts() -> list[tuple[str, object]]:
    """(label, function) per part, nested parts indented under the part that calls them."""
    from fedgca import rundir
    from fedgca.evaluation import metrics
    from fedgca.protocol.clustering import fit, kmeanspp
    from fedgca.simulation import driver, evaluation
    from fedgca.training import gca, loop

    return [
        ("a round's method steps (and the evaluations they make)", driver.Simulation.run_round),
        ("  local epochs (reconstruction, alignment, baselines)", loop.run_epoch),
        ("  GCA uploads (encode, sample)", gca.encode_uploads),
        ("  GCA clustering (cluster_codes)", fit.cluster_codes),
        ("    k-means++ seeding (host; the torch engine's)", kmeanspp.batched_kmeanspp),
        ("every evaluation (a metric row)", evaluation.metric_row),
        ("  scoring, each client's own rows", metrics.shard_scores),
        ("  scoring, the test rows (the CPU engine)", metrics.shared_scores),
        ("  scoring, every client at once (the device engine: own and test rows)", metrics._scores_at_once),
        ("  AUROC / AUPRC / accuracy (host)", metrics.detection_metrics),
        ("  AUROC / AUPRC / accuracy where scored (device engine; its read back)", metrics.RowMetrics.of_many),
        ("checkpoints (serialized here, written in the background)", rundir.CheckpointWriter.save),
        ("  waiting for the previous checkpoint's write", rundir.CheckpointWriter.wait),
        ("metrics.csv rows", rundir.MetricsWriter.write),
        ("the run's end (detectors, summary)", driver.Simulation.finish),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="magic")
    ap.add_argument("--method", default="gca")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    from fedgca.config import RunConfig
    from fedgca.simulation import runner

    torch.set_num_threads(args.threads)
    cfg = RunConfig(args.dataset, method=args.method, rounds=args.rounds, device=args.device, seed=100)
    scratch = Path(tempfile.mkdtemp(prefix="fedgca-profile-"))
    try:
        # one round first: imports, data files and the device's first kernels are paid before either timing
        runner.run(RunConfig(**{**cfg.to_dict(), "rounds": 1}), scratch / "warm", data_dir=args.data_dir,
                   progress=False)
        t = time.perf_counter()
        runner.run(cfg, scratch / "plain", data_dir=args.data_dir, progress=False)
        plain = time.perf_counter() - t
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.runcall(runner.run, cfg, scratch / "profiled", data_dir=args.data_dir, progress=False)
        profiled = time.perf_counter() - t
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    stats = pstats.Stats(prof).stats  # {(file, line, function): (calls, primitive, tottime, cumtime, callers)}
    print(f"{args.method} on {args.dataset}, R = {args.rounds}, device {args.device}, {args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.2f}: wall {plain:.2f} s plain, {profiled:.2f} s under the profiler")
    print(f"{'part':<70} {'calls':>6} {'seconds':>8} {'% wall':>7} {'ms/call':>8}")
    for label, function in parts():
        code = inspect.unwrap(function).__code__  # under a decorator (torch.no_grad), the function itself
        calls, _, _, seconds, _ = stats.get((code.co_filename, code.co_firstlineno, code.co_name), (0, 0, 0, 0, 0))
        if calls:
            print(f"{label:<70} {calls:>6} {seconds:>8.2f} {100 * seconds / profiled:>6.1f}% "
                  f"{1e3 * seconds / calls:>8.1f}")


if __name__ == "__main__":
    main()
