"""Runs found under a directory, grouped for the report: by setting, then by method and variant over seeds.

A run's config is its ``config.json`` (else rebuilt from the summary), made
canonical (:func:`fedgca.experiments.sweep.canonical`) so that the same
experiment found twice counts once. Runs that differ only in their seed form a
group; a setting is the options every method shares.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fedgca.config import BACKENDS, DATASET_PRESETS, K_GRID, METHODS, RunConfig
from fedgca.reporting import tables

log = logging.getLogger("fedgca")

REPORT_DIR = "report"
PROTOCOLS = ("peak", "final", "selected")
PROTOCOL_TEXT = {
    "peak": "paper (peak) — per seed, the highest test accuracy over the paper's evaluation points "
            "(GCA after every reconstruction epoch, baselines after every round); uses test labels",
    "final": "final — the models after the last round",
    "selected": "validation-selected — the round with the lowest mean validation reconstruction error; "
                "no test labels",
}
METRIC_TEXT = {"accuracy": "Accuracy (%)", "auroc": "AUROC (%)", "auprc": "AUPRC (%)"}
BACKEND_LABELS = {"gmm": "GMM", "kmeans": "K-means", "softkmeans": "Soft K-means", "minibatch": "Mini-batch K-means"}
BACKEND_ORDER = BACKENDS  # the paper's table order (config.BACKENDS)
METHOD_ORDER = METHODS  # the registry's table order
DATASET_ORDER = tuple(DATASET_PRESETS)

# Options every method reads: they define a *setting*; runs of different settings are never pooled.
SETTING_FIELDS = ("rounds", "clients", "participation", "batch_size", "lr", "lr_step", "lr_gamma", "quantile",
                  "val_fraction", "threshold")
AXES = {"dataset", "method", "seed", "partition", "alpha", "backend", "weights", "k"}


# --------------------------------------------------------------------------- loading


@dataclass
class Run:
    summary: dict
    config: RunConfig  # canonical
    path: Path  # the run directory

    @property
    def key(self) -> str:
        return self.config.key()

    @property
    def record(self) -> dict:
        """The summary with the run's config over it. config.json is the authority: a summary written before a
        field existed lacks it (the first protocol-variant runs' summaries name no baseline_eval)."""
        return {**self.summary, **dataclasses.asdict(self.config)}


def _config_of(summary: dict, run_path: Path) -> RunConfig:
    from fedgca.experiments.sweep_spec import canonical

    cfg_file = run_path / "config.json"
    if cfg_file.exists():
        cfg = RunConfig.from_dict(json.loads(cfg_file.read_text()))
    else:  # rebuilt from what summary.json records
        names = {f.name for f in dataclasses.fields(RunConfig)}
        cfg = RunConfig(**{k: v for k, v in summary.items() if k in names and not isinstance(v, dict)})
    return canonical(cfg)


def load_runs(root, exclude: Path | None = None) -> tuple[list[Run], list[str]]:
    """Every finished run under ``root`` (each config once) and notes on what was skipped."""
    root = Path(root)
    runs, seen, notes = [], {}, []
    for p in sorted(root.rglob("summary.json")):
        if exclude is not None and exclude in p.parents:
            continue
        try:
            summary = json.loads(p.read_text())
            run = Run(summary, _config_of(summary, p.parent), p.parent)
        except (ValueError, TypeError, KeyError) as err:
            notes.append(f"skipped {p}: {err}")
            continue
        if run.key in seen:
            notes.append(f"duplicate of {seen[run.key]} ignored: {p.parent}")
            continue
        seen[run.key] = p.parent
        runs.append(run)
    return runs, notes


def load_attacks(root, exclude: Path | None = None) -> list[dict]:
    out, seen = [], set()
    for p in sorted(Path(root).rglob("attack.json")):
        if exclude is not None and exclude in p.parents:
            continue
        try:
            doc = json.loads(p.read_text())
        except ValueError:
            continue
        for rec in doc if isinstance(doc, list) else [doc]:
            if not all(k in rec for k in ("method", "dataset", "seed", "ntmse", "delta_cos")):
                continue
            ident = (rec["dataset"], rec["method"], rec["seed"], rec.get("victim", 0), rec.get("partition", "iid"),
                     rec.get("k"), rec.get("target_epsilon"))
            if ident not in seen:
                seen.add(ident)
                out.append(rec)
    return out


# --------------------------------------------------------------------------- grouping


def setting_of(cfg: RunConfig) -> tuple:
    values = []
    for f in SETTING_FIELDS:
        v = getattr(cfg, f)
        if f == "clients" and v == DATASET_PRESETS.get(cfg.dataset, {}).get("clients"):
            v = "preset"
        values.append((f, v))
    return tuple(values)


def partition_label(cfg: RunConfig) -> str:
    """A run's partition as a table names it (Dirichlet with its α); not data.partition.partition_of's rows."""
    return f"dirichlet(alpha={cfg.alpha:g})" if cfg.partition == "dirichlet" else cfg.partition


def variant_of(cfg: RunConfig) -> tuple:
    """The method's own options other than the axes (e.g. GCA's epochs, DP-FedAvg's σ)."""
    d = cfg.to_dict()
    preset = DATASET_PRESETS.get(cfg.dataset, {})  # own data has none
    own = sorted(cfg.spec.options - set(SETTING_FIELDS) - AXES)
    # a dataset's own preset (e.g. ρ = 0.5 on academic, 0.25 on magic) is one variant: "preset"
    return tuple((f, "preset" if f in preset and d[f] == preset[f] else d[f]) for f in own)


@dataclass
class Group:
    dataset: str
    method: str
    partition: str
    variant: tuple
    backend: str | None
    weights: str | None
    k: int | None
    runs: list[Run] = field(default_factory=list)

    def values(self, protocol: str, metric: str) -> list[float]:
        return [r.summary[protocol][metric] for r in self.runs]

    def cell(self, protocol: str, metric: str) -> tuple[float, float, int]:
        return tables.mean_std(self.values(protocol, metric))

    def exact_mean(self, protocol: str = "peak", metric: str = "accuracy") -> float:
        v = [x for x in self.values(protocol, metric) if x is not None and math.isfinite(x)]
        return math.fsum(v) / len(v) if v else float("nan")

    @property
    def seeds(self) -> list[int]:
        return sorted(r.config.seed for r in self.runs)


def group_runs(runs: list[Run]) -> dict[tuple, list[Group]]:
    """setting → groups (one per config minus seed)."""
    by: dict[tuple, dict[tuple, Group]] = defaultdict(dict)
    for run in runs:
        c = run.config
        gca = c.method == "gca"
        gkey = (c.dataset, c.method, partition_label(c), variant_of(c), c.backend if gca else None,
                c.weights if gca else None, c.k if gca else None)
        grp = by[setting_of(c)].setdefault(gkey, Group(*gkey))
        grp.runs.append(run)
    return {s: list(g.values()) for s, g in by.items()}


def k_star_of(mean_peak: dict[int, float], seeds: dict[int, int] | None = None) -> int | None:
    """SPEC §5 rule over {K: mean peak accuracy}: the K ∈ {10, 20, 40, 80} with the highest mean;
    exact ties → smaller K. When none of them is at a grid K, every K present is a candidate.

    ``seeds`` ({K: runs behind its mean}): only the K values run on the most seeds compete; a K with one
    finished seed of three (a sweep still going) would otherwise win or lose on that one seed.
    """
    if seeds:
        most = max(seeds.get(k, 0) for k in mean_peak)
        mean_peak = {k: m for k, m in mean_peak.items() if seeds.get(k, 0) == most}
    cands = {k: m for k, m in mean_peak.items() if k in K_GRID} or dict(mean_peak)
    best = None
    for k in sorted(cands):
        if math.isfinite(cands[k]) and (best is None or cands[k] > cands[best]):  # ties keep the smaller K
            best = k
    return best


def k_star(groups: list[Group]) -> Group | None:
    """``k_star_of`` over one backend's groups at different K (same everything else)."""
    by_k = {g.k: g for g in groups}
    k = k_star_of({k: g.exact_mean("peak", "accuracy") for k, g in by_k.items()},
                  {k: len(g.runs) for k, g in by_k.items()})
    return by_k.get(k) if k is not None else None


def _variant_labels(groups: list[Group]) -> dict[tuple, str]:
    """A short suffix for each variant of one method: only the options that differ between its variants."""
    variants = sorted({g.variant for g in groups}, key=str)
    if len(variants) <= 1:
        return {v: "" for v in variants}
    fields_ = [f for f, _ in variants[0]]
    differing = [i for i, f in enumerate(fields_) if len({v[i][1] for v in variants}) > 1]
    return {v: " (" + ", ".join(f"{v[i][0]}={v[i][1]}" for i in differing) + ")" for v in variants}


@dataclass
class Column:
    label: str
    method: str
    cells: dict[str, Group]  # dataset → group
    note: str = ""


def comparison_columns(groups: list[Group], partition: str) -> list[Column]:
    """Baselines as they are; GCA per backend (and variant) at its K* with inverse weights."""
    gs = [g for g in groups if g.partition == partition]
    cols: list[Column] = []
    for method in METHOD_ORDER:
        mg = [g for g in gs if g.method == method]
        if not mg:
            continue
        labels = _variant_labels(mg)
        if method != "gca":
            for variant, suffix in labels.items():
                cells = {g.dataset: g for g in mg if g.variant == variant}
                cols.append(Column(tables.METHOD_LABELS[method] + suffix, method, cells))
            continue
        inv = [g for g in mg if g.weights == "inverse"] or mg
        for backend in sorted({g.backend for g in inv}, key=_backend_rank):
            for variant, suffix in labels.items():
                cells, picks = {}, []
                for ds in sorted({g.dataset for g in inv}, key=tables.dataset_rank):
                    cand = [g for g in inv if g.backend == backend and g.variant == variant and g.dataset == ds]
                    best = k_star(cand) if cand else None
                    if best is not None:
                        cells[ds] = best
                        picks.append(f"{ds} K={best.k}")
                if cells:
                    label = f"GCA-{BACKEND_LABELS.get(backend, backend)}{suffix}"
                    w = "" if inv[0].weights == "inverse" else f", {inv[0].weights} weights"
                    cols.append(Column(label, "gca", cells, f"{label}: K* ({'; '.join(picks)}){w}"))
    return cols


def _backend_rank(b):
    return BACKEND_ORDER.index(b) if b in BACKEND_ORDER else len(BACKEND_ORDER)


