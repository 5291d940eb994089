"""How many per-round checkpoints this machine's disk takes per second, the way runs write them
(``rundir.CheckpointWriter``: serialized in the run's thread; hashed, written, fsynced and swapped in with the
manifest, pending then settled, by a thread of its own; one write in flight per run).

Every run writes its checkpoint every round — six fsyncs with the manifest's — so the disk caps how many
run-rounds a machine completes per second, whatever computes them. On this 2-core CPU a run-round takes tens of
milliseconds, and the disk is far from the cap; a GPU finishing the 25-file bench at twice sixteen cores needs
≈ 800 run-rounds a second (docs/performance.md). This measures the cap: ``--processes`` processes (a stack each,
as ``--executor batched --processes``) of ``--runs`` runs each, every run saving a state of ``--mb`` MB (38
tensors, a tabular run's checkpoint) as fast as its writer takes it, for ``--seconds``.

    python benchmarks/bench_checkpoint_disk.py [--processes 1 2] [--runs 1 8] [--mb 1.3 8] [--seconds 3]
        [--dir DIR]   # on the file system the runs will write to (default: a temporary directory)
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path

TENSORS = 38  # storages in a GCA run's checkpoint (academic, counted: docs/performance.md)


def _state(mb: float):
    import torch

    n = max(1, int(mb * 2**20 / 4 / TENSORS))
    g = torch.Generator().manual_seed(0)
    return {"clients": {f"t{i}": torch.rand(n, generator=g) for i in range(TENSORS)},
            "rows": [{"round": r, "accuracy": 0.5, "auroc": 0.5} for r in range(20)], "round": 19}


def _writer_process(root: str, runs: int, mb: float, seconds: float, start, counts) -> None:
    from fedgca import rundir

    state = _state(mb)
    writers = []
    for i in range(runs):
        d = Path(root) / f"{os.getpid()}-{i}"
        d.mkdir(parents=True)
        writers.append(rundir.CheckpointWriter(d))
    start.wait()
    done, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for w in writers:
            w.save(state)  # waits for this run's previous write, as a run does
            done += 1
    for w in writers:
        w.wait()
    counts.put(done)


def measure(root: Path, processes: int, runs: int, mb: float, seconds: float) -> float:
    ctx = mp.get_context("fork")
    start, counts = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(str(root), runs, mb, seconds, start, counts))
             for _ in range(processes)]
    for p in procs:
        p.start()
    start.wait()
    t = time.perf_counter()
    total = sum(counts.get() for _ in procs)
    wall = time.perf_counter() - t
    for p in procs:
        p.join()
    return total / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--mb", type=float, nargs="+", default=[1.3])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    import torch  # noqa: F401 — imported once here: the forked writers start warm
    from fedgca import rundir  # noqa: F401

    root = Path(tempfile.mkdtemp(prefix="fedgca-ckpt-disk-", dir=a.dir))
    print(f"checkpoints of {TENSORS} tensors, {a.seconds:g} s each, load {os.getloadavg()[0]:.2f}")
    try:
        for mb in a.mb:
            for p in a.processes:
                for r in a.runs:
                    rate = measure(root, p, r, mb, a.seconds)
                    print(f"{mb:5.1f} MB, {p:3d} processes x {r:3d} runs: {rate:7.0f} checkpoints/s "
                          f"({rate * mb:5.0f} MB/s)")
                    for d in root.iterdir():
                        shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
