"""How many held-out normal rows each bench run's detectors flag, against the share their quantile promises.

For every finished run of a bench directory, every client's saved detector scores the test set's normal rows
(rows no client trained on: ``test_rows.csv`` into the original .npz/.mat file, raw values through the detector's
own preprocessing) and ``predict`` flags them; the promise is 1 − quantile. Writes one CSV row per run.

    .venv/bin/python scripts/adbench_flag_rates.py results/adbench ../shared/data/adbench OUT.csv
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("bench")
    p.add_argument("data_dir")
    p.add_argument("out")
    a = p.parse_args()
    from fedgca.detector import load_client_detector
    from fedgca.threads import limit_threads

    limit_threads(1)
    plan = json.loads((Path(a.bench) / "bench.json").read_text())
    files = {f["name"]: f["file"] for f in plan["files"] if "error" not in f}
    arrays: dict = {}
    rows = []
    for run in plan["runs"]:
        d = Path(a.bench) / "runs" / run["key"]
        if not (d / "summary.json").exists() or run["dataset"] not in files:
            continue
        s = json.loads((d / "summary.json").read_text())
        if run["dataset"] not in arrays:
            with np.load(Path(a.data_dir) / files[run["dataset"]]) as f:
                arrays[run["dataset"]] = (f["X"], f["y"])
        X, y = arrays[run["dataset"]]
        test = np.loadtxt(d / "test_rows.csv", skiprows=1, dtype=np.int64, ndmin=1)
        normals = X[test][y[test] == 0]
        rates = []
        for i in range(int(s["clients"])):
            det = load_client_detector(d, i)
            rates.append(float(det.predict(det.transform(normals)).mean()))
        promised = 1 - float(det.quantile)
        rows.append({"file": run["dataset"], "method": run["method"], "seed": run["seed"],
                     "partition": run["partition"], "promised": promised, "flagged_mean": float(np.mean(rates)),
                     "flagged_min": min(rates), "flagged_max": max(rates),
                     "clients_within_10pp": sum(abs(r - promised) <= 0.10 for r in rates), "clients": len(rates)})
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    m = np.array([r["flagged_mean"] - r["promised"] for r in rows])
    print(f"{len(rows)} runs: flagged − promised, mean {100 * m.mean():+.1f} pp; runs within ±10 pp on the mean over "
          f"clients: {(abs(m) <= 0.10).sum()}; clients within ±10 pp: {sum(r['clients_within_10pp'] for r in rows)} "
          f"of {sum(r['clients'] for r in rows)}")


if __name__ == "__main__":
    main()
