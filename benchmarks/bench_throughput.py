"""Throughput: runs per hour of the paper's tabular grid, one CPU core vs all cores vs the batched engine (and
the GPU when there is one), side by side in one run on one machine.

    .venv/bin/python benchmarks/bench_throughput.py [--data-dir ../shared/data] [--rounds 2]
                                                    [--datasets academic,adult,bank,magic] [--modes ...]
                                                    [--seeds 1] [--mode-seeds inproc-1=1,...]

The grid: the paper's tabular presets here × the paper's seven methods × ``--seeds`` seeds (per mode with
``--mode-seeds``: a slow mode measured on fewer runs; runs per hour stay comparable), each run cut to ``--rounds``
rounds (the full grid's R = 100 runs would take hours per mode). Each mode runs the whole grid as a sweep into a
fresh directory:

* ``cpu-1``       — the local process pool, one worker (one core, one torch thread; a fresh process per run);
* ``inproc-1``    — one run after another in this process on one core (what the batched engine saves beside
                    the pool's process starts: the stacking alone);
* ``cpu-all``     — the local process pool, one worker per core;
* ``batched-cpu`` — the batched engine (``--executor batched``) in one process on one core;
* ``batched-all`` — the batched engine with one stack per core computing at once (``--workers`` cores), as threads
                    of one process;
* ``batched-procs`` — the same, each stack in a worker process of its own (``--processes``);
* ``gpu-1``       — one run after another on the GPU (``--device cuda``, in-process), when CUDA is available;
* ``gpu-batched`` — the batched engine on the GPU, when CUDA is available (``GPU_STACKS`` stacks as threads);
* ``gpu-procs``   — the same with each stack in a worker process of its own (``--processes``).

Reported per mode: wall seconds, runs per hour of these cut runs, the protocol FLOP rate (``experiments.cost``,
the sweep's own prediction: training epochs, evaluations), its share of the matmul rate measured in the same
process (sgemm at one thread, at all threads; the GPU's), and the runs per hour of the paper's full grid that
this FLOP rate implies (its predicted FLOPs per R = 100 run; evaluation and clustering scale with R as training
does). Ratios against ``cpu-1`` are the figures to compare: the machine is shared, so the load average is printed.
All modes give the same numbers (tests/test_lockstep.py); only the time differs.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedgca import methods as registry
from fedgca.config import RunConfig
from fedgca.experiments import sweep
from fedgca.experiments.executors import Batched, LocalPool
from fedgca.threads import available_cores, limit_threads

MODES = ("cpu-1", "inproc-1", "cpu-all", "batched-cpu", "batched-all", "batched-procs", "gpu-1", "gpu-batched",
         "gpu-procs")


GPU_STACKS = 8  # stacks at once on the GPU, each on its own CUDA stream: not yet tuned on a card


def sgemm_gflops(device: str = "cpu", n: int = 2048, repeat: int = 5) -> float:
    """float32 matmul rate on ``device`` at the process's current thread count (best of ``repeat``)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        torch.mm(a, b)
    sync()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        torch.mm(a, b)
        sync()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def grid(datasets, rounds: int | None, device: str = "cpu", seeds: int = 1) -> list[RunConfig]:
    out = []
    for d in datasets:
        for m in registry.names(in_paper=True):
            for seed in range(100, 100 * (seeds + 1), 100):
                cfg = RunConfig(dataset=d, method=m, seed=seed, device=device)
                out.append(sweep.canonical(cfg if rounds is None else dataclasses.replace(cfg, rounds=rounds)))
    return out


def run_mode(mode: str, configs, data_dir, scratch: Path) -> float:
    root = scratch / mode
    shutil.rmtree(root, ignore_errors=True)
    where = {"cpu-1": LocalPool(1), "inproc-1": LocalPool(0), "cpu-all": LocalPool(available_cores()),
             "batched-cpu": Batched(), "batched-all": Batched(workers=available_cores()), "gpu-1": LocalPool(0),
             "batched-procs": Batched(workers=available_cores(), processes=True),
             "gpu-batched": Batched(workers=GPU_STACKS), "gpu-procs": Batched(workers=GPU_STACKS, processes=True)}[mode]
    t = time.perf_counter()
    res = sweep.run_sweep(configs, root, data_dir=data_dir, executor=where)
    wall = time.perf_counter() - t
    if res["failed"] or res["finished"] != len(configs):
        raise RuntimeError(f"{mode}: {res['failed']}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--datasets", default="academic,adult,bank,magic")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seeds", type=int, default=1, help="seeds per dataset and method (100, 200, ...)")
    ap.add_argument("--mode-seeds", default="", help="MODE=N,...: another seed count for some modes")
    a = ap.parse_args()
    mode_seeds = {m: int(n) for m, n in (kv.split("=") for kv in a.mode_seeds.split(",") if kv)}
    limit_threads(1)
    cuda = torch.cuda.is_available()
    datasets = [d for d in a.datasets.split(",") if d]
    modes = [m for m in a.modes.split(",") if m and (cuda or not m.startswith("gpu"))]
    skipped = [m for m in a.modes.split(",") if m.startswith("gpu") and not cuda]
    cores = available_cores()
    rate_1 = sgemm_gflops()
    torch.set_num_threads(cores)
    rate_all = sgemm_gflops()
    torch.set_num_threads(1)
    rate_gpu = sgemm_gflops("cuda", 8192) if cuda else None
    device_name = torch.cuda.get_device_name(0) if cuda else None

    full = sweep.predicted_flops(grid(datasets, None), a.data_dir)
    full_per_run = sum(full.values()) / len(full)
    print(f"# throughput: {len(datasets)} dataset(s) × {len(registry.names(in_paper=True))} methods × {a.seeds} "
          f"seed(s) ({', '.join(f'{m}: {n}' for m, n in mode_seeds.items()) or 'every mode'}), "
          f"R = {a.rounds} per run; the full grid's runs (R = 100) predict {full_per_run / 1e12:.2f} TFLOP each")
    print(f"# {cores} core(s); sgemm {rate_1:.0f} GFLOP/s on one thread, {rate_all:.0f} on {cores}"
          + (f"; GPU {device_name}: {rate_gpu:.0f} GFLOP/s" if cuda else
             f"; no GPU here: {', '.join(skipped)} not measured" if skipped else ""))
    print(f"# load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedgca-throughput-") as tmp:
        for mode in modes:
            configs = grid(datasets, a.rounds, "cuda" if mode.startswith("gpu") else "cpu", mode_seeds.get(mode, a.seeds))
            flops = sum(sweep.predicted_flops(configs, a.data_dir).values())
            wall = run_mode(mode, configs, a.data_dir, Path(tmp))
            peak = rate_gpu if mode.startswith("gpu") else rate_all if mode in ("cpu-all", "batched-all", "batched-procs") else rate_1
            rows.append((mode, len(configs), wall, 3600 * len(configs) / wall, flops / wall / 1e9, peak,
                         3600 * flops / wall / full_per_run))
    base = rows[0][3]  # runs per hour: modes may have run different numbers of seeds
    print("| mode | runs | wall s | runs/h (R = %d) | GFLOP/s | %% of matmul rate | full-grid runs/h | speed vs %s |"
          % (a.rounds, rows[0][0]))
    print("|---|---|---|---|---|---|---|---|")
    for mode, n_runs, wall, rph, gf, peak, full_rph in rows:
        print(f"| {mode} | {n_runs} | {wall:.1f} | {rph:.0f} | {gf:.2f} | {100 * gf / peak:.1f} % | "
              f"{full_rph:.1f} | {rph / base:.2f}× |")
    print(f"# load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
