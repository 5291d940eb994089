"""Own data at scale: fedgca's whole load (read, type-check, split, encode, filter, standardise,
partition) of a large CSV beside pandas with the pyarrow engine only reading it.

Issue #31's bar: at most 1.5× pandas' read time, and peak memory at most 4× the float32 feature
array. Each measurement runs in a fresh process (so peak RSS — ``ru_maxrss`` less the RSS after the
imports — is that step's own), the two alternate ``--repeat`` times side by side, and the table
gives the medians and their ratio. The file (``--rows`` × ``--cols``: numeric features, one
categorical feature, a site column, the label; ~4 % anomalies) is generated once under ``--dir``.

    python benchmarks/bench_loader.py [--rows 1000000] [--cols 30] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PANDAS = """
import pandas as pd, pyarrow, resource, time, json, sys
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
df = pd.read_csv(sys.argv[1], engine="pyarrow")
t = time.perf_counter() - t
print(json.dumps({"seconds": t, "peak_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "rows": len(df)}))
"""

FEDGCA = """
import resource, time, json, sys
import pandas as pd, pyarrow
from fedgca.data import DataSource, Schema
from fedgca.data.partition import natural_partition, iid_partition
schema = Schema.load(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
ds = DataSource(sys.argv[1], schema, name="big").load(100)
parts = iid_partition(len(ds.train), 10, 100)
nat, _ = natural_partition(ds.sites, ds.site_names, 50)
t = time.perf_counter() - t
print(json.dumps({"seconds": t, "peak_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "rows": len(ds.train) + len(ds.test_x), "width": ds.train.shape[1],
                  "float32_mib": (len(ds.train) + len(ds.test_x)) * len(schema.features) * 4 / 2**20}))
"""


def make_file(directory: Path, rows: int, cols: int) -> tuple[Path, Path]:
    """``cols`` columns: cols − 3 numeric features, a categorical feature, a site column, the label."""
    path, schema_path = directory / f"big_{rows}x{cols}.csv", directory / f"big_{rows}x{cols}.json"
    if path.exists() and schema_path.exists():
        return path, schema_path
    import pandas as pd

    rng = np.random.default_rng(0)
    n_num = cols - 3
    base = rng.normal(size=(rows, n_num // 2))
    mix = rng.normal(size=(n_num // 2, n_num - n_num // 2))  # half the columns correlate with others
    X = np.concatenate([base, base @ mix * 0.3 + rng.normal(size=(rows, n_num - n_num // 2))], axis=1)
    df = pd.DataFrame(X.round(6), columns=[f"f{j}" for j in range(n_num)])
    df["colour"] = rng.choice(["red", "green", "blue", "amber"], size=rows)
    df["site"] = rng.choice([f"site{j:02d}" for j in range(20)], size=rows)
    df["label"] = np.where(rng.random(rows) < 0.04, "anomaly", "normal")
    df.to_csv(path, index=False)
    from fedgca.data.schema import CATEGORICAL, Feature, Schema

    feats = [Feature(f"f{j}") for j in range(n_num)] + [Feature("colour", CATEGORICAL, ("amber", "blue", "green", "red"))]
    Schema(features=tuple(feats), label="label", normal=("normal",), anomaly=("anomaly",), site="site").save(schema_path)
    return path, schema_path


def measure(code: str, *args: str, blas_threads: str | None = None) -> dict:
    env = dict(os.environ)
    if blas_threads:  # as a fedgca run loads its data: one BLAS thread (fedgca.threads.limit_threads)
        env.update(OPENBLAS_NUM_THREADS=blas_threads, MKL_NUM_THREADS=blas_threads)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "fedgca-bench-loader"))
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    path, schema = make_file(d, args.rows, args.cols)
    runs = {"pandas": [], "fedgca": []}
    for _ in range(args.repeat):  # alternate, so that load on a shared machine hits both alike
        runs["pandas"].append(measure(PANDAS, str(path)))
        runs["fedgca"].append(measure(FEDGCA, str(path), str(schema), blas_threads="1"))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("seconds", "peak_mib")} for k, v in runs.items()}
    f32 = runs["fedgca"][0]["float32_mib"]
    load = os.getloadavg()
    print(f"{path.name}: {args.rows:,} rows × {args.cols} columns, {path.stat().st_size / 2**20:.0f} MiB; "
          f"float32 feature array {f32:.0f} MiB; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':34s} {'seconds (median)':>17s} {'peak MiB':>9s} {'× float32':>9s}")
    print(f"{'pandas read_csv (pyarrow engine)':34s} {med['pandas']['seconds']:17.2f} {med['pandas']['peak_mib']:9.0f} "
          f"{med['pandas']['peak_mib'] / f32:9.2f}")
    print(f"{'fedgca load (read → split → encode':34s} {med['fedgca']['seconds']:17.2f} {med['fedgca']['peak_mib']:9.0f} "
          f"{med['fedgca']['peak_mib'] / f32:9.2f}")
    print(f"{'  → filter → standardise → partition)':34s}")
    ratio = med["fedgca"]["seconds"] / med["pandas"]["seconds"]
    print(f"ratio fedgca / pandas: {ratio:.2f} (bar: ≤ 1.5); fedgca peak / float32 array: "
          f"{med['fedgca']['peak_mib'] / f32:.2f} (bar: ≤ 4)")
    print("all runs (s): pandas " + ", ".join(f"{r['seconds']:.2f}" for r in runs["pandas"])
          + "; fedgca " + ", ".join(f"{r['seconds']:.2f}" for r in runs["fedgca"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
