"""The batched engine's stacks as threads of one process against each stack in a process of its own
(``--processes``), with the local process pool beside them: does one interpreter lock bound the stacks' host work?

Small ADBench files are the case that asks: their runs are mostly host work (a round's Python, the server's code,
evaluation bookkeeping, checkpoints), which in one process holds one lock however many stacks compute at once.
Each mode runs the same bench (the bench's five methods × seed 100 × the files, R rounds) as a fresh sweep; the
modes alternate ``--repeat`` times (the machine is shared: compare the medians, and read the load average).

    .venv/bin/python benchmarks/bench_processes.py [--files 42_WBC,46_WPBC,...] [--rounds 20] [--repeat 2]
        [--workers CORES] [--data-dir ../shared/data]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

SMALL = "42_WBC,46_WPBC,15_Hepatitis,21_Lymphography,39_vertebral,45_wine,37_Stamps"


def main() -> None:
    from fedgca.experiments import bench, sweep
    from fedgca.experiments.executors import Batched, LocalPool
    from fedgca.threads import available_cores

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default=SMALL, help="ADBench file stems, comma-separated")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workers", type=int, default=available_cores(), help="stacks (or pool workers) at once")
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    a = ap.parse_args()
    adbench = Path(a.data_dir) / "adbench"
    plan = bench.plan([adbench / f"{f}.npz" for f in a.files.split(",") if f], seeds=(100,))
    configs = [dataclasses.replace(c, rounds=a.rounds) for c in plan.configs]
    modes = {"threads (one process)": Batched(workers=a.workers),
             "processes (--processes)": Batched(workers=a.workers, processes=True),
             "local pool": LocalPool(a.workers)}
    print(f"# {len(configs)} runs ({len(plan.sources)} files × {len(plan.methods)} methods, seed 100, IID), "
          f"R = {a.rounds}; {a.workers} stacks or workers at once; {available_cores()} cores")
    walls: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="fedgca-processes-") as tmp:
        for i in range(a.repeat):
            for name, where in modes.items():
                root = Path(tmp) / f"{i}-{name.split()[0]}"
                load = os.getloadavg()[0]
                t = time.perf_counter()
                res = sweep.run_sweep(configs, root, executor=where, sources=plan.sources)
                walls[name].append(time.perf_counter() - t)
                if res["failed"] or res["finished"] != len(configs):
                    raise SystemExit(f"{name}: {res['failed']}")
                print(f"{name}: {walls[name][-1]:.2f} s (load {load:.2f})", flush=True)
                shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(walls["threads (one process)"])
    print("| mode | wall s (each) | median | vs threads |")
    print("|---|---|---|---|")
    for name, w in walls.items():
        print(f"| {name} | {', '.join(f'{x:.1f}' for x in w)} | {statistics.median(w):.1f} | "
              f"{base / statistics.median(w):.2f}× |")


if __name__ == "__main__":
    main()
