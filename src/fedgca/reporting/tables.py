"""Collect run summaries and render the paper-layout tables (Markdown, CSV, LaTeX)."""
from __future__ import annotations

import numpy as np

from fedgca import methods
from fedgca.config import DATASET_PRESETS
from fedgca.evaluation.selection import DETECTION
from fedgca.tabletext import csv_text

METHOD_LABELS = {name: spec.label for name, spec in methods.REGISTRY.items()}


def dataset_rank(d: str):
    """Datasets in SPEC's order (the presets table), unknown ones after them."""
    order = tuple(DATASET_PRESETS)
    return (order.index(d), d) if d in order else (len(order), d)


def mean_std(values) -> tuple[float, float, int]:
    """Mean and sample std (ddof = 1; 0 for a single seed) over seeds."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan"), 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)


def metric_of(summary: dict, protocol: str, metric: str) -> float:
    return summary[protocol][metric]


def pivot(summaries: list[dict], protocol: str, metric: str, row_key="dataset", col_key="method") -> dict:
    """{row: {col: (mean, std, n)}} over seeds."""
    cells: dict = {}
    for s in summaries:
        cells.setdefault(s[row_key], {}).setdefault(s[col_key], []).append(metric_of(s, protocol, metric))
    return {r: {c: mean_std(v) for c, v in cols.items()} for r, cols in cells.items()}


def fmt(cell, scale: float = 100.0, digits: int = 2) -> str:
    mean, std, n = cell
    if n == 0:
        return "—"
    if n == 1:  # one seed has no spread: say so rather than print ± 0
        return f"{mean * scale:.{digits}f} (1 seed)"
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def pivot_rows(summaries: list[dict], protocol: str, metric: str, columns: list[str],
               corner: str = "dataset") -> tuple[list[str], list[list[str]]]:
    """A pivot as printable rows: one per dataset, one formatted cell per method column."""
    table = pivot(summaries, protocol, metric)
    head = [corner] + [METHOD_LABELS.get(c, str(c)) for c in columns]
    body = [[str(r)] + [fmt(table[r][c]) if c in table[r] else "—" for c in columns] for r in table]
    return head, body


# Reporting-protocol options and the values the paper's protocol (and every run made before they existed) has.
PROTOCOL_DEFAULTS = {"val_fraction": 0.0, "threshold": "train-quantile", "baseline_eval": "global",
                     "optimizer_state": "keep"}


def paper_protocol(row: dict) -> bool:
    """Whether a summary / runs.csv row ran under the paper's protocol (absent fields: older runs, which did)."""
    def value(k):
        v = row.get(k)
        return PROTOCOL_DEFAULTS[k] if v in (None, "", "None") else v

    return all((float(value(k)) == v) if isinstance(v, float) else (value(k) == v) for k, v in PROTOCOL_DEFAULTS.items())


# runs.csv's privacy columns ← summary.json's ``dp`` block (DP-FedAvg: user-level ε of its noise multiplier;
# DP-GCA / DP-SGD-FedAvg: record-level ε, σ_g and σ_z); empty for a run without one.
DP_COLUMNS = {"dp_epsilon": ("epsilon",), "dp_delta": ("delta",), "dp_sigma": ("noise_multiplier", "grad_sigma"),
              "dp_code_sigma": ("code_sigma",)}


def _dp_cells(summary: dict) -> list:
    dp = summary.get("dp") or {}
    return [next((dp[k] for k in keys if dp.get(k) is not None), None) for keys in DP_COLUMNS.values()]


def raw_csv(summaries: list[dict]) -> str:
    """One line per run: the figures behind every table, the privacy a DP run spent, the commit that made the run
    and the CPU kernel family it ran on (``code`` / ``cpu``: empty for runs older than those summary fields)."""
    fields = ["dataset", "method", "seed", "rounds", "k", "backend", "weights", "partition", *PROTOCOL_DEFAULTS]
    metrics = [f"{p}_{m}" for p in ("peak", "final", "selected") for m in DETECTION]
    body = [[s.get(f) for f in fields] + [s[p][m] for p in ("peak", "final", "selected") for m in DETECTION]
            + _dp_cells(s) + [s["wall_seconds"], (s.get("code") or {}).get("git"), (s.get("code") or {}).get("cpu")]
            for s in summaries]
    extra = []
    if any("local_epoch_peak_accuracy" in s for s in summaries):  # --eval-local-epochs runs: e=1 … E, ';'-joined
        extra = ["local_epoch_peak_accuracy"]
        for row, s in zip(body, summaries):
            peaks = s.get("local_epoch_peak_accuracy") or {}
            row.append(";".join(repr(peaks[e]) for e in sorted(peaks, key=int)))
    return csv_text(fields + metrics + [*DP_COLUMNS, "wall_seconds", "code", "cpu", *extra], body)
