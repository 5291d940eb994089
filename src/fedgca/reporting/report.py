"""``fedgca report DIR``: the paper's tables and plots from any tree of finished runs.

Every ``summary.json`` under DIR is one run (sweep directories, ``compare``
directories, single runs — any mix). A run's config is its ``config.json``
(else rebuilt from the summary), made canonical (:func:`fedgca.experiments.sweep.canonical`)
so that the same experiment found twice counts once. Runs that differ only in
their seed form a group; cells are the mean ± sample std (ddof = 1) over the
group's seeds.

Runs are first split by *setting* — the options every method shares (rounds,
C, batch size, learning rate, participation, threshold quantile, validation
fraction) — so that a quick run is never averaged with a full one; each
setting gets its own section. Within a setting:

- comparison tables (IID and non-IID): one column per method; GCA appears as
  one column per backend at that backend's K* (inverse weights);
- accuracy by K for each backend, with the K* rule applied: the K ∈ {10, 20,
  40, 80} with the highest mean *peak* accuracy, exact ties to the smaller K
  (all K present are considered when none of the grid values is);
- inverse vs uniform weighting at K*;
- the attack table (``attack.json`` files: NTMSE and Δcos);
- communication inputs and per-round MiB for K ∈ {10, 20, 40, 80}, built from
  the payloads of :mod:`fedgca.experiments.comm` for each dataset's recorded
  C, ρ and client sizes, and checked against the bytes the GCA runs recorded.

Every table's caption names its reporting protocol (paper peak, final round,
validation-selected round). Outputs in ``DIR/report/``: ``report.md``,
``report.tex``, one CSV per table, ``cells.csv`` (every number, tidy),
``curves.csv``, ``runs.csv``, ``index.csv`` (file → caption) and PNG plots.
"""
from __future__ import annotations

import csv
import logging
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fedgca.config import ABLATION_CLIENT
from fedgca.reporting import privacy, tables
from fedgca.reporting.comm_tables import comm_tables
from fedgca.reporting.groups import (  # noqa: F401 — the report's vocabulary, re-exported
    AXES,
    BACKEND_LABELS,
    BACKEND_ORDER,
    DATASET_ORDER,
    METHOD_ORDER,
    METRIC_TEXT,
    PROTOCOL_TEXT,
    PROTOCOLS,
    REPORT_DIR,
    SETTING_FIELDS,
    Column,
    Group,
    Run,
    _backend_rank,
    _config_of,
    _variant_labels,
    comparison_columns,
    group_runs,
    k_star,
    load_attacks,
    load_runs,
    setting_of,
    variant_of,
)
from fedgca.reporting.render import (
    Table,
    csv_table,
    md_table,
    tex_escape,
    tex_table,
    tidy_cells,
)
from fedgca.rundir import CLIENT_METRICS
from fedgca.tabletext import dicts_csv, markdown

log = logging.getLogger("fedgca")

# --------------------------------------------------------------------------- tables


def protocol_note(protocol: str, setting: tuple) -> str:
    text = f"Protocol: {PROTOCOL_TEXT[protocol]}"
    if protocol == "selected" and dict(setting).get("val_fraction", 0) == 0:
        text += " — val_fraction = 0 in these runs, so this is the final round"
    return text


def comparison_tables(groups, setting, partition: str, tag: str, heading: str) -> list[Table]:
    cols = comparison_columns(groups, partition)
    if not cols:
        return []
    datasets = sorted({d for c in cols for d in c.cells}, key=tables.dataset_rank)
    notes = [c.note for c in cols if c.note]
    out = []
    combos = [("peak", "accuracy"), ("final", "accuracy"), ("selected", "accuracy"),
              ("peak", "auroc"), ("final", "auroc"), ("final", "auprc")]
    if dict(setting).get("val_fraction", 0) > 0:  # a validation-selected round other than the final one
        combos += [("selected", "auroc"), ("selected", "auprc")]
    for protocol, metric in combos:
        at = " at the peak-accuracy evaluation" if protocol == "peak" and metric != "accuracy" else ""
        rows = [[ds] + [c.cells[ds].cell(protocol, metric) if ds in c.cells else None for c in cols]
                for ds in datasets]
        out.append(Table(
            f"{tag}_comparison_{metric}_{protocol}",
            f"{heading}: {METRIC_TEXT[metric]}{at}. {protocol_note(protocol, setting)}",
            protocol, ["dataset"] + [c.label for c in cols], rows,
            notes=[("GCA columns at K* by the paper rule (peak accuracy): " + "; ".join(notes) + ".")] if notes else [],
        ))
    return out


