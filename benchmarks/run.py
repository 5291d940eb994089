"""Every fedgca benchmark in one command; each prints its own table.

    .venv/bin/python benchmarks/run.py [--data-dir ../shared/data] [--quick]

1. ``bench_simulator.py`` — stacked simulator vs the per-client loop (ratio, GFLOP/s);
2. ``bench_gmm.py``       — the vision-preset GMM (100 inits): batched torch EM vs scikit-learn;
3. ``bench_attacks.py``   — seconds per SPEC §6 attack at preset sizes;
4. ``bench_vision.py``    — seconds per GCA / FedAvg round on the Fashion-MNIST preset, from timed components,
                            vmap over clients vs one convolution per client (the engine);
5. ``bench_scoring.py``  — test-set scoring by rows per pass (cache-sized passes vs large ones);
6. ``bench_adam.py``     — one Adam step for C stacked clients vs C per-client torch Adams;
7. ``bench_dp.py``        — a DP-GCA round vs a GCA round, DP-SGD vs Adam (record-level DP's overhead);
8. ``bench_roofline.py``  — each part of a GCA / baseline round against the same-run sgemm rate (% of roofline),
                            beside a fused-Adam per-client loop and the Flower simulation engine;
9. ``bench_stacking.py``  — what stacking 3 seeds into one computation could buy (per-seed cost, S = 1 vs 3);
10. ``bench_gmm_warm.py`` — ``--gmm-warm-start`` vs scikit-learn's fresh fit on a real run's codes;
11. ``bench_training_step.py`` — training epochs, the hand-written backward pass vs autograd (bit-identical);
12. ``bench_flower_engines.py`` — seconds per GCA round, fedgca's simulator vs the Flower apps;
13. ``bench_flower_deploy.py`` — a loopback deployment: fedgca GCA per exchange vs a no-op Flower app;
14. ``bench_loader.py``   — own data: loading a 1M × 30 CSV (read → split → encode → standardise → partition)
                            beside pandas' pyarrow read alone, time and peak memory;
15. ``bench_ray.py``      — the same small sweep through the local process pool and the Ray executor (needs
                            fedgca[ray] and the data; Ray's start-up reported apart);
16. ``bench_throughput.py`` — runs per hour of the paper's tabular grid: one core, all cores, the batched engine,
                            and the GPU (one run; the batched engine) where there is one;
17. ``bench_warm_pool.py`` — the 25-file ADBench bench and a small compare through the local pool, workers forked
                            warm vs fresh interpreters (wall time, GFLOP/s against sgemm, byte identity; needs the
                            data).
18. ``bench_secagg.py``   — a loopback deployment of 10 clients: FedAvg and FedProx beside their SecAgg+ versions
                            (seconds, exchanges and bytes per round; needs the data).
19. ``bench_gmm_full.py`` — the tabular-preset GMM (full, K = 80) for 1, 8, 64 runs: scikit-learn one after another
                            vs the torch engine's batched fit (the device engine's clustering; ``--device cuda``).
20. ``profile_run.py``   — where one run's time goes (magic GCA, R = 10): epochs, scoring, host metrics,
                            clustering, checkpoints (cProfile; ``--device cuda`` on a GPU; needs the data).

Compare ratios, not absolute seconds: the machines are shared and noisy.
``--quick`` skips the slow full-round comparisons (epochs only, one GMM repeat, no Flower).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    jobs = [
        [str(HERE / "bench_simulator.py"), *data, *(["--epoch-only"] if args.quick else [])],
        [str(HERE / "bench_gmm.py"), *(["--repeat", "1"] if args.quick else [])],
        [str(HERE / "bench_attacks.py")],
        [str(HERE / "bench_vision.py"), *data],
        [str(HERE / "bench_scoring.py"), *data, *(["--repeat", "2"] if args.quick else [])],
        [str(HERE / "bench_adam.py"), *data, *(["--repeat", "50"] if args.quick else [])],
        [str(HERE / "bench_dp.py"), *data, *(["--repeat", "1", "--configs", "academic"] if args.quick else [])],
        [str(HERE / "bench_roofline.py"), *data, *(["--configs", "magic", "--no-flower"] if args.quick else [])],
        [str(HERE / "bench_stacking.py"), *data, *(["--configs", "academic", "--repeat", "1"] if args.quick else [])],
        [str(HERE / "bench_gmm_warm.py"), *data, *(["--rounds", "3", "--repeat", "1"] if args.quick else [])],
        [str(HERE / "bench_training_step.py"), *data, *(["--configs", "magic", "--repeat", "3"] if args.quick else [])],
        [str(HERE / "bench_loader.py"), *(["--rows", "200000", "--repeat", "1"] if args.quick else [])],
        [str(HERE / "bench_throughput.py"), *data, *(["--datasets", "academic", "--rounds", "1"] if args.quick else [])],
        [str(HERE / "bench_gmm_full.py"), *(["--runs", "1", "8", "--repeat", "1"] if args.quick else [])],
    ]
    if not args.quick:
        jobs.append([str(HERE / "bench_flower_engines.py"), *data, "--rounds", "3", "--engines", "sim,inprocess"])
        if args.data_dir:  # the deployment's nodes read their partitions from the data directory
            jobs.append([str(HERE / "bench_flower_deploy.py"), *data])
            jobs.append([str(HERE / "bench_secagg.py"), *data])
    if args.data_dir:
        jobs.append([str(HERE / "bench_ray.py"), *data, *(["--repeat", "1"] if args.quick else [])])
        jobs.append([str(HERE / "bench_warm_pool.py"), *data, *(["--files", "3"] if args.quick else [])])
        jobs.append([str(HERE / "profile_run.py"), *data, *(["--rounds", "2"] if args.quick else [])])
    failed = 0
    for job in jobs:
        print(f"\n=== {' '.join(Path(j).name if j.endswith('.py') else j for j in job)}", flush=True)
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, *job])
        print(f"=== exit {rc}, {time.perf_counter() - t:.0f} s", flush=True)
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
