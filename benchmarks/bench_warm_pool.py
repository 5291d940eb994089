"""A fixed bench through the local pool, its workers forked warm against fresh interpreters, side by side.

    .venv/bin/python benchmarks/bench_warm_pool.py [--data-dir ../shared/data] [--files N] [--workers 2]
                                                   [--methods ...] [--modes spawn,forkserver] [--part bench,compare]

The bench: the ADBench files in ``DATA/adbench`` (25 of them; ``--files N`` the first N) × the bench's default
methods × seed 100, IID, with the default peers — ``fedgca bench`` as a user runs it, once per mode, each in a fresh
directory:

* ``spawn``: every run in a fresh interpreter that imports Python, torch, scikit-learn, pandas and fedgca again (the
  local executor until issue #52);
* ``forkserver``: every run in a process forked from a server that imported them once (``experiments/pool.py``).

Printed per mode: wall time, the protocol TFLOP of its runs (``experiments/cost.py``), GFLOP/s and their share of the
machine's sgemm rate (one thread, measured in this run, × the workers), and where the time went: the runs' own
seconds (summary ``wall_seconds``: training, evaluation, clustering, checkpoints), the peers' fits, and the rest
(process start, imports, reading the file, writing the run directory). Then whether every run's metrics.csv,
metrics_clients.csv, comm.json and per-client detector files are byte-identical between the modes.

Then ``compare`` with small runs (academic, 4 methods × 6 seeds, R = 2: a second each), the same two modes: what a
researcher iterating on a grid sees. Compare ratios: the machine is shared; the load average is printed before and
after each mode.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_roofline import sgemm_gflops  # noqa: E402

from fedgca.experiments import bench, cost  # noqa: E402
from fedgca.experiments.pool import START_ENV, START_METHODS  # noqa: E402
from fedgca.threads import limit_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("metrics.csv", "metrics_clients.csv", "comm.json")


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run_mode(mode: str, files: list[Path], out: Path, workers: int, methods: str) -> dict:
    cmd = [sys.executable, "-m", "fedgca.cli.main", "bench", *map(str, files), "--seeds", "100", "--workers",
           str(workers), "--methods", methods, "--out", str(out), "--no-plots"]
    before = _load()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, START_ENV: mode}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: fedgca bench failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    runs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/summary.json"))]
    peers = [json.loads(p.read_text()) for p in sorted((out / bench.PEER_DIR).glob("*/*.json"))]
    return {"mode": mode, "wall": wall, "load_before": before, "load_after": _load(), "runs": len(runs),
            "run_seconds": sum(s["wall_seconds"] for s in runs), "peers": len(peers),
            "peer_seconds": sum(float(p.get("seconds", 0.0)) for p in peers),
            "warning": "leaked semaphore" in proc.stderr}


def time_compare(mode: str, data_dir: str, out: Path, workers: int) -> tuple[float, int]:
    """(wall seconds, runs) of a small `fedgca compare` in ``mode``."""
    cmd = [sys.executable, "-m", "fedgca.cli.main", "compare", "--dataset", "academic", "--data-dir", data_dir,
           "--methods", "single,fedavg,fedprox,gca", "--seeds", "1,2,3,4,5,6", "--rounds", "2", "--workers",
           str(workers), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, START_ENV: mode}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: fedgca compare failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, len(list((out / "runs").glob("*/summary.json")))


def identical(a: Path, b: Path) -> tuple[int, int, list[str]]:
    """(runs compared, runs whose every compared file is byte-identical, the files that differ)."""
    differ, n, same = [], 0, 0
    for run in sorted((a / "runs").iterdir()):
        other = b / "runs" / run.name
        names = [*COMPARED, *(str(p.relative_to(run)) for p in sorted((run / "clients").rglob("*")) if p.is_file())]
        bad = [f"{run.name}/{f}" for f in names if (run / f).read_bytes() != (other / f).read_bytes()]
        n, same, differ = n + 1, same + (not bad), differ + bad
    return n, same, differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--files", type=int, default=None, help="the first N files (natural order) [default: all]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--methods", default=",".join(bench.DEFAULT_METHODS))
    ap.add_argument("--modes", default=",".join(reversed(START_METHODS)))
    ap.add_argument("--part", default="bench,compare", help="bench, compare, or both")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if "bench" in args.part:
        bench_part(args, modes)
    if "compare" in args.part:
        with tempfile.TemporaryDirectory(prefix="fedgca-warm-compare-") as tmp:
            walls = {}
            for mode in modes:
                before = _load()
                walls[mode], n = time_compare(mode, args.data_dir, Path(tmp) / mode, args.workers)
                print(f"compare, {n} small runs (academic, R = 2), {mode:>10}: {walls[mode]:6.1f} s wall | load "
                      f"{before} → {_load()}")
            if len(modes) == 2:
                print(f"speed-up {modes[1]} / {modes[0]}: {walls[modes[0]] / walls[modes[1]]:.2f}×")
    return 0


def bench_part(args, modes: list[str]) -> None:
    files, _ = bench.discover([Path(args.data_dir) / "adbench"])
    files = files[: args.files] if args.files else files
    plan = bench.plan(files, methods=tuple(args.methods.split(",")), seeds=(100,))
    tflop = sum(cost.run_flops(c, cost.sizes(c, plan.sources[c.dataset])) for c in plan.configs) / 1e12
    limit_threads(1)
    sgemm = sgemm_gflops()
    print(f"# fedgca bench: {len(files)} files × {args.methods} × seed 100, IID, default peers; --workers "
          f"{args.workers}; {len(plan.configs)} runs, {tflop:.2f} TFLOP of protocol work (experiments/cost.py)")
    print(f"# sgemm, 1 thread: {sgemm:.1f} GFLOP/s; roofline of {args.workers} workers: {sgemm * args.workers:.1f}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="fedgca-warm-pool-") as tmp:
        for mode in modes:
            results[mode] = r = run_mode(mode, files, Path(tmp) / mode, args.workers, args.methods)
            rate = tflop * 1e3 / r["wall"]
            rest = r["wall"] * args.workers - r["run_seconds"] - r["peer_seconds"]
            print(f"{mode:>10}: {r['wall']:7.1f} s wall  {rate:6.1f} GFLOP/s = {100 * rate / (sgemm * args.workers):4.1f} % "
                  f"of sgemm × {args.workers} | worker-seconds: runs {r['run_seconds']:6.1f} ({r['runs']}), peers "
                  f"{r['peer_seconds']:5.1f} ({r['peers']}), start/imports/files/idle {rest:6.1f} | load "
                  f"{r['load_before']} → {r['load_after']}{' | leaked-semaphore warning' if r['warning'] else ''}")
        modes = list(results)
        if len(modes) == 2:
            a, b = (results[m] for m in modes)
            print(f"speed-up {modes[1]} / {modes[0]}: {a['wall'] / b['wall']:.2f}×")
            n, same, differ = identical(Path(tmp) / modes[0], Path(tmp) / modes[1])
            print(f"byte-identical runs ({', '.join(COMPARED)}, clients/*): {same} of {n}"
                  + (f"; differ: {', '.join(differ[:5])}" if differ else ""))


if __name__ == "__main__":
    raise SystemExit(main())