def _gca_families(groups: list[Group], partition: str, weights: str | None = "inverse") -> dict[tuple, list[Group]]:
    """(dataset, backend, variant) → its groups at different K."""
    fam: dict[tuple, list[Group]] = defaultdict(list)
    for g in groups:
        if g.method == "gca" and g.partition == partition and (weights is None or g.weights == weights):
            fam[(g.dataset, g.backend, g.variant)].append(g)
    return fam


def k_tables(groups, setting, partition: str, tag: str, heading: str) -> list[Table]:
    fam = _gca_families(groups, partition)
    if not any(len({g.k for g in gs}) > 1 for gs in fam.values()):
        return []  # no K sweep here: the comparison captions name the K used
    labels = _variant_labels([g for gs in fam.values() for g in gs])
    ks = sorted({g.k for gs in fam.values() for g in gs})
    order = sorted(fam, key=lambda f: (tables.dataset_rank(f[0]), _backend_rank(f[1]), str(f[2])))
    out = []
    for protocol in ("peak", "final"):
        rows = []
        for f in order:
            by_k = {g.k: g for g in fam[f]}
            best = k_star(fam[f])
            rows.append([f[0], BACKEND_LABELS.get(f[1], f[1]) + labels[f[2]]]
                        + [by_k[k].cell(protocol, "accuracy") if k in by_k else None for k in ks]
                        + [str(best.k) if best else "—"])
        rule = ("K* = the K ∈ {10, 20, 40, 80} with the highest mean peak accuracy, exact ties to the smaller K"
                + ("" if protocol == "peak" else " (chosen on the paper protocol, shown here with final-round accuracy)"))
        out.append(Table(f"{tag}_accuracy_by_k_{protocol}",
                         f"{heading}: GCA accuracy (%) by K for each clustering backend (inverse weights). "
                         f"{protocol_note(protocol, setting)}. {rule}",
                         protocol, ["dataset", "backend"] + [f"K={k}" for k in ks] + ["K*"], rows, label_cols=2))
    return out


def weight_tables(groups, setting, partition: str, tag: str, heading: str) -> list[Table]:
    inv = _gca_families(groups, partition, "inverse")
    uni = _gca_families(groups, partition, "uniform")
    fams = [f for f in inv if f in uni]
    if not fams:
        return []
    labels = _variant_labels([g for f in fams for g in inv[f] + uni[f]])
    out = []
    for protocol in ("peak", "final"):
        rows = []
        for f in sorted(fams, key=lambda f: (tables.dataset_rank(f[0]), _backend_rank(f[1]), str(f[2]))):
            best = k_star(inv[f])
            if best is None:
                continue
            u = next((g for g in uni[f] if g.k == best.k), None)
            ci, cu = best.cell(protocol, "accuracy"), u.cell(protocol, "accuracy") if u else None
            delta = f"{100 * (cu[0] - ci[0]):+.2f}" if cu and cu[2] and ci[2] else "—"
            rows.append([f[0], BACKEND_LABELS.get(f[1], f[1]) + labels[f[2]], str(best.k), ci, cu, delta])
        out.append(Table(f"{tag}_weights_{protocol}",
                         f"{heading}: GCA accuracy (%) with inverse-support vs uniform alignment weights at K* "
                         f"(K* from the inverse-weight K sweep, paper rule). {protocol_note(protocol, setting)}. "
                         "Δ = uniform − inverse, in points",
                         protocol, ["dataset", "backend", "K*", "inverse", "uniform", "Δ (pts)"], rows, label_cols=2))
    rows = []
    for f in sorted(fams, key=lambda f: (tables.dataset_rank(f[0]), _backend_rank(f[1]), str(f[2]))):
        best = k_star(inv[f])
        u = next((g for g in uni[f] if g.k == best.k), None) if best else None
        if u is None:
            continue
        ci, cu = (tables.mean_std([v for v in (align_peak_of_client(r) for r in g.runs) if v is not None])
                  for g in (best, u))
        if not (ci[2] and cu[2]):
            continue  # these runs did not evaluate after alignment epochs (--eval-align-epochs)
        rows.append([f[0], BACKEND_LABELS.get(f[1], f[1]) + labels[f[2]], str(best.k), ci, cu,
                     f"{100 * (cu[0] - ci[0]):+.2f}"])
    if rows:
        out.append(Table(f"{tag}_weights_align_client{ABLATION_CLIENT}",
                         f"{heading}, the paper's statistic: per seed, the highest accuracy (%) of one fixed client "
                         f"(client {ABLATION_CLIENT}) over the evaluations after every alignment epoch "
                         "(R × T_align of them; runs with --eval-align-epochs), mean ± std over seeds, at K*. "
                         "Uses test labels, like the paper's peak; the tables above use the all-client mean at the "
                         "paper's evaluation points instead. Δ = uniform − inverse, in points",
                         "peak", ["dataset", "backend", "K*", "inverse", "uniform", "Δ (pts)"], rows, label_cols=2))
    return out


