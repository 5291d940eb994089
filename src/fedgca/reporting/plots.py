"""PNG plots for ``fedgca report`` (matplotlib's object API: a ``Figure`` saved to PNG needs no display and no
pyplot, and leaves the process's backend alone — a notebook's ``plt.show()`` keeps working).

- ``acc_<partition>_<protocol>.png``: accuracy bars with std error bars, per dataset and method;
- ``attack_ntmse.png`` / ``attack_delta_cos.png``: leakage metrics per dataset and method;
- ``curves_<partition>_<dataset>.png``: accuracy after each round, mean ± std over seeds;
- ``comm.png``: per-round MiB, GCA at each K against FL (log scale).
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fedgca.reporting import tables

PROTOCOL_SHORT = {"peak": "paper protocol (peak over evaluations)", "final": "final round",
                  "selected": "validation-selected round"}


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").lower()


def grouped_bars(path: Path, title: str, categories: list[str], series: list[tuple[str, list, list]],
                 ylabel: str, log: bool = False) -> Path:
    """``series``: (label, means, stds) with one entry per category (NaN for none)."""
    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(categories))
    fig = Figure(figsize=(max(6.0, 1.2 * len(categories) * max(1, n / 3)), 4.2))
    ax = fig.subplots()
    for i, (label, means, stds) in enumerate(series):
        means = np.asarray(means, dtype=float)
        stds = np.nan_to_num(np.asarray(stds, dtype=float))
        ax.bar(x + (i - (n - 1) / 2) * width, means, width, yerr=stds if stds.any() else None, capsize=2,
               label=label)
    ax.set_xticks(x)
    ax.set_xticklabels(categories, rotation=20 if len(categories) > 4 else 0)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=min(4, n), loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(categories) <= 4
                                                                               else -0.2), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def curves_plot(path: Path, title: str, curves: dict[str, list[dict]]) -> Path:
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    for label, pts in curves.items():
        pts = sorted(pts, key=lambda p: p["round"])
        r = np.array([p["round"] for p in pts])
        m = 100 * np.array([p["mean"] for p in pts])
        s = 100 * np.nan_to_num(np.array([p["std"] for p in pts]))
        ax.plot(r, m, label=label, marker="o" if len(r) < 15 else None, markersize=3)
        ax.fill_between(r, m - s, m + s, alpha=0.15)
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def make_plots(out: Path, data: dict) -> list[Path]:
    out = Path(out)
    images: list[Path] = []
    settings = data["settings"]
    for i, setting in enumerate(settings):
        suffix = f"_s{i + 1}" if len(settings) > 1 else ""
        for part, cols in data["columns"].get(setting, {}).items():
            if not cols:
                continue
            datasets = sorted({d for c in cols for d in c.cells}, key=_rank)
            tag = "iid" if part == "iid" else _slug(part)
            for protocol in ("peak", "final"):
                series = []
                for c in cols:
                    cells = [c.cells[d].cell(protocol, "accuracy") if d in c.cells else (np.nan, np.nan, 0)
                             for d in datasets]
                    series.append((c.label, [100 * m for m, _, _ in cells], [100 * s for _, s, _ in cells]))
                images.append(grouped_bars(
                    out / f"acc_{tag}_{protocol}{suffix}.png",
                    f"Accuracy, {part}, {PROTOCOL_SHORT[protocol]}; mean ± std over seeds", datasets, series,
                    "accuracy (%)"))
    images += _attack_plots(out, data["attacks"])
    by_panel: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for p in data["curves"]:
        by_panel[(p["partition"], p["dataset"])][p["method"]].append(p)
    for (part, ds), curves in sorted(by_panel.items()):
        tag = "iid" if part == "iid" else _slug(part)
        images.append(curves_plot(out / f"curves_{tag}_{ds}.png",
                                  f"{ds} ({part}): accuracy after each round, mean ± std over seeds", curves))
    if data["comm_rows"]:
        images.append(_comm_plot(out / "comm.png", data["comm_rows"]))
    return images


def _rank(d: str):
    return tables.dataset_rank(d)


def _attack_plots(out: Path, attacks: list[dict]) -> list[Path]:
    if not attacks:
        return []
    from fedgca.config import METHODS as METHOD_ORDER

    vals: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for a in attacks:
        for m in ("ntmse", "delta_cos"):
            vals[m][a["method"]][a["dataset"]].append(float(a[m]))
    datasets = sorted({a["dataset"] for a in attacks}, key=_rank)
    methods = [m for m in METHOD_ORDER if any(m == a["method"] for a in attacks)]
    methods += sorted({a["method"] for a in attacks} - set(methods))
    images = []
    for metric, ylabel in (("ntmse", "NTMSE (higher = less leakage)"), ("delta_cos", "Δcos (lower = less leakage)")):
        series = []
        for m in methods:
            cells = [tables.mean_std(vals[metric][m].get(d, [])) for d in datasets]
            series.append((tables.METHOD_LABELS.get(m, m), [c[0] for c in cells], [c[1] for c in cells]))
        images.append(grouped_bars(out / f"attack_{metric}.png", f"Extraction attacks: {ylabel}; mean ± std over seeds",
                                   datasets, series, ylabel, log=(metric == "ntmse")))
    return images


def _comm_plot(path: Path, rows: list[dict]) -> Path:
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    ks = sorted({r["k"] for r in rows})
    series = []
    for k in ks:
        by = {r["dataset"]: r["gca_total_mib"] for r in rows if r["k"] == k}
        series.append((f"GCA K={k}", [by.get(d, np.nan) for d in datasets], [0] * len(datasets)))
    fl = {r["dataset"]: r["fl_total_mib"] for r in rows}
    series.append(("FL (FedAvg/FedProx/FedNova/DP-FedAvg)", [fl[d] for d in datasets], [0] * len(datasets)))
    return grouped_bars(path, "Per-round communication, up + down (MiB), from the built payloads",
                        datasets, series, "MiB per round (log)", log=True)
