"""The tables of ``fedgca compare``: one row per dataset, one column per method, per reporting protocol."""
from __future__ import annotations

from pathlib import Path

from fedgca.reporting import tables
from fedgca.reporting.render import md_table
from fedgca.tabletext import csv_text, markdown

TABLES = [  # (title, protocol, metric)
    ("Accuracy (%), paper protocol: peak test accuracy over evaluations, mean ± std over seeds", "peak", "accuracy"),
    ("Accuracy (%), final round", "final", "accuracy"),
    ("Accuracy (%), round selected on validation reconstruction error (no test labels)", "selected", "accuracy"),
    ("AUROC (%), final round", "final", "auroc"),
    ("AUROC (%), at the paper-protocol peak", "peak", "auroc"),
]



def setting(summaries: list[dict]) -> str:
    """What the tables were measured on: rounds, seeds, partition, and the compute the runs took."""
    def values(key):
        return ", ".join(str(v) for v in sorted({s.get(key) for s in summaries}, key=str))

    run_seconds = sum(float(s.get("wall_seconds", 0.0)) for s in summaries)
    return (f"Setting: rounds R = {values('rounds')}; seeds {values('seed')}; partition {values('partition')}; "
            f"{len(summaries)} runs, {run_seconds:.0f} s of run time in all (sum of per-run wall seconds).")


def render_comparison(summaries: list[dict], methods, style: str = "md") -> str:
    parts = [setting(summaries) + ("\n" if style == "md" else "")]
    for title, protocol, metric in TABLES:
        head, body = tables.pivot_rows(summaries, protocol, metric, list(methods))
        body = markdown(head, body) if style == "md" else csv_text(head, body)
        parts.append(f"### {title}\n\n{body}" if style == "md" else f"# {title}\n{body}")
    return "\n".join(parts)


def write_outputs(root: Path, summaries: list[dict], methods) -> dict[str, Path]:
    paths = {"md": root / "comparison.md", "csv": root / "comparison.csv", "runs": root / "runs.csv"}
    paths["md"].write_text(render_comparison(summaries, methods, "md"))
    paths["csv"].write_text(render_comparison(summaries, methods, "csv"))
    paths["runs"].write_text(tables.raw_csv(summaries))
    return paths




def render_attacks(records: list[dict]) -> str:
    from fedgca.reporting.report import attack_tables

    return "\n\n".join(f"### {t.title}\n\n{md_table(t)}" for t in attack_tables(records))
