"""Privacy–utility and privacy–leakage of the record-level DP methods (docs/DP.md), for ``fedgca report``.

Each DP method is set beside its non-private counterpart run in the same setting (ε = ∞): DP-GCA beside
GCA, DP-SGD-FedAvg beside FedAvg. Rows: per dataset, pair and ε (the run's ``--target-epsilon``, or the
accounted ε rounded when the σ's were given), mean ± std over seeds of the paper-protocol (peak) accuracy,
the validation-selected accuracy and AUROC, and — where the runs were attacked — NTMSE and Δcos.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedgca import methods
from fedgca.reporting import tables

# DP method → its non-private counterpart (the ε = ∞ point of its curve)
COUNTERPART = {"dpgca": "gca", "dpsgd-fedavg": "fedavg"}
FIELDS = ["dataset", "method", "epsilon", "n", "accounted_epsilon", "peak_accuracy", "peak_accuracy_std",
          "selected_accuracy", "selected_accuracy_std", "selected_auroc", "selected_auroc_std",
          "ntmse", "ntmse_std", "delta_cos", "delta_cos_std", "n_attacked"]


def _epsilon_of(run) -> float:
    dp = run.summary.get("dp")
    if not isinstance(dp, dict) or run.config.method not in COUNTERPART:
        return math.inf
    target = run.config.target_epsilon
    return float(target) if target is not None else float(f"{dp['epsilon']:.3g}")


def _setting(cfg) -> tuple:
    return (cfg.dataset, cfg.rounds, cfg.val_fraction, cfg.threshold, cfg.partition, cfg.clients)


def privacy_rows(runs, attacks: list[dict]) -> list[dict]:
    """One row per (dataset, method, ε) where a DP method ran; empty when none did."""
    dp_settings = {_setting(r.config) for r in runs if r.config.method in COUNTERPART}
    if not dp_settings:
        return []
    counterparts = set(COUNTERPART.values())
    cells: dict[tuple, list] = defaultdict(list)
    for r in runs:
        if _setting(r.config) not in dp_settings:
            continue
        if r.config.method in COUNTERPART:
            cells[(r.config.dataset, r.config.method, _epsilon_of(r))].append(r)
        elif r.config.method in counterparts:
            for dp_method, plain in COUNTERPART.items():
                if plain == r.config.method:
                    cells[(r.config.dataset, dp_method, math.inf)].append(r)
    leak: dict[tuple, list] = defaultdict(list)
    for a in attacks:
        m = a["method"]
        dp_method = m if m in COUNTERPART else next((d for d, p in COUNTERPART.items() if p == m), None)
        if dp_method is None:
            continue
        eps = a.get("target_epsilon") if m in COUNTERPART else math.inf
        leak[(a["dataset"], dp_method, math.inf if eps is None else float(eps))].append(a)

    def stat(values, scale=1.0):  # the report's mean ± sample std over seeds
        mean, std, _ = tables.mean_std(list(values))
        return mean * scale, std * scale

    rows = []
    for (ds, method, eps), rs in sorted(cells.items(), key=lambda kv: (tables.dataset_rank(kv[0][0]),
                                                                      kv[0][1], kv[0][2])):
        row = {"dataset": ds, "method": methods.get(method).label, "epsilon": eps, "n": len(rs),
               "accounted_epsilon": max((r.summary["dp"]["epsilon"] for r in rs if "dp" in r.summary),
                                        default=math.inf)}
        for key, (proto, metric) in {"peak_accuracy": ("peak", "accuracy"),
                                     "selected_accuracy": ("selected", "accuracy"),
                                     "selected_auroc": ("selected", "auroc")}.items():
            row[key], row[key + "_std"] = stat((r.summary[proto][metric] for r in rs), 100.0)
        attacked = leak.get((ds, method, eps), [])
        for key in ("ntmse", "delta_cos"):
            row[key], row[key + "_std"] = stat(a[key] for a in attacked)
        row["n_attacked"] = len(attacked)
        rows.append(row)
    return rows


def conclusions(rows: list[dict], tolerance_pp: float = 2.0) -> list[str]:
    """Per dataset: the smallest ε at which each DP method's selected AUROC is within ``tolerance_pp`` of
    its own ε = ∞ counterpart's, if any."""
    out = []
    by = defaultdict(dict)
    for r in rows:
        by[(r["dataset"], r["method"])][r["epsilon"]] = r
    for (ds, method), pts in sorted(by.items(), key=lambda kv: (tables.dataset_rank(kv[0][0]), kv[0][1])):
        if math.inf not in pts:
            out.append(f"{ds}, {method}: no ε = ∞ counterpart run in this setting")
            continue
        ref = pts[math.inf]["selected_auroc"]
        ok = sorted(e for e, r in pts.items() if math.isfinite(e) and r["selected_auroc"] >= ref - tolerance_pp)
        finite = sorted(e for e in pts if math.isfinite(e))
        detail = ", ".join(f"ε={e:g}: {pts[e]['selected_auroc']:.1f}" for e in finite)
        if ok:
            out.append(f"{ds}, {method}: within {tolerance_pp:g} pp AUROC of the non-private run ({ref:.1f}) from "
                       f"ε = {ok[0]:g} ({detail})")
        else:
            out.append(f"{ds}, {method}: at no ε run within {tolerance_pp:g} pp AUROC of the non-private run "
                       f"({ref:.1f}; {detail})")
    return out


