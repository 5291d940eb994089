"""The Ray executor's overhead on one machine: the same small sweep through the local process pool and
through ``--executor ray`` on a local Ray instance with the same number of workers, side by side.

Issue #32's bar: Ray's overhead at most 10 % of the sweep's wall time; Ray's start-up (``ray.init`` of a
local instance, and its shutdown) is reported separately. Each measurement is a fresh ``fedgca sweep``
process on a fresh directory (so nothing is reused), the two executors alternate ``--repeat`` times, and
the table gives the medians. Within a Ray sweep, the start-up is the time from the sweep's "to run" line to
Ray's "nodes at" line (read from the log), and the shutdown the time after the last run finished.

    python benchmarks/bench_ray.py --data-dir ../shared/data [--runs 8] [--rounds 10] [--workers 2] [--repeat 2]

Never oversubscribe: workers × 1 torch thread ≤ the cores this process may use.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO (.*)$")


def sweep_file(directory: Path, runs: int, rounds: int) -> Path:
    path = directory / "bench_ray.toml"
    seeds = ", ".join(str(100 + i) for i in range(runs))
    path.write_text(f'name = "bench_ray"\n[base]\nrounds = {rounds}\n[grid]\ndataset = "academic"\n'
                    f'method = "gca"\nseed = [{seeds}]\n')
    return path


def measure(spec: Path, out: Path, workers: int, executor: str, data_dir: str) -> dict:
    cmd = [sys.executable, "-m", "fedgca.cli.main", "sweep", str(spec), "--out", str(out), "--workers", str(workers),
           "--executor", executor, "--data-dir", data_dir]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    stamps = []
    for line in done.stderr.splitlines():
        m = STAMP.match(line)
        if m:
            stamps.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), m.group(2)))
    t_plan = next(t for t, msg in stamps if "TFLOP of protocol work" in msg)
    t_first_run = next(t for t, msg in stamps if msg.startswith("[1/"))
    t_last_run = [t for t, msg in stamps if re.match(r"\[\d+/\d+\] finished", msg)][-1]
    out_rec = {"wall": wall, "runs_span": t_last_run - t_plan}
    if executor == "ray":
        t_ray = next(t for t, msg in stamps if msg.startswith("ray: "))
        out_rec["startup"] = t_ray - t_plan
        out_rec["runs_span"] = t_last_run - t_ray  # the sweep's runs, Ray's start-up left out
    out_rec["first_run"] = t_first_run - t_plan
    return out_rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    from fedgca.experiments import ray_executor
    from fedgca.threads import available_cores

    ray_executor.require()
    if args.workers > available_cores():
        raise SystemExit(f"--workers {args.workers} would oversubscribe the {available_cores()} cores")
    results: dict[str, list[dict]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory(prefix="fedgca-bench-ray-") as tmp:
        spec = sweep_file(Path(tmp), args.runs, args.rounds)
        for i in range(args.repeat):  # alternate, so that load on a shared machine hits both alike
            for executor in ("local", "ray"):
                results[executor].append(measure(spec, Path(tmp) / f"{executor}{i}", args.workers, executor,
                                                 args.data_dir))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in results.items()}
    load = os.getloadavg()
    print(f"sweep: {args.runs} runs of academic GCA at R = {args.rounds}, {args.workers} workers × 1 torch thread, "
          f"{args.repeat} alternating repeats; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':28s} {'process wall s':>15s} {'runs s':>8s} {'Ray start s':>12s}")
    print(f"{'local process pool':28s} {med['local']['wall']:15.1f} {med['local']['runs_span']:8.1f} {'':>12s}")
    print(f"{'Ray executor (local Ray)':28s} {med['ray']['wall']:15.1f} {med['ray']['runs_span']:8.1f} "
          f"{med['ray']['startup']:12.1f}")
    over = med["ray"]["runs_span"] / med["local"]["runs_span"] - 1
    print(f"Ray's overhead on the runs: {100 * over:+.1f} % (bar: ≤ 10 %); Ray's start-up {med['ray']['startup']:.1f} s "
          f"and the whole process {100 * (med['ray']['wall'] / med['local']['wall'] - 1):+.1f} % (start-up and "
          "shutdown included)")
    print("all (process wall s): local " + ", ".join(f"{r['wall']:.1f}" for r in results["local"])
          + "; ray " + ", ".join(f"{r['wall']:.1f}" for r in results["ray"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