def align_peak_of_client(run: Run, client: int = ABLATION_CLIENT) -> float | None:
    """The highest test accuracy of ``client`` over the run's alignment-epoch evaluations (metrics_clients.csv);
    None when the run has none (it was not run with --eval-align-epochs, or predates that file)."""
    path = run.path / CLIENT_METRICS
    if not path.exists():
        return None
    with path.open(newline="") as f:
        values = [float(r["accuracy"]) for r in csv.DictReader(f)
                  if r["phase"] == "align" and int(r["client"]) == client]
    return max(values) if values else None


def attack_tables(attacks: list[dict]) -> list[Table]:
    if not attacks:
        return []
    cells: dict = defaultdict(lambda: defaultdict(lambda: {"ntmse": [], "delta_cos": []}))
    for a in attacks:
        part = a.get("partition", "iid")
        row = a["dataset"] if part == "iid" else f"{a['dataset']} ({part})"
        for m in ("ntmse", "delta_cos"):
            cells[row][a["method"]][m].append(float(a[m]))
    methods = [m for m in METHOD_ORDER if any(m in c for c in cells.values())]
    methods += sorted({m for c in cells.values() for m in c} - set(methods))
    rows_sorted = sorted(cells, key=tables.dataset_rank)
    out = []
    for metric, title in (("ntmse", "NTMSE (higher = less leakage)"), ("delta_cos", "Δcos (lower = less leakage)")):
        rows = [[r] + [tables.mean_std(cells[r][m][metric]) if m in cells[r] else None for m in methods]
                for r in rows_sorted]
        out.append(Table(f"attack_{metric}", f"Server-side extraction attacks: {title}. Protocol: attacks on the "
                         "victim client's round-R (final) model — white-box inversion for parameter-sharing "
                         "methods, latent-only flipping for GCA (SPEC §6)", "attack",
                         ["dataset"] + [tables.METHOD_LABELS.get(m, m) for m in methods], rows, scale=1.0, digits=3))
    return out


# --------------------------------------------------------------------------- curves


def round_curves(runs: list[Run], columns_by_partition: dict[str, list[Column]] | None = None) -> list[dict]:
    """Accuracy after each round (metrics.csv rows with phase == "round"), mean ± std over seeds.

    One curve per dataset, partition and column (method; GCA at K* per backend
    when ``columns_by_partition`` is given, else every GCA group separately).
    """
    out = []
    if columns_by_partition is None:
        groups = [g for gs in group_runs(runs).values() for g in gs]
        items = [(g.partition, g.dataset, _group_label(g), g) for g in groups]
    else:
        items = [(part, ds, col.label, g) for part, cols in columns_by_partition.items()
                 for col in cols for ds, g in col.cells.items()]
    for part, ds, label, g in items:
        per_round: dict[int, list[float]] = defaultdict(list)
        for r in g.runs:
            for rnd, acc in _round_accuracy(r.path / "metrics.csv"):
                per_round[rnd].append(acc)
        for rnd in sorted(per_round):
            m, s, n = tables.mean_std(per_round[rnd])
            out.append({"dataset": ds, "partition": part, "method": label, "round": rnd, "mean": m, "std": s, "n": n})
    return out


def _group_label(g: Group) -> str:
    if g.method != "gca":
        return tables.METHOD_LABELS[g.method]
    return f"GCA-{BACKEND_LABELS.get(g.backend, g.backend)} K={g.k} {g.weights}"


