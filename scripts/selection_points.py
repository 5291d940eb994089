"""Validation selection over every evaluation point, beside selection over end-of-round evaluations only.

    .venv/bin/python scripts/selection_points.py results/sweep_honest [--out docs/results/honest/selection_points.csv]

A run's "selected" figure (``fedgca.evaluation.selection.protocol_results``) is the end-of-round
evaluation with the lowest mean validation reconstruction error. GCA is also evaluated after every
reconstruction epoch, before that round's alignment epochs. Choosing among those points by the same
label-free rule is just as honest: a client can keep the snapshot its validation rows prefer.

This script reads each run's metrics.csv under DIR (runs with a validation split) and prints, per
(dataset, method), mean ± std over seeds of accuracy and AUROC (%) under both rules, and the phase of
the chosen evaluation.
"""
from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

from fedgca.reporting import tables
from fedgca.tabletext import dicts_csv, markdown


def choose(rows: list[dict], phases: set[str] | None) -> dict:
    """The evaluation with the lowest validation error (first on ties) among ``phases`` (None: every phase)."""
    pool = [r for r in rows if phases is None or r["phase"] in phases]
    return min(pool, key=lambda r: float(r["val_error"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    cells: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(Path(args.dir).rglob("summary.json")):
        s = json.loads(path.read_text())
        if not s.get("val_fraction"):
            continue
        rows = list(csv.DictReader((path.parent / "metrics.csv").open()))
        for rule, phases in (("round", {"round"}), ("any", None)):
            r = choose(rows, phases)
            cells[(s["dataset"], s["method"])][f"{rule}_accuracy"].append(float(r["accuracy"]))
            cells[(s["dataset"], s["method"])][f"{rule}_auroc"].append(float(r["auroc"]))
            cells[(s["dataset"], s["method"])][f"{rule}_phase"].append(r["phase"])
    out = []
    for (ds, m), c in sorted(cells.items(), key=lambda kv: (tables.dataset_rank(kv[0][0]), kv[0][1])):
        row = {"dataset": ds, "method": m, "seeds": len(c["round_accuracy"])}
        for k in ("round_accuracy", "round_auroc", "any_accuracy", "any_auroc"):
            mean, std, _ = tables.mean_std(c[k])
            row[k] = f"{100 * mean:.2f} ± {100 * std:.2f}"
        row["any_phases"] = "/".join(sorted(set(c["any_phase"])))
        out.append(row)
    fields = ["dataset", "method", "seeds", "round_accuracy", "round_auroc", "any_accuracy", "any_auroc", "any_phases"]
    print(markdown(fields, [[r[f] if isinstance(r[f], str) else str(r[f]) for f in fields] for r in out]))
    if args.out:
        Path(args.out).write_text(dicts_csv(out, fields))


if __name__ == "__main__":
    main()
