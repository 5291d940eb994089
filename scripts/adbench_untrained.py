"""Does training pay? Each bench file's untrained detectors beside the trained ones (issue #43's choice of files).

    .venv/bin/python scripts/adbench_untrained.py results/adbench ../shared/data/adbench OUT.csv

For every file of a bench directory, the GCA run's federation of each seed (IID, the defaults) is built again and
its initial models (no training; τ from the validation rows as the runs take it) score the test set; beside it,
the bench's validation-selected AUROC of GCA, FedAvg and Centralized on the same splits (mean over seeds). A DP run
can only be read against a file where training beats this floor: a DP method that learns nothing stays at it.
"""
from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench")
    p.add_argument("data_dir")
    p.add_argument("out")
    a = p.parse_args()
    from untrained_reference import untrained_auroc

    from fedgca.config import RunConfig
    from fedgca.data.source import open_source
    from fedgca.threads import limit_threads

    limit_threads(1)
    root = Path(a.bench)
    plan = json.loads((root / "bench.json").read_text())
    files = {f["name"]: f["file"] for f in plan["files"] if "error" not in f}
    trained: dict[tuple, list] = defaultdict(list)
    untrained: dict[str, list] = defaultdict(list)
    for run in plan["runs"]:
        d = root / "runs" / run["key"]
        if run["partition"] != "iid" or not (d / "summary.json").exists():
            continue
        s = json.loads((d / "summary.json").read_text())
        trained[(run["dataset"], run["method"])].append(100 * s["selected"]["auroc"])
        if run["method"] == "gca":
            cfg = RunConfig.from_dict(json.loads((d / "config.json").read_text()))
            source = open_source(Path(a.data_dir) / files[run["dataset"]], None, name=run["dataset"])
            untrained[run["dataset"]].append(100 * untrained_auroc(cfg, source)[1])
    rows = []
    for name in files:
        if name not in untrained:
            continue
        u = float(np.mean(untrained[name]))
        row = {"file": name, "untrained": round(u, 2)}
        for m in ("gca", "fedavg", "centralized"):
            t = float(np.mean(trained[(name, m)]))
            row[m] = round(t, 2)
            row[f"{m}_gain"] = round(t - u, 2)
        rows.append(row)
    rows.sort(key=lambda r: -r["gca_gain"])
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['file']:20s} untrained {r['untrained']:6.2f}  GCA {r['gca']:6.2f} ({r['gca_gain']:+.2f})  "
              f"FedAvg {r['fedavg']:6.2f} ({r['fedavg_gain']:+.2f})  Centralized {r['centralized']:6.2f} "
              f"({r['centralized_gain']:+.2f})")


if __name__ == "__main__":
    main()
