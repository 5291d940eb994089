"""Which evaluation a run reports under each protocol: final, peak (the paper's) and validation-selected.

Both drivers (the simulator and the Flower ServerApp) write metrics.csv with
``METRIC_FIELDS`` and pick the reported evaluations with ``protocol_results``.
"""
from __future__ import annotations

DETECTION = ("accuracy", "auroc", "auprc")  # the detection metrics, mean over clients
METRIC_KEYS = (*DETECTION, "train_error", "val_error")  # every figure of an evaluation
METRIC_FIELDS = ["round", "phase", "epoch", *METRIC_KEYS, "paper"]  # metrics.csv's columns


def _pick(row: dict, **extra) -> dict:
    return {**{m: row[m] for m in DETECTION}, "round": row["round"], "phase": row["phase"],
            "epoch": row["epoch"], **extra}


def validation_selected(rows: list[dict]) -> dict:
    """The round evaluation chosen without test labels: the lowest mean validation error, the first on ties."""
    return min((r for r in rows if r["phase"] == "round"), key=lambda r: r["val_error"])


def protocol_results(rows: list[dict], has_validation: bool) -> dict:
    """final / peak (paper) / selected (validation, no test labels) from the metric rows.

    peak: the evaluation with the highest test accuracy among the paper's
    evaluation points (its AUROC and AUPRC are those of the same evaluation).
    """
    round_rows = [r for r in rows if r["phase"] == "round"]
    paper_rows = [r for r in rows if r["paper"]]
    final = round_rows[-1]
    peak = max(paper_rows, key=lambda r: r["accuracy"])  # first maximum on ties
    if has_validation:
        selected = _pick(validation_selected(rows), rule="round with the lowest mean validation reconstruction error")
    else:
        selected = _pick(final, rule="final round (val_fraction = 0: no validation split)")
    return {
        "final": _pick(final, protocol="final round"),
        "peak": _pick(peak, protocol="paper: peak test accuracy over evaluations (uses test labels)"),
        "selected": selected,
    }
