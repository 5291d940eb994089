"""Secure aggregation against the plain methods on the 25 ADBench files: AUROC at the validation-selected round,
run by run (same file, seed, partition and options; only the method differs).

    .venv/bin/python scripts/secagg_compare.py results/secagg_bench/report/bench_runs.csv \\
        [more bench_runs.csv ...] --plain docs/results/adbench/report/bench_runs.csv --out docs/results/secagg

``--plain``: the committed bench's runs (FedAvg, FedProx, GCA); the secure runs' bench_runs.csv come from
``fedgca bench ... --methods secagg-fedavg,secagg-fedprox`` (and ``secagg-gca``) with the same seeds and
partitions. Writes ``compare.csv`` (one row per pair of runs) and ``compare.md`` (per partition and method pair:
mean AUROC of each, the mean and the largest |Δ|, the pairs within the issue's bar — 0.5 pp for parameter sharing,
1 pp for GCA — and the files whose mean over seeds is not).

    .venv/bin/python scripts/secagg_compare.py --tabular results/secagg_tabular_dir/runs.csv [more runs.csv ...] \
        --out docs/results/secagg --name tabular_dirichlet_pairs

``--tabular``: ``fedgca compare`` sweeps holding both the secure and the plain methods; each secure run is paired
with its plain run of the same dataset, seed and partition, and per dataset and pair the mean Δ of AUROC (peak and
final) is written with the spread of Δ over seeds (its standard deviation and standard error): a Δ within about
two standard errors of zero is what the seeds alone produce.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

PAIRS = {"secagg-fedavg": ("fedavg", 0.5), "secagg-fedprox": ("fedprox", 0.5), "secagg-gca": ("gca", 1.0)}


def compare(secure: pd.DataFrame, plain: pd.DataFrame) -> pd.DataFrame:
    rows = []
    keys = ["file", "partition", "seed"]
    for method, (base, bar) in PAIRS.items():
        s = secure[secure["column"] == method][keys + ["auroc"]]
        p = plain[plain["column"] == base][keys + ["auroc"]]
        both = s.merge(p, on=keys, suffixes=("_secure", "_plain"))
        both["method"], both["plain"], both["bar_pp"] = method, base, bar
        rows.append(both)
    out = pd.concat(rows, ignore_index=True)
    out["delta_pp"] = 100 * (out["auroc_secure"] - out["auroc_plain"])
    return out


def report(pairs: pd.DataFrame) -> str:
    lines = ["# Secure aggregation vs the plain methods, 25 ADBench files (AUROC at the validation-selected round)",
             "", "| partition | secure | plain | runs | mean AUROC secure | mean AUROC plain | mean Δ (pp) | "
             "max |Δ| (pp) | runs within the bar | files (mean over seeds) beyond the bar |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (part, method), g in pairs.groupby(["partition", "method"], sort=True):
        bar = g["bar_pp"].iloc[0]
        per_file = g.groupby("file")["delta_pp"].mean()
        beyond = ", ".join(f"{f} ({d:+.2f})" for f, d in per_file.items() if abs(d) > bar) or "none"
        lines.append(f"| {part} | {method} | {g['plain'].iloc[0]} | {len(g)} | {100 * g['auroc_secure'].mean():.2f} | "
                     f"{100 * g['auroc_plain'].mean():.2f} | {g['delta_pp'].mean():+.3f} | {g['delta_pp'].abs().max():.3f} | "
                     f"{(g['delta_pp'].abs() <= bar).sum()}/{len(g)} (bar {bar:g} pp) | {beyond} |")
    return "\n".join(lines) + "\n"


def tabular(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per dataset, partition and secure/plain pair: n seeds, mean AUROC of each, mean Δ, std and SE of Δ (pp)."""
    keys = ["dataset", "partition", "seed"]
    rows, lines = [], ["| dataset | partition | secure − plain | seeds | metric | mean plain | mean secure | mean Δ (pp) "
                       "| std of Δ | SE of Δ | within the bar |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, (base, bar) in PAIRS.items():
        both = runs[runs["method"] == method].merge(runs[runs["method"] == base], on=keys,
                                                     suffixes=("_secure", "_plain"))
        for (ds, part), g in both.groupby(["dataset", "partition"], sort=True):
            for metric in ("peak_auroc", "final_auroc"):
                d = 100 * (g[f"{metric}_secure"] - g[f"{metric}_plain"])
                sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
                se = sd / len(d) ** 0.5
                rows.append({"dataset": ds, "partition": part, "secure": method, "plain": base, "seeds": len(d),
                             "metric": metric, "mean_plain": 100 * g[f"{metric}_plain"].mean(),
                             "mean_secure": 100 * g[f"{metric}_secure"].mean(), "delta_pp": d.mean(),
                             "delta_sd": sd, "delta_se": se, "bar_pp": bar})
                ok = "yes" if abs(d.mean()) <= bar else ("no (within 2 SE)" if abs(d.mean()) <= 2 * se else "no")
                lines.append(f"| {ds} | {part} | {method} − {base} | {len(d)} | {metric.replace('_', ' ')} | "
                             f"{100 * g[f'{metric}_plain'].mean():.2f} | {100 * g[f'{metric}_secure'].mean():.2f} | "
                             f"{d.mean():+.2f} | {sd:.2f} | {se:.2f} | {ok} |")
    return pd.DataFrame(rows), "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("secure", nargs="+", help="bench_runs.csv of the secure runs (--tabular: compare's runs.csv)")
    ap.add_argument("--plain", help="bench_runs.csv of the plain runs")
    ap.add_argument("--tabular", action="store_true", help="pair secure and plain runs within compare sweeps")
    ap.add_argument("--name", default="tabular_pairs", help="--tabular: the output files' name")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.tabular:
        table, text = tabular(pd.concat([pd.read_csv(p) for p in args.secure], ignore_index=True))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table.round(4).to_csv(out / f"{args.name}.csv", index=False)
        (out / f"{args.name}.md").write_text(text)
        print(text)
        return 0
    if not args.plain:
        raise SystemExit("--plain: the plain runs' bench_runs.csv is needed (or --tabular)")
    secure = pd.concat([pd.read_csv(p) for p in args.secure], ignore_index=True)
    pairs = compare(secure, pd.read_csv(args.plain))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs.sort_values(["method", "partition", "file", "seed"]).to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text(report(pairs))
    print((out / "compare.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
