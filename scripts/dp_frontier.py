"""The privacy–utility frontier of one file (issue #43): selected AUROC of DP-GCA and DP-SGD-FedAvg by ε and rows per
client, beside their non-private counterparts (GCA, FedAvg) and untrained detectors on the same splits.

    .venv/bin/python scripts/dp_frontier.py examples/sweep_dp_frontier_pendigits.toml \\
        results/dp_frontier/pendigits docs/results/dp_scale/pendigits

Reads every finished run of the sweep directory (config.json, summary.json), and for each (C, seed) scores the
initial models of that federation (no training: the floor a DP run must clear to have learned anything; τ from
the validation rows as the runs take it). Writes ``frontier.csv`` (one row per method, ε, C: mean ± sample std
over seeds of the selected AUROC, the counterpart's and the untrained detectors'), ``frontier.md`` (the table and
the smallest client size at which each DP method is within 2 pp of its counterpart at ε = 8, counted only where the
counterpart beats the untrained detectors by 2 pp or more — elsewhere a DP run that learns nothing would pass) and
``frontier.png`` (AUROC against rows per client, one line per ε).
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

COUNTERPART = {"dpgca": "gca", "dpsgd-fedavg": "fedavg"}
WITHIN_PP = 2.0


def _runs(root: Path) -> list[dict]:
    out = []
    for d in sorted((root / "runs").iterdir()):
        if not (d / "summary.json").exists():
            continue
        cfg, s = json.loads((d / "config.json").read_text()), json.loads((d / "summary.json").read_text())
        n = s["client_sizes"]
        out.append({"method": cfg["method"], "eps": cfg.get("target_epsilon") or math.inf, "clients": cfg["clients"],
                    "seed": cfg["seed"], "rows": float(np.mean(n)), "auroc": 100 * s["selected"]["auroc"],
                    "epsilon": (s.get("dp") or {}).get("epsilon"), "sigma": (s.get("dp") or {}).get("grad_sigma"),
                    "config": cfg})
    return out


def _untrained(spec, runs: list[dict]) -> dict[tuple[int, int], float]:
    """AUROC of the initial models per (C, seed): the federation of the first run with them (every method of
    this sweep starts from the same models, partition and validation rows)."""
    from untrained_reference import untrained_auroc

    from fedgca.config import RunConfig

    out = {}
    for r in runs:
        key = (r["clients"], r["seed"])
        if key not in out:
            out[key] = 100 * untrained_auroc(RunConfig.from_dict(r["config"]), spec.source)[1]
    return out


def _ms(v: list[float]) -> tuple[float, float]:
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("root")
    ap.add_argument("out")
    a = ap.parse_args()
    from fedgca.experiments.sweep_spec import load_spec
    from fedgca.threads import limit_threads

    limit_threads(1)
    spec = load_spec(a.spec)
    runs = _runs(Path(a.root))
    floor = _untrained(spec, runs)
    cells: dict[tuple, list] = defaultdict(list)
    rows_of: dict[int, list] = defaultdict(list)
    for r in runs:
        cells[(r["method"], r["eps"], r["clients"])].append(r["auroc"])
        rows_of[r["clients"]].append(r["rows"])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    table = []
    for (method, eps, c), v in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], -np.mean(rows_of[kv[0][2]]))):
        if method not in COUNTERPART:
            continue
        m, s = _ms(v)
        cm, cs = _ms(cells.get((COUNTERPART[method], math.inf, c), [math.nan]))
        fm, fs = _ms([floor[(c, seed)] for (cc, seed) in floor if cc == c])
        table.append({"method": method, "epsilon": eps, "clients": c, "rows_per_client": round(np.mean(rows_of[c])),
                      "auroc": m, "auroc_std": s, "counterpart_auroc": cm, "counterpart_std": cs,
                      "untrained_auroc": fm, "untrained_std": fs, "seeds": len(v)})
    with open(out / "frontier.csv", "w") as f:
        f.write(",".join(table[0]) + "\n")
        for t in table:
            f.write(",".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in t.values()) + "\n")
    lines = [f"# {spec.name}: selected AUROC (%) by ε and rows per client, mean ± std over seeds", "",
             "| method | ε | C | rows per client | AUROC | non-private | untrained | seeds |", "|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['method']} | {t['epsilon']:g} | {t['clients']} | {t['rows_per_client']} | "
                     f"{t['auroc']:.2f} ± {t['auroc_std']:.2f} | {t['counterpart_auroc']:.2f} ± {t['counterpart_std']:.2f} | "
                     f"{t['untrained_auroc']:.2f} ± {t['untrained_std']:.2f} | {t['seeds']} |")
    lines.append("")
    for method in COUNTERPART:
        at8 = [t for t in table if t["method"] == method and t["epsilon"] == 8.0]
        pays = [t for t in at8 if t["counterpart_auroc"] - t["untrained_auroc"] >= WITHIN_PP]
        ok = [t for t in pays if t["counterpart_auroc"] - t["auroc"] <= WITHIN_PP]
        smallest = min((t["rows_per_client"] for t in ok), default=None)
        if not pays:
            verdict = (f"training does not pay at any size run ({COUNTERPART[method]} is within {WITHIN_PP:g} pp "
                       "of untrained detectors or below them): nothing to read")
        elif smallest is None:
            verdict = ("not within reach at the sizes where training pays ("
                       + ", ".join(str(t["rows_per_client"]) for t in sorted(pays, key=lambda t: t["rows_per_client"]))
                       + " rows per client)")
        else:
            verdict = f"from {smallest} rows per client"
        lines.append(f"- {method} at ε = 8 within {WITHIN_PP:g} pp of {COUNTERPART[method]}, where "
                     f"{COUNTERPART[method]} beats untrained detectors by ≥ {WITHIN_PP:g} pp: {verdict}")
    (out / "frontier.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, method in zip(axes, COUNTERPART):
        for eps in sorted({t["epsilon"] for t in table if t["method"] == method}):
            ts = sorted((t for t in table if t["method"] == method and t["epsilon"] == eps),
                        key=lambda t: t["rows_per_client"])
            ax.errorbar([t["rows_per_client"] for t in ts], [t["auroc"] for t in ts],
                        yerr=[t["auroc_std"] for t in ts], marker="o", capsize=2, label=f"ε = {eps:g}")
        ts = sorted((t for t in table if t["method"] == method and t["epsilon"] == 8.0),
                    key=lambda t: t["rows_per_client"])
        ax.plot([t["rows_per_client"] for t in ts], [t["counterpart_auroc"] for t in ts], "k--",
                label=f"{COUNTERPART[method]} (ε = ∞)")
        ax.plot([t["rows_per_client"] for t in ts], [t["untrained_auroc"] for t in ts], "k:", label="untrained")
        ax.set_xscale("log")
        ax.set_xlabel("training rows per client")
        ax.set_title(method)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("selected AUROC (%)")
    fig.tight_layout()
    fig.savefig(out / "frontier.png", dpi=120)


if __name__ == "__main__":
    main()
