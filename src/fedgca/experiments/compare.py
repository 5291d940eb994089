"""``fedgca compare``: GCA and the baselines on the same data, partitions and seeds."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

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


def run_dir(root: Path, cfg: RunConfig) -> Path:
    return root / f"{cfg.dataset}-{cfg.method}-{cfg.seed}"


def run_grid(base: RunConfig, datasets, methods, seeds, root: Path, data_dir=None) -> list[dict]:
    """Run every (dataset, method, seed) not already finished in ``root``; resume unfinished ones."""
    from fedgca.simulation.runner import run

    summaries = []
    for dataset in datasets:
        for method in methods:
            for seed in seeds:
                cfg = dataclasses.replace(base, dataset=dataset, method=method, seed=seed).resolved()
                out = run_dir(root, cfg)
                done = out / "summary.json"
                if done.exists():
                    log.info("done already: %s", out)
                else:
                    log.info("running %s", out)
                    run(cfg, out, data_dir=data_dir, resume=(out / "checkpoint.pt").exists())
                summaries.append(json.loads(done.read_text()))
    return summaries


def render_comparison(summaries: list[dict], methods, style: str = "md") -> str:
    parts = []
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


DEFAULT_METHODS = ("single", "centralized", "fedavg", "fedprox", "fednova", "dpfedavg", "gca")
assert set(DEFAULT_METHODS) == set(METHODS)
DEFAULT_SEEDS = SEEDS
