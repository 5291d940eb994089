"""Own data's defaults before and after, on the same ADBench files: AUROC at the deployed round and how many
held-out normal rows the detectors flag.

"Before" is a bench run with the paper's presets as own data used them (the correlation filter at 0.6,
R = 100 × 10 local epochs, GCA 5 + 5, no validation split: the final round's model, τ from training scores,
an evaluation after every GCA reconstruction epoch), C and B from the same rule as now:

    F=$(ls ../shared/data/adbench/*.npz | grep -v -e campaign -e shuttle -e mammography)
    .venv/bin/fedgca bench $F --out results/adbench_before --methods centralized,gca --seeds 100 --peers none \\
        --rounds 100 --set local_epochs=10 --set recon_epochs=5 --set align_epochs=5 --set val_fraction=0 \\
        --set threshold=train-quantile --set eval_recon_epochs=true --corr-threshold 0.6
    .venv/bin/python scripts/adbench_flag_rates.py results/adbench_before ../shared/data/adbench before_flags.csv
    .venv/bin/python scripts/adbench_before_after.py results/adbench_before before_flags.csv \\
        docs/results/adbench OUT.csv

"After" is the study's own seed-100 IID runs (``docs/results/adbench/report/bench_runs.csv``, ``flag_rates.csv``).
Prints the summary lines and writes one row per file and method.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("before_bench")
    p.add_argument("before_flags")
    p.add_argument("study")
    p.add_argument("out")
    a = p.parse_args()
    before = {(r["file"], r["column"]): r for r in _rows(Path(a.before_bench) / "report" / "bench_runs.csv")}
    after = {(r["file"], r["column"]): r for r in _rows(Path(a.study) / "report" / "bench_runs.csv")
             if r["partition"] == "iid" and r["seed"] == "100"}
    flags_b = {(r["file"], r["method"]): r for r in _rows(Path(a.before_flags))}
    flags_a = {(r["file"], r["method"]): r for r in _rows(Path(a.study) / "flag_rates.csv")
               if r["partition"] == "iid" and r["seed"] == "100"}
    out = []
    for (file, method), b in sorted(before.items()):
        if (file, method) not in after:
            continue
        fb, fa = flags_b[(file, method)], flags_a[(file, method)]
        out.append({"file": file, "method": method, "auroc_before": 100 * float(b["auroc"]),
                    "auroc_after": 100 * float(after[(file, method)]["auroc"]),
                    "flagged_before": 100 * float(fb["flagged_mean"]), "flagged_after": 100 * float(fa["flagged_mean"]),
                    "promised": 100 * float(fa["promised"]),
                    "seconds_before": float(b["seconds"]), "seconds_after": float(after[(file, method)]["seconds"])})
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in out)
    for method in sorted({r["method"] for r in out}):
        rs = [r for r in out if r["method"] == method]
        d = np.array([r["auroc_after"] - r["auroc_before"] for r in rs])
        fb = np.array([r["flagged_before"] - r["promised"] for r in rs])
        fa = np.array([r["flagged_after"] - r["promised"] for r in rs])
        print(f"{method}: {len(rs)} files; AUROC {np.mean([r['auroc_before'] for r in rs]):.2f} → "
              f"{np.mean([r['auroc_after'] for r in rs]):.2f} ({d.mean():+.2f} pp; better/tie/worse by 0.5 pp "
              f"{(d > 0.5).sum()}/{(abs(d) <= 0.5).sum()}/{(d < -0.5).sum()}); flagged − promised {fb.mean():+.1f} → "
              f"{fa.mean():+.1f} pp (files within ±10 pp {(abs(fb) <= 10).sum()} → {(abs(fa) <= 10).sum()}); "
              f"seconds {sum(r['seconds_before'] for r in rs):.0f} → {sum(r['seconds_after'] for r in rs):.0f}")


if __name__ == "__main__":
    main()