def write_csv(out: Path, rows: list[dict]) -> Path:
    from fedgca.tabletext import dicts_csv

    path = out / "privacy.csv"
    path.write_text(dicts_csv([{k: _fmt(r[k]) for k in FIELDS} for r in rows], FIELDS))
    return path


def markdown(rows: list[dict]) -> str:
    from fedgca.tabletext import markdown as md

    def cell(r, key, digits=1):
        v, sd = r[key], r[key + "_std"]
        return "—" if not np.isfinite(v) else f"{v:.{digits}f} ± {sd:.{digits}f}"

    body = [[r["dataset"], r["method"], "∞" if r["epsilon"] == math.inf else f"{r['epsilon']:g}", str(r["n"]),
             cell(r, "peak_accuracy"), cell(r, "selected_accuracy"), cell(r, "selected_auroc"),
             cell(r, "ntmse", 3), cell(r, "delta_cos", 3)] for r in rows]
    return md(["dataset", "method", "ε", "seeds", "peak acc", "selected acc", "selected AUROC", "NTMSE", "Δcos"],
              body)


def write(out: Path, rows: list[dict]) -> list[Path]:
    """privacy.csv and the PNG curves (utility; leakage where attacked)."""
    write_csv(out, rows)
    from matplotlib.figure import Figure  # no pyplot: the process's backend stays the user's

    images = []
    datasets = sorted({r["dataset"] for r in rows}, key=tables.dataset_rank)
    panels = [("selected_auroc", "AUROC (%) — validation-selected"), ("peak_accuracy", "accuracy (%) — paper peak"),
              ("selected_accuracy", "accuracy (%) — validation-selected")]
    if any(r["n_attacked"] for r in rows):
        panels += [("ntmse", "attack NTMSE (higher: less leakage)"), ("delta_cos", "attack Δcos (lower: less leakage)")]
    for ds in datasets:
        fig = Figure(figsize=(4.2 * len(panels), 3.6))
        axes = fig.subplots(1, len(panels))
        for ax, (key, title) in zip(np.atleast_1d(axes), panels):
            for method in sorted({r["method"] for r in rows if r["dataset"] == ds}):
                pts = sorted((r for r in rows if r["dataset"] == ds and r["method"] == method),
                             key=lambda r: r["epsilon"])
                finite = [r for r in pts if math.isfinite(r["epsilon"])]
                xs = [r["epsilon"] for r in finite]
                line = ax.errorbar(xs, [r[key] for r in finite], yerr=[r[key + "_std"] for r in finite],
                                   marker="o", capsize=3, label=method)
                inf = [r for r in pts if not math.isfinite(r["epsilon"])]
                if inf and np.isfinite(inf[0][key]):
                    plain = next(methods.get(p).label for d, p in COUNTERPART.items()
                                 if methods.get(d).label == method)
                    ax.axhline(inf[0][key], color=line[0].get_color(), linestyle="--", linewidth=1,
                               label=f"{plain} (ε = ∞)")
            ax.set_xscale("log")
            ax.set_xlabel("ε (record-level, δ = 1e-5)")
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
        np.atleast_1d(axes)[0].legend(fontsize=7)
        fig.suptitle(f"{ds}: privacy–utility" + (" and leakage" if len(panels) > 3 else ""), fontsize=10)
        fig.tight_layout()
        path = out / f"privacy_{ds}.png"
        fig.savefig(path, dpi=110)
        images.append(path)
    return images


def _fmt(v):
    if isinstance(v, float):
        return "inf" if v == math.inf else ("" if math.isnan(v) else f"{v:.4g}")
    return v
