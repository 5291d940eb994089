"""A run's per-round checkpoint written while the next round computes (``rundir.CheckpointWriter``, now) against
written before it (``rundir.save_checkpoint`` in the round loop, before): whole runs, side by side in one
invocation, modes alternating (the machines are shared; the load is printed).

Small files are where it shows: a round there computes in tens of milliseconds, and its checkpoint (every
client's model and Adam state, and the selected round's models: 1–8 MB) is hashed, written and fsynced twice
over with the manifest. Each line: the runs' summed wall time (each ``fedgca run`` whole, in this process: data,
rounds, checkpoints — the last one's write waited for — and the files at the end) per mode and repetition, and the
ratio of the medians.

    python benchmarks/bench_checkpoints.py [--data-dir ../shared/data] [--files 6_cardio 42_WBC ...]
        [--methods gca fedavg] [--repeat 3]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fedgca import rundir
from fedgca.cli.main import main as cli

BEFORE = "written before the next round (before)"
NOW = "written while the next round computes (now)"


class _Synchronous:
    """The round loop's checkpoint as it was: ``save_checkpoint`` in the run's thread."""

    def __init__(self, run_dir, name: str = rundir.CHECKPOINT):
        self.dir, self.name = run_dir, name

    def save(self, obj) -> None:
        rundir.save_checkpoint(self.dir, obj, self.name)

    def wait(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--files", nargs="+", default=["6_cardio", "42_WBC", "39_vertebral", "31_satimage-2",
                                                   "37_Stamps"])
    ap.add_argument("--methods", nargs="+", default=["gca", "fedavg"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)  # the runs' own lines (a small file's threshold warning) are not the point
    background = rundir.CheckpointWriter
    paths = [Path(args.data_dir) / "adbench" / f"{f}.npz" for f in args.files]
    scratch = Path(tempfile.mkdtemp(prefix="fedgca-ckpt-"))
    print(f"load {os.getloadavg()[0]:.2f}; {len(paths)} ADBench files × {', '.join(args.methods)}, seed 100, "
          f"own-data defaults (R = 20), 1 thread")
    walls: dict[str, list[float]] = {BEFORE: [], NOW: []}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # imports first
            cli(["run", "--data", str(paths[0]), "--method", "gca", "--rounds", "1", "--out", str(scratch / "warm")])
        for rep in range(args.repeat):
            for mode in (BEFORE, NOW):
                rundir.CheckpointWriter = _Synchronous if mode == BEFORE else background
                total = 0.0
                for path in paths:
                    for method in args.methods:
                        out = scratch / f"{rep}-{len(walls[mode])}-{path.stem}-{method}"
                        t = time.perf_counter()
                        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                            assert cli(["run", "--data", str(path), "--method", method, "--seed", "100",
                                        "--threads", "1", "--out", str(out)]) == 0
                        total += time.perf_counter() - t
                        shutil.rmtree(out)
                walls[mode].append(total)
    finally:
        rundir.CheckpointWriter = background
        shutil.rmtree(scratch, ignore_errors=True)
    for mode, values in walls.items():
        times = "  ".join(f"{v:6.2f} s" for v in values)
        print(f"{mode:<48} {times}   median {statistics.median(values):.2f} s")
    print(f"before / now: {statistics.median(walls[BEFORE]) / statistics.median(walls[NOW]):.2f}×   "
          f"(load {os.getloadavg()[0]:.2f} at the end)")


if __name__ == "__main__":
    main()
