"""Server optimizers on the 25 ADBench files against the committed FedAvg, FedProx and Centralized runs of the same
files, seeds and partitions (AUROC at the validation-selected round, ×100): the η grid, and the final bench.

    .venv/bin/python scripts/server_opt_compare.py results/server_opt_grid/*/report/bench_runs.csv \\
        --plain docs/results/adbench/report/bench_runs.csv --out docs/results/server_opt --name eta_grid

With ``--secure``: each secure variant's runs (``fedgca bench ... --methods secagg-<optimizer>``) beside its plain
optimizer's runs of the same file, seed and partition, from the positional inputs (``<name>_secure.md/.csv``).

    .venv/bin/python scripts/server_opt_compare.py results/server_opt_bench/*/report/bench_runs.csv \
        --plain docs/results/adbench/report/bench_runs.csv --out docs/results/server_opt --name bench \
        --secure results/server_opt_secure/*/report/bench_runs.csv

Each input bench_runs.csv comes from ``fedgca bench ... --methods <optimizer> [--set server_lr=η]``; the η of a
run is read from its run's config (``runs/<key>/config.json`` beside the report). Writes ``<name>.md`` and
``<name>.csv``: per method, η and partition, the mean AUROC over the files where both it and the references have
every seed, its difference to FedAvg and Centralized, and W/T/L against each (a tie: the seed means within 0.5 pp,
as the bench report counts).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from fedgca.reporting.bench import TIE_PP
from fedgca.tabletext import markdown as table_text

REFERENCES = ("fedavg", "fedprox", "centralized")


def _wtl(d: pd.Series) -> str:
    """Files more than TIE_PP above / within / below, as the bench report counts them."""
    return f"{int((d > TIE_PP).sum())}/{int((d.abs() <= TIE_PP).sum())}/{int((d < -TIE_PP).sum())}"


def _runs(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    runs_dir = path.parent.parent / "runs"
    lrs = {}
    for key in df["key"].dropna().unique():
        cfg = runs_dir / str(key) / "config.json"
        lrs[key] = json.loads(cfg.read_text()).get("server_lr") if cfg.exists() else None
    df["server_lr"] = df["key"].map(lrs)
    return df


def compare(runs: pd.DataFrame, plain: pd.DataFrame) -> pd.DataFrame:
    keys = ["file", "partition", "seed"]
    ref = plain[plain["column"].isin(REFERENCES)].pivot_table(index=keys, columns="column", values="auroc")
    rows = []
    for (method, lr, partition), g in runs.groupby(["column", "server_lr", "partition"], dropna=False):
        both = g.set_index(keys)[["auroc"]].join(ref, how="inner")
        per_file = (both * 100).groupby("file").mean()
        out = {"method": method, "server_lr": lr, "partition": partition, "files": len(per_file),
               "seeds": int(g["seed"].nunique()), "mean": per_file["auroc"].mean()}
        for r in REFERENCES:
            if r in per_file:
                d = per_file["auroc"] - per_file[r]
                out[f"vs_{r}"] = d.mean()
                out[f"wtl_{r}"] = _wtl(d)
                out[f"mean_{r}"] = per_file[r].mean()
        rows.append(out)
    return pd.DataFrame(rows).sort_values(["partition", "method", "server_lr"])


def secure_vs_plain(secure: pd.DataFrame, plain: pd.DataFrame) -> pd.DataFrame:
    """Per secure variant and partition: its mean AUROC and its plain optimizer's over the same files and seeds,
    the difference and W/T/L (a tie: within 0.5 pp per file)."""
    keys = ["file", "partition", "seed"]
    rows = []
    for (method, partition), g in secure.groupby(["column", "partition"]):
        base = method.removeprefix("secagg-")
        ref = plain[plain["column"] == base].set_index(keys)["auroc"].rename("plain")
        both = g.set_index(keys)[["auroc"]].join(ref, how="inner")
        per_file = (both * 100).groupby("file").mean()
        d = per_file["auroc"] - per_file["plain"]
        rows.append({"method": method, "partition": partition, "files": len(per_file),
                     "seeds": int(both.index.get_level_values("seed").nunique()), "secure": per_file["auroc"].mean(),
                     "plain": per_file["plain"].mean(), "difference": d.mean(), "max_abs_file": d.abs().max(),
                     "wtl": _wtl(d)})
    return pd.DataFrame(rows)


def secure_markdown(table: pd.DataFrame) -> str:
    head = ["partition", "secure variant", "files × seeds", "secure mean AUROC", "plain mean AUROC", "difference",
            "largest \\|Δ\\| on a file", "W/T/L vs plain"]
    return table_text(head, [[r["partition"], r["method"], f"{r['files']} × {r['seeds']}", f"{r['secure']:.2f}",
                              f"{r['plain']:.2f}", f"{r['difference']:+.2f}", f"{r['max_abs_file']:.2f}", r["wtl"]]
                             for _, r in table.iterrows()])


def markdown(table: pd.DataFrame) -> str:
    head = ["partition", "method", "η", "files × seeds", "mean AUROC", "Δ FedAvg", "W/T/L FedAvg", "Δ FedProx",
            "Δ Centralized", "W/T/L Centralized"]
    nan = float("nan")
    return table_text(head, [[r["partition"], r["method"], f"{r['server_lr']:g}", f"{r['files']} × {r['seeds']}",
                              f"{r['mean']:.2f}", f"{r.get('vs_fedavg', nan):+.2f}", r.get("wtl_fedavg", ""),
                              f"{r.get('vs_fedprox', nan):+.2f}", f"{r.get('vs_centralized', nan):+.2f}",
                              r.get("wtl_centralized", "")] for _, r in table.iterrows()])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="bench_runs.csv of the server-optimizer benches")
    p.add_argument("--plain", type=Path, required=True, help="the committed bench's bench_runs.csv")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", default="compare")
    p.add_argument("--secure", nargs="*", type=Path, default=[], help="bench_runs.csv of the secure variants")
    args = p.parse_args(argv)
    runs = pd.concat([_runs(path) for path in args.runs], ignore_index=True)
    if args.secure:
        secure = pd.concat([pd.read_csv(path) for path in args.secure], ignore_index=True)
        table = secure_vs_plain(secure, runs)
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / f"{args.name}_secure.csv", index=False)
        (args.out / f"{args.name}_secure.md").write_text(secure_markdown(table))
        print(secure_markdown(table))
    table = compare(runs, pd.read_csv(args.plain))
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / f"{args.name}.csv", index=False)
    text = markdown(table)
    (args.out / f"{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
