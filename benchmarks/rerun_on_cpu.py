"""The runs a GPU sweep or bench directory finished, computed again on this machine's CPU into another directory,
for ``benchmarks/agreement.py`` (a run's key leaves out its device, so the two directories pair run for run). The
GPU's device time is scarce; the CPU side of the comparison need not spend it.

    python3 benchmarks/rerun_on_cpu.py GPU_DIR CPU_DIR [--bench FILES_DIR] [--data-dir D] [--workers N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.experiments import sweep
from fedgca.experiments.executors import LocalPool
from fedgca.threads import available_cores


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_dir", type=Path)
    ap.add_argument("cpu_dir", type=Path)
    ap.add_argument("--bench", type=Path, help="the bench's files (for a bench directory's runs)")
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    configs = [RunConfig.from_dict(e["config"]) for e in json.loads((a.gpu_dir / sweep.SPEC_FILE).read_text())]
    done = [dataclasses.replace(c, device="cpu") for c in configs
            if (sweep.run_dir(a.gpu_dir, c) / "summary.json").exists()]
    if not done:
        print(f"{a.gpu_dir}: no finished run")
        return 1
    sources = None
    if a.bench:
        from fedgca.experiments import bench

        sources = bench.plan([a.bench]).sources
    print(f"{len(done)} of {len(configs)} runs finished in {a.gpu_dir}; computing them on the CPU in {a.cpu_dir}")
    res = sweep.run_sweep(done, a.cpu_dir, data_dir=a.data_dir, sources=sources, executor=LocalPool(available_cores() if a.workers is None else a.workers),
                          order="longest-first")
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
