"""What record-level DP costs: a DP-GCA round against a GCA round, DP-SGD local training against Adam.

    .venv/bin/python benchmarks/bench_dp.py [--data-dir ../shared/data] [--configs magic,academic] [--repeat 3]

Per config, interleaved repeats on the same stacked clients (min of the repeats, 1 torch thread):

* the training part of a GCA round (T_recon + upload + clustering + T_align), plain vs DP
  (per-example clipping by the ghost-norm trick, per-step noise, without-replacement batches);
* a whole simulated round, evaluations included (``fedgca run``'s wall time over 2 rounds);
* one local epoch of the parameter-sharing client, Adam vs DP-SGD.

The ratio DP / plain is the figure (issue #18 asks ≤ 3× per GCA round). Compare ratios, not seconds.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_simulator import config_args, shards_for, stacked_round  # noqa: E402

from fedgca.config import RunConfig  # noqa: E402
from fedgca.models import TabularAE  # noqa: E402
from fedgca.protocol.dp import RecordDP  # noqa: E402
from fedgca.protocol.gca import GCAConfig  # noqa: E402
from fedgca.simulation.runner import run  # noqa: E402
from fedgca.training.local import local_training  # noqa: E402
from fedgca.training.loop import ClientShards  # noqa: E402
from fedgca.training.stacked import StackedModels  # noqa: E402

NOISE = RecordDP(grad_clip=1.0, grad_sigma=1.0, code_clip=1.0, code_sigma=1.0)


def _stack(arrays):
    torch.manual_seed(0)
    return StackedModels([TabularAE(arrays[0].shape[1]) for _ in arrays])


def bench(name: str, data_dir, repeat: int) -> dict:
    arrays, preset = shards_for(name, data_dir)
    shards = ClientShards.from_arrays(arrays)
    plain = GCAConfig(k=preset["k"], rho=preset["rho"])
    private = dataclasses.replace(plain, dp=NOISE)
    part = torch.ones(len(arrays), dtype=torch.bool)
    times = {"gca": [], "dpgca": [], "adam": [], "dpsgd": []}
    stacks = {key: _stack(arrays) for key in times}
    for r in range(repeat):
        for key, cfg in (("gca", plain), ("dpgca", private)):
            t = time.perf_counter()
            stacked_round(stacks[key], shards, cfg, r)
            times[key].append(time.perf_counter() - t)
        for key, noise in (("adam", None), ("dpsgd", NOISE)):
            t = time.perf_counter()
            local_training(stacks[key], shards, 0, r, 1, part, 50, dp=noise)
            times[key].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in times.items()}
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("gca", "dpgca"):
            cfg = RunConfig(dataset=name, method=method, rounds=2, seed=100)
            walls[method] = run(cfg, Path(tmp) / method, data_dir=data_dir, progress=False)["wall_seconds"] / 2
    return {"config": name, "clients": len(arrays), "rows": int(sum(len(a) for a in arrays)), **best,
            "run_gca": walls["gca"], "run_dpgca": walls["dpgca"]}


def main() -> None:
    args = config_args(__doc__.splitlines()[0])
    rows = [bench(name, args.data_dir, args.repeat) for name in args.configs.split(",")]
    print(f"load average (1/5/15 min) at the end: {os.getloadavg()}; 1 torch thread; seconds = min of {args.repeat} repeats")
    print(f"{'config':<10} {'C':>3} {'rows':>7} | {'GCA train':>9} {'DP-GCA':>8} {'ratio':>6} | "
          f"{'GCA round':>9} {'DP-GCA':>8} {'ratio':>6} | {'Adam ep':>8} {'DP-SGD':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['config']:<10} {r['clients']:>3} {r['rows']:>7} | {r['gca']:>9.3f} {r['dpgca']:>8.3f} "
              f"{r['dpgca'] / r['gca']:>6.2f} | {r['run_gca']:>9.3f} {r['run_dpgca']:>8.3f} "
              f"{r['run_dpgca'] / r['run_gca']:>6.2f} | {r['adam']:>8.3f} {r['dpsgd']:>8.3f} "
              f"{r['dpsgd'] / r['adam']:>6.2f}")
    print("GCA train: T_recon + upload + clustering + T_align epochs (no evaluation); GCA round: a simulated "
          "round with its 6 evaluations (fedgca run, 2 rounds); Adam ep: one local epoch of every client.")


if __name__ == "__main__":
    main()