def _round_accuracy(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [(int(r["round"]), float(r["accuracy"])) for r in csv.DictReader(f) if r.get("phase") == "round"]


# --------------------------------------------------------------------------- the report


@dataclass
class Section:
    title: str
    tables: list[Table]
    intro: str = ""


def _setting_text(setting: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting)


def build(root, exclude: Path | None = None) -> dict:
    """Everything the report shows, as data: sections of tables, curves, comm rows, notes."""
    runs, notes = load_runs(root, exclude)
    attacks = load_attacks(root, exclude)
    by_setting = group_runs(runs)
    sections: list[Section] = []
    columns: dict[tuple, dict[str, list[Column]]] = {}
    settings = sorted(by_setting, key=lambda s: (-sum(len(g.runs) for g in by_setting[s]), str(s)))
    for i, setting in enumerate(settings):
        groups = by_setting[setting]
        suffix = f"_s{i + 1}" if len(settings) > 1 else ""
        ts: list[Table] = []
        parts = sorted({g.partition for g in groups}, key=lambda p: (p != "iid", p))
        columns[setting] = {}
        for part in parts:
            tag = {"iid": "iid", "natural": "natural"}.get(part, "noniid")  # natural: one client per site
            dirichlet = [p for p in parts if p.startswith("dirichlet")]
            if part.startswith("dirichlet") and len(dirichlet) > 1:
                tag += re.sub(r"\W+", "", part.split("(")[1])
            heading = {"iid": "IID", "natural": "Natural partition (one client per site)"}.get(
                part, "Non-IID (Dirichlet " + part[10:-1].replace("alpha", "α") + ")")
            ts += comparison_tables(groups, setting, part, tag, f"{heading} comparison")
            ts += k_tables(groups, setting, part, tag, f"{heading} K sweep")
            ts += weight_tables(groups, setting, part, tag, f"{heading} weighting ablation")
            columns[setting][part] = comparison_columns(groups, part)
        for t in ts:
            t.id += suffix
        n = sum(len(g.runs) for g in groups)
        title = "Results" if len(settings) == 1 else f"Setting {i + 1}"
        sections.append(Section(title, ts, f"Setting: {_setting_text(setting)} ({n} runs)."))
    at = attack_tables(attacks)
    if at:
        sections.append(Section("Attacks", at, f"{len(attacks)} attack results."))
    ct, comm_rows, _ = comm_tables(runs)
    if ct:
        sections.append(Section("Communication", ct))
    main_setting = settings[0] if settings else None
    curves = round_curves(runs, columns.get(main_setting)) if main_setting is not None else []
    return {"runs": runs, "attacks": attacks, "sections": sections, "notes": notes, "curves": curves,
            "comm_rows": comm_rows, "columns": columns, "settings": settings,
            "privacy": privacy.privacy_rows(runs, attacks)}


PENDING = "pending.csv"


def unfinished(root: Path, data_dir=None) -> dict | None:
    """A sweep directory's runs not finished yet (``sweep.remaining``), or None (all finished, or not a sweep)."""
    from fedgca.experiments import sweep

    try:
        left = sweep.remaining(root, data_dir=data_dir)
    except ValueError as err:  # a sweep.json of another version: the report of what finished still stands
        log.warning("%s; the report does not list the unfinished runs", err)
        return None
    return left if left and left["left"] else None


def _pending_rows(left: dict) -> list[dict]:
    return [{"key": c.key(), "state": left["states"][c.key()],
             "tflop": f"{left['flops'][c.key()] / 1e12:.2f}" if left["flops"] else "", **c.to_dict()}
            for c in left["left"]]


def _unfinished_text(left: dict) -> tuple[str, list[list[str]]]:
    """The report's sentence on a sweep's unfinished runs, and a row per cell (a run's settings but its seed)."""
    from fedgca.experiments import sweep

    states = [left["states"][c.key()] for c in left["left"]]
    counts = ", ".join(f"{states.count(s)} {s}" for s in ("partial", "failed", "pending") if states.count(s))
    text = (f"{len(left['left'])} of the sweep's {len(left['configs'])} runs have not finished ({counts}); "
            f"`{PENDING}` lists them. " + (f"Left: {sweep.pace_text(left['left_flops'], left['rate'])}. "
                                           if left["flops"] else "")
            + "Running the sweep's command again resumes them.")
    cells: dict[str, list[str]] = {}
    for c in left["left"]:
        cells.setdefault(re.sub(r" seed=\S+", "", sweep.describe(c)), []).append(str(c.seed))
    return text, [[cell, ", ".join(seeds)] for cell, seeds in cells.items()]


def write_report(root, out=None, plots: bool = True, data_dir=None) -> dict[str, Path]:
    """``data_dir``: the datasets, for the predicted work of a sweep's unfinished runs (``sweep.remaining``)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory")
    out = Path(out) if out else root / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    data = build(root, exclude=out)
    if not data["runs"] and not data["attacks"]:
        raise ValueError(f"{root}: no finished runs (summary.json) found")
    data["unfinished"] = unfinished(root, data_dir)
    if data["unfinished"]:
        rows = _pending_rows(data["unfinished"])
        _write_dicts(out / PENDING, rows, list(rows[0]))
    else:
        (out / PENDING).unlink(missing_ok=True)  # a previous report's list, now stale
    all_tables = [t for s in data["sections"] for t in s.tables]

    index = []
    for t in all_tables:
        (out / f"{t.id}.csv").write_text(csv_table(t))
        index.append({"file": f"{t.id}.csv", "protocol": t.protocol, "caption": t.caption()})
    (out / "cells.csv").write_text(tidy_cells(all_tables))
    (out / "runs.csv").write_text(tables.raw_csv([r.record for r in data["runs"]]))
    _write_dicts(out / "curves.csv", data["curves"], ["dataset", "partition", "method", "round", "mean", "std", "n"])
    if data["comm_rows"]:
        from fedgca.experiments import comm

        (out / "comm.csv").write_text(comm.render(data["comm_rows"], "csv"))
    _write_dicts(out / "index.csv", index, ["file", "protocol", "caption"])

    images = []
    if plots:
        from fedgca.reporting import plots as P

        images = P.make_plots(out, data)
    if data["privacy"]:
        images += privacy.write(out, data["privacy"]) if plots else []
        if not plots:
            privacy.write_csv(out, data["privacy"])

    label = _label(root)
    md = _markdown(label, data, images)
    (out / "report.md").write_text(md)
    (out / "report.tex").write_text(_latex(label, data, images))
    return {"md": out / "report.md", "tex": out / "report.tex", "dir": out, "images": images}


def _write_dicts(path: Path, rows: list[dict], fields: list[str]) -> None:
    path.write_text(dicts_csv(rows, fields))


def _label(root: Path) -> str:
    """How a report names its directory: relative to the working directory when inside it, else its name
    (a report holds no machine's absolute paths)."""
    try:
        return Path(root).resolve().relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return Path(root).resolve().name


def _markdown(root: str, data: dict, images: list[Path]) -> str:
    runs = data["runs"]
    lines = [f"# fedgca report: {root}", "",
             f"{len(runs)} finished runs ({len({(r.config.dataset, r.config.method) for r in runs})} dataset × method "
             f"pairs), {len(data['attacks'])} attack results. Cells: mean ± sample std over seeds.", ""]
    for n in data["notes"]:
        lines.append(f"- note: {n}")
    if data["notes"]:
        lines.append("")
    if data.get("unfinished"):
        text, cells = _unfinished_text(data["unfinished"])
        lines += ["## Not finished", "", text, "", markdown(["cell", "seeds left"], cells), ""]
    for s in data["sections"]:
        lines += [f"## {s.title}", ""]
        if s.intro:
            lines += [s.intro, ""]
        for t in s.tables:
            lines += [f"**Table `{t.id}`.** {t.caption()}", "", md_table(t)]
    if data["privacy"]:
        lines += ["## Record-level DP: privacy–utility and leakage", "",
                  "DP methods beside their non-private counterparts in the same setting (ε = ∞); ε: the runs' "
                  "--target-epsilon (record-level, replace-one, δ = 1e-5; docs/DP.md); accuracy and AUROC in %, "
                  "mean ± std over seeds; NTMSE/Δcos: SPEC §6 attacks on client 0 (file: privacy.csv).", "",
                  privacy.markdown(data["privacy"]), ""]
        lines += [f"- {c}" for c in privacy.conclusions(data["privacy"])] + [""]
    if images:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in images] + [""]
    return "\n".join(lines)


def _latex(root: str, data: dict, images: list[Path]) -> str:
    parts = [r"\documentclass{article}", r"\usepackage[margin=2cm]{geometry}", r"\usepackage{booktabs}",
             r"\usepackage{graphicx}", r"\usepackage{adjustbox}", r"\usepackage[T1]{fontenc}", r"\usepackage[utf8]{inputenc}",
             r"\begin{document}", r"\section*{fedgca report}",
             tex_escape(f"{len(data['runs'])} finished runs from {root}. Cells: mean ± sample std over seeds."), ""]
    if data.get("unfinished"):
        parts += [r"\subsection*{Not finished}", tex_escape(_unfinished_text(data["unfinished"])[0]), ""]
    for s in data["sections"]:
        parts += [r"\subsection*{" + tex_escape(s.title) + "}", tex_escape(s.intro), ""]
        for i, t in enumerate(s.tables):
            parts.append(tex_table(t))
            if i % 8 == 7:
                parts.append(r"\clearpage")  # LaTeX holds at most 18 floats in waiting
        parts.append(r"\clearpage")
    for p in images:
        parts += [r"\begin{figure}[ht]\centering", r"\includegraphics[width=0.9\linewidth]{" + p.name + "}",
                  r"\caption{" + tex_escape(p.stem) + "}", r"\end{figure}", ""]
    parts += [r"\end{document}", ""]
    return "\n".join(parts)


__all__ = ["Run", "Group", "Table", "build", "k_star", "load_runs", "round_curves", "write_report"]
