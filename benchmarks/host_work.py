"""The batched engine's host work per run and round: one stack of small runs under the device engine, forced on
the CPU (as tests/test_device_engine.py forces it), so that what a GPU would run beside the interpreter lock is
cheap here and the lock-holding Python can be sampled.

    .venv/bin/python benchmarks/host_work.py [--file 42_WBC] [--runs 40] [--rounds 5]
    # where the lock is held (py-spy samples only the thread holding it; pip install py-spy, not a dependency):
    py-spy record --gil --idle -r 200 -f raw -o gil.txt -- .venv/bin/python benchmarks/host_work.py

The runs: the bench's five methods × as many seeds as ``--runs`` needs, on one ADBench file, one stack. Printed:
the wall time and the wall per run and round (set-up included); docs/performance.md ("Stacks in processes of
their own") reads a py-spy profile of it.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="42_WBC")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    a = ap.parse_args()

    import torch

    from fedgca.experiments import bench, sweep
    from fedgca.experiments.executors import Batched
    from fedgca.training import stacked

    stacked.device_engine = lambda device: True  # the GPU's code path, on the CPU
    torch.set_num_threads(1)
    per_seed = len(bench.DEFAULT_METHODS)
    plan = bench.plan([Path(a.data_dir) / "adbench" / f"{a.file}.npz"],
                      seeds=tuple(range(100, 100 + -(-a.runs // per_seed))))
    configs = [dataclasses.replace(c, rounds=a.rounds) for c in plan.configs][:a.runs]
    root = Path(tempfile.mkdtemp(prefix="fedgca-host-work-"))
    try:
        t = time.perf_counter()
        res = sweep.run_sweep(configs, root, executor=Batched(stack=len(configs)), sources=plan.sources)
        wall = time.perf_counter() - t
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{a.file}: {res['finished']} of {len(configs)} runs, R = {a.rounds}, one stack, device engine on the CPU: "
          f"{wall:.2f} s, {1000 * wall / (len(configs) * a.rounds):.1f} ms per run and round (load "
          f"{os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
