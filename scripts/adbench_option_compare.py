"""A run option against the default rule on the same bench (issue #47's before/after table): per partition and
fedgca method, mean AUROC ×100 before and after over the (file, seed) runs both benches have, how many files
move by more than 0.5 pp either way, the files where training hurt, and GCA against Single-Client file by file.

    .venv/bin/python scripts/adbench_option_compare.py docs/results/adbench/report/bench_runs.csv \\
        results/bench_ensemble/bench_runs.csv > docs/results/adbench/ensembles/bench_3seeds.md
"""
from __future__ import annotations

import sys

import pandas as pd

METHODS = ("centralized", "single", "fedavg", "fedprox", "gca")
HURT = ("7_Cardiotocography", "6_cardio", "15_Hepatitis", "41_Waveform", "23_mammography", "37_Stamps")


def main(before_path: str, after_path: str) -> int:
    from fedgca.tabletext import markdown

    before, after = pd.read_csv(before_path), pd.read_csv(after_path)
    keys = ["file", "column", "partition", "seed"]
    both = before[keys + ["auroc"]].merge(after[keys + ["auroc"]], on=keys, suffixes=("_before", "_after"))
    both = both[both.column.isin(METHODS)]
    body, vs_single = [], []
    for part in sorted(both.partition.unique()):
        mine = both[both.partition == part]
        for m in METHODS:
            runs = mine[mine.column == m]
            if runs.empty:
                continue
            per_file = runs.groupby("file")[["auroc_before", "auroc_after"]].mean() * 100
            gap = per_file.auroc_after - per_file.auroc_before
            hurt = per_file[per_file.index.isin(HURT)]
            body.append([part, m, f"{per_file.shape[0]} × {runs.seed.nunique()}",
                         f"{per_file.auroc_before.mean():.2f}", f"{per_file.auroc_after.mean():.2f}",
                         f"{gap.mean():+.2f}", str(int((gap > 0.5).sum())), str(int((gap < -0.5).sum())),
                         f"{hurt.auroc_before.mean():.2f} → {hurt.auroc_after.mean():.2f}" if len(hurt) else "–"])
        table = mine.groupby(["file", "column"])[["auroc_before", "auroc_after"]].mean().unstack("column") * 100
        if {"gca", "single"} <= set(mine.column):
            for when in ("auroc_before", "auroc_after"):
                d = table[when]["gca"] - table[when]["single"]
                vs_single.append([part, when.removeprefix("auroc_"), f"{d.mean():+.2f}",
                                  f"{int((d >= -0.5).sum())}/{len(d)}"])
    print(markdown(["partition", "method", "files × seeds", "before", "after", "Δ mean (pp)", "files up > 0.5 pp",
                    "files down > 0.5 pp", "the 6 files where training hurt"], body))
    print()
    print(markdown(["partition", "rule", "GCA − Single-Client (pp)", "files GCA ≥ Single − 0.5 pp"], vs_single))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
