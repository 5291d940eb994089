"""``fedgca compare``: GCA and the baselines on the same data, partitions and seeds."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from fedgca import methods as registry
from fedgca.config import METHODS, SEEDS, RunConfig
from fedgca.reporting import tables

log = logging.getLogger("fedgca")

TABLES = [  # (title, protocol, metric)
    ("Accuracy (%), paper protocol: peak test accuracy over evaluations, mean ± std over seeds", "peak", "accuracy"),
    ("Accuracy (%), final round", "final", "accuracy"),
    ("Accuracy (%), round selected on validation reconstruction error (no test labels)", "selected", "accuracy"),
    ("AUROC (%), final round", "final", "auroc"),
    ("AUROC (%), at the paper-protocol peak", "peak", "auroc"),
]


def grid(base: RunConfig, datasets, methods, seeds) -> list[RunConfig]:
    """One canonical config per (dataset, method, seed), each method at the dataset's preset."""
    from fedgca.experiments.sweep import canonical

    return [canonical(dataclasses.replace(base, dataset=d, method=m, seed=s))
            for d in datasets for m in methods for s in seeds]


def run_grid(base: RunConfig, datasets, methods, seeds, root: Path, data_dir=None, workers: int = 1) -> list[dict]:
    """Run every (dataset, method, seed) not already finished in ``root``; resume unfinished ones.

    A comparison is a sweep: same run directories (``root/runs/<config key>``), ledger, skipping,
    resuming and worker processes as ``fedgca sweep``, so a comparison and a sweep that share a
    directory share their runs.
    """
    from fedgca.experiments import sweep

    configs = grid(base, datasets, methods, seeds)
    result = sweep.run_sweep(configs, root, workers=workers, data_dir=data_dir)
    if result["failed"]:
        raise RuntimeError(f"{len(result['failed'])} run(s) failed (see {Path(root) / sweep.LEDGER}): "
                           + "; ".join(str(f) for f in result["failed"])[:500])
    return [json.loads((sweep.run_dir(root, c) / sweep.SUMMARY).read_text()) for c in configs]


def attack_table(base: RunConfig, datasets, methods, seeds, root: Path, data_dir=None) -> str:
    """SPEC §6 on client 0 of every attackable run of the grid (skipping runs attacked already), as Markdown."""
    from fedgca.attacks.run import attack_run
    from fedgca.experiments import sweep
    from fedgca.reporting.report import attack_tables, md_table

    records = []
    for cfg in grid(base, datasets, [m for m in methods if m in registry.names(attack=True)], seeds):
        out = sweep.run_dir(root, cfg)
        done = out / "attack.json"
        records.append(json.loads(done.read_text()) if done.exists() else attack_run(out, victim=0, data_dir=data_dir))
    return "\n\n".join(f"### {t.title}\n\n{md_table(t)}" for t in attack_tables(records))


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
        table = tables.pivot(summaries, protocol, metric)
        body = tables.render(table, list(methods), style=style)
        parts.append(f"### {title}\n\n{body}" if style == "md" else f"# {title}\n{body}")
    return "\n".join(parts)


def write_outputs(root: Path, summaries: list[dict], methods) -> dict[str, Path]:
    paths = {"md": root / "comparison.md", "csv": root / "comparison.csv", "runs": root / "runs.csv"}
    paths["md"].write_text(render_comparison(summaries, methods, "md"))
    paths["csv"].write_text(render_comparison(summaries, methods, "csv"))
    paths["runs"].write_text(tables.raw_csv(summaries))
    return paths


DEFAULT_METHODS = METHODS  # every registered method, in table order
DEFAULT_SEEDS = SEEDS
