"""The federated-ADBench study's headline figures, from a bench report folder (``fedgca bench ... --report-only``).

Per partition: each column's mean AUROC over the complete files, the better centralized peer and GCA's distance
to it, GCA against Single-Client (strictly ≥, and ≥ within 0.5 pp), Centralized against PyOD's AutoEncoder, and
GCA − Single-Client / GCA − Centralized by training rows per client (Spearman's ρ).

    .venv/bin/python scripts/adbench_study.py docs/results/adbench/report
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

PEERS = ("pyod-ae", "iforest", "ecod")


def read(path: Path) -> dict[str, dict[str, float]]:
    out = {}
    for r in csv.DictReader(path.open()):
        out[r["file"]] = {k[:-5]: float(v) for k, v in r.items() if k.endswith("_mean") and v != ""}
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("report")
    a = p.parse_args()
    root = Path(a.report)
    files = {r["file"]: r for r in csv.DictReader((root / "files.csv").open())}
    for table in sorted(root.glob("auroc_*.csv")):
        partition = table.stem.split("_", 1)[1]
        t = read(table)
        cols = sorted({c for r in t.values() for c in r})
        complete = [f for f, r in t.items() if all(c in r for c in cols)]
        mean = {c: np.mean([t[f][c] for f in complete]) for c in cols}
        print(f"## {partition}: {len(complete)} complete files of {len(t)}")
        print("  means: " + ", ".join(f"{c} {mean[c]:.2f}" for c in sorted(cols, key=lambda c: -mean[c])))
        peers = [c for c in PEERS if c in mean]
        if peers and "gca" in mean:
            best = max(peers, key=lambda c: mean[c])
            print(f"  GCA {mean['gca']:.2f} vs the better peer {best} {mean[best]:.2f}: {mean['gca'] - mean[best]:+.2f} pp")
        if "centralized" in mean and "pyod-ae" in mean:
            print(f"  Centralized − PyOD AE: {mean['centralized'] - mean['pyod-ae']:+.2f} pp")
        if "gca" in mean and "single" in mean:
            d = np.array([t[f]["gca"] - t[f]["single"] for f in complete])
            print(f"  GCA − Single-Client: mean {d.mean():+.2f} pp; GCA ≥ Single on {(d >= 0).sum()}/{len(d)} "
                  f"({100 * (d >= 0).mean():.0f} %), ≥ Single − 0.5 pp on {(d >= -0.5).sum()}/{len(d)} "
                  f"({100 * (d >= -0.5).mean():.0f} %)")
            rows = np.array([float(files[f]["rows_per_client"]) for f in complete])
            for ref in ("single", "centralized", "fedavg"):
                if ref in mean:
                    dd = np.array([t[f]["gca"] - t[f][ref] for f in complete])
                    rho = spearmanr(rows, dd).statistic
                    small = rows < 300
                    print(f"  GCA − {ref} by rows per client: Spearman ρ {rho:+.2f}; mean {dd[small].mean():+.2f} pp "
                          f"on the {small.sum()} files under 300 rows per client, {dd[~small].mean():+.2f} on the "
                          f"{(~small).sum()} others")
            worst = sorted(complete, key=lambda f: t[f]["gca"] - t[f]["single"])[:5]
            print("  GCA's largest losses to Single-Client: " + ", ".join(
                f"{f} {t[f]['gca'] - t[f]['single']:+.2f} ({float(files[f]['rows_per_client']):.0f} rows/client)"
                for f in worst))


if __name__ == "__main__":
    main()
