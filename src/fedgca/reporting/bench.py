"""The bench report: files as rows, methods and peers as columns, ADBench's way of reading many files.

For each partition and metric (AUROC and AUPRC at the honest selection point: the round with the lowest
validation error, no test labels), mean ± std over seeds per file; per column the mean over the files every
column has, the average rank (1 = best; ties share their mean rank) and, for the federated methods, win / tie /
loss against Centralized, Single-Client and the best centralized peer (a tie: the seed means within ``TIE_PP``),
that peer named in a headline line; Friedman's test over the files, and a rank diagram with the Nemenyi critical
difference and the groups of columns it cannot tell apart (Demšar 2006; scipy's studentized range and Friedman
test, for any number of columns); and one line per file saying what it is. Written from a bench directory's
files alone (``fedgca.experiments.bench``), so a report can be made while the bench still runs.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from fedgca import methods as registry
from fedgca.tabletext import csv_text, markdown

METRICS = ("auroc", "auprc")
PROTOCOL = "selected"
TIE_PP = 0.5  # |Δ| of the seed means, in percentage points, that counts as a tie
ALPHA = 0.05  # the rank tests' level


@functools.lru_cache(maxsize=None)
def nemenyi_q(k: int, alpha: float = ALPHA) -> float:
    """Nemenyi's two-tailed q_α for k compared columns: the studentized range's 1 − α point (infinite degrees of
    freedom) over √2 — Demšar's Table 5 for k ≤ 10, and on for any k."""
    from scipy.stats import studentized_range

    return float(studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2))


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """The Nemenyi critical difference of average ranks over k columns and n files."""
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1) / (6 * n)) if k >= 2 and n >= 1 else float("nan")


def friedman(m: np.ndarray) -> tuple[float, float]:
    """Friedman's χ² and p-value over the files (rows) of ``m`` [files, columns] (NaN, NaN below 3 columns or 2
    files): whether the columns' ranks differ at all before the post-hoc test reads them."""
    from scipy.stats import friedmanchisquare

    if m.shape[1] < 3 or m.shape[0] < 2:
        return float("nan"), float("nan")
    res = friedmanchisquare(*m.T)
    return float(res.statistic), float(res.pvalue)


def cliques(rank: dict, cd: float) -> list[list[str]]:
    """The maximal groups of columns, adjacent in rank, whose average ranks lie within the critical difference (the
    bars of a CD diagram: the test cannot tell the columns of a group apart)."""
    if not math.isfinite(cd):
        return []
    order = sorted(rank, key=rank.get)
    groups = []
    for i in range(len(order)):
        j = i
        while j + 1 < len(order) and rank[order[j + 1]] - rank[order[i]] < cd:
            j += 1
        if j > i and not any(set(order[i:j + 1]) <= set(g) for g in groups):
            groups.append(order[i:j + 1])
    return groups


def load(root) -> dict:
    """The bench's plan, its finished runs' figures and its peers' (one record per run or peer fit)."""
    from fedgca.experiments.bench import PEER_DIR, PLAN

    root = Path(root)
    plan = json.loads((root / PLAN).read_text())
    records = []
    for run in plan["runs"]:
        summary = root / "runs" / run["key"] / "summary.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            records.append({"file": run["dataset"], "column": run["method"], "seed": run["seed"],
                            "partition": run["partition"], "seconds": s.get("wall_seconds"),
                            **{m: s[PROTOCOL][m] for m in METRICS},
                            "selected_round": s[PROTOCOL]["round"], "first_auroc": _first_round_auroc(summary.parent),
                            "untrained_share": (s.get("selection") or {}).get("untrained_share"),
                            "key": run["key"], "code": (s.get("code") or {}).get("git")})
    for f in sorted((root / PEER_DIR).glob("*/*.json")) if (root / PEER_DIR).exists() else []:
        r = json.loads(f.read_text())
        records.append({"file": r["dataset"], "column": r["peer"], "seed": r["seed"], "partition": r["partition"],
                        "seconds": r.get("seconds"), **{m: r[m] for m in METRICS}})
    return {"plan": plan, "records": records}


def _first_round_auroc(run: Path) -> float | None:
    """The AUROC after round 1 (metrics.csv's first row of phase "round"): what training is measured against."""
    import csv

    with open(run / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["phase"] == "round":
                return float(row["auroc"])
    return None


def selection_check(records, methods) -> list[list[str]]:
    """Per method: runs whose selected AUROC is below round 1's by more than TIE_PP, and the mean difference."""
    body = []
    for m in methods:
        d = np.array([100 * (r["auroc"] - r["first_auroc"]) for r in records
                      if r["column"] == m and r.get("first_auroc") is not None])
        if len(d):
            body.append([column_label(m), str(len(d)), f"{(d < -TIE_PP).sum()}", f"{d.mean():+.2f}"])
    return body


def untrained_check(records, methods) -> list[list[str]]:
    """Per method run with a per-client selection: runs, and the mean share of clients deploying round 0."""
    body = []
    for m in methods:
        shares = [r["untrained_share"] for r in records if r["column"] == m and r.get("untrained_share") is not None]
        if shares:
            body.append([column_label(m), str(len(shares)), f"{100 * np.mean(shares):.0f} %"])
    return body


def column_label(name: str) -> str:
    from fedgca.experiments.peers import PEERS

    if name in PEERS:
        return PEERS[name].label + (" (each site)" if PEERS[name].per_site else " (central)")
    return registry.get(name).label


def cell_means(records, partition: str, metric: str) -> dict[tuple[str, str], list[float]]:
    out: dict = {}
    for r in records:
        if r["partition"] == partition and r.get(metric) is not None and math.isfinite(r[metric]):
            out.setdefault((r["file"], r["column"]), []).append(100 * r[metric])
    return out


def ranks(values: np.ndarray) -> np.ndarray:
    """Rank of each entry of a row, 1 = highest, ties at their mean rank."""
    from scipy.stats import rankdata

    return rankdata(-np.asarray(values, dtype=float), method="average")


def table(data: dict, partition: str, metric: str) -> dict:
    """One metric's table: per file and column the seed mean and std; the summary rows over complete files."""
    plan, cells = data["plan"], cell_means(data["records"], partition, metric)
    columns = [*plan["methods"], *plan["peers"]]
    files = [f["name"] for f in plan["files"] if "error" not in f]
    rows = []
    for f in files:
        vals = {c: cells.get((f, c)) for c in columns}
        rows.append({"file": f, "cells": {c: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                                              len(v)) for c, v in vals.items() if v}})
    n_seeds = len(plan["seeds"])
    complete = [r for r in rows if all(c in r["cells"] and r["cells"][c][2] == n_seeds for c in columns)]
    summary = {"complete_files": [r["file"] for r in complete]}
    if complete:
        m = np.array([[r["cells"][c][0] for c in columns] for r in complete])
        rk = np.array([ranks(row) for row in m])
        summary["mean"] = dict(zip(columns, m.mean(axis=0)))
        summary["rank"] = dict(zip(columns, rk.mean(axis=0)))
        k, n = len(columns), len(complete)
        summary["cd"] = critical_difference(k, n)
        summary["friedman"] = friedman(m)
        summary["cliques"] = cliques(summary["rank"], summary["cd"])
        from fedgca.experiments.peers import PEERS

        peers = [c for c in plan["peers"] if c in columns and not PEERS[c].per_site]
        if peers:  # the bar a practitioner would pick: the centralized peer with the best mean here
            summary["best_peer"] = max(peers, key=lambda c: summary["mean"][c])
        wtl = {}
        for ref in _references(summary):
            if ref not in columns:
                continue
            j = columns.index(ref)
            for i, c in enumerate(columns):
                if c == ref or c not in plan["methods"]:
                    continue
                d = m[:, i] - m[:, j]
                wtl[(c, ref)] = (int((d > TIE_PP).sum()), int((abs(d) <= TIE_PP).sum()), int((d < -TIE_PP).sum()))
        summary["wtl"] = wtl
    return {"partition": partition, "metric": metric, "columns": columns, "rows": rows, "summary": summary}


def _references(summary: dict) -> tuple[str, ...]:
    """The columns W/T/L is counted against: Centralized, Single-Client and the best centralized peer."""
    return ("centralized", "single", *([summary["best_peer"]] if "best_peer" in summary else []))


def headline(t: dict) -> str | None:
    """One line: the best centralized peer of this table and each federated method's mean against it."""
    s = t["summary"]
    if "best_peer" not in s:
        return None
    from fedgca.experiments.peers import PEERS

    best = s["best_peer"]
    methods = [c for c in t["columns"] if c in s["mean"] and c not in PEERS]
    deltas = ", ".join(f"{column_label(c)} {s['mean'][c] - s['mean'][best]:+.2f}" for c in methods)
    return (f"Best centralized peer ({t['metric'].upper()}, {t['partition']}): **{column_label(best)}**, mean "
            f"{s['mean'][best]:.2f} over {len(s['complete_files'])} files; each method's mean − its: {deltas} pp.")


def rank_line(t: dict) -> str | None:
    """The rank tests in one paragraph: Friedman's χ² and p, the Nemenyi CD, the groups it cannot tell apart."""
    s = t["summary"]
    if "rank" not in s:
        return None
    chi2, p = s["friedman"]
    k, n = len(t["columns"]), len(s["complete_files"])
    groups = "; ".join("{" + ", ".join(column_label(c) for c in g) + "}" for g in s["cliques"]) or "none"
    test = (f"Friedman's χ² = {chi2:.2f} over {n} files and {k} columns, p = {p:.3g}" if math.isfinite(chi2)
            else "Friedman's test needs 3 columns and 2 files")
    return (f"Rank tests (α = {ALPHA}): {test}; Nemenyi critical difference of average ranks CD = {s['cd']:.2f} "
            f"(q = {nemenyi_q(k):.3f}); groups the test cannot tell apart (within CD): {groups}.")


def _fmt(cell) -> str:
    if cell is None:
        return "–"
    mean, std, n = cell
    return f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f}"  # one seed: no spread to show


def render_table(t: dict, n_seeds: int) -> str:
    cols = t["columns"]
    head = ["file", *[column_label(c) for c in cols]]
    body = []
    for r in t["rows"]:
        best = max((r["cells"][c][0] for c in cols if c in r["cells"]), default=None)
        body.append([r["file"], *[("**" + _fmt(r["cells"].get(c)) + "**") if c in r["cells"] and
                                  r["cells"][c][0] == best else _fmt(r["cells"].get(c)) for c in cols]])
    s = t["summary"]
    if "mean" in s:
        body.append([f"**mean** ({len(s['complete_files'])} files)", *[f"{s['mean'][c]:.2f}" for c in cols]])
        body.append(["**average rank**", *[f"{s['rank'][c]:.2f}" for c in cols]])
        for ref in _references(s):
            if any(k[1] == ref for k in s["wtl"]):
                body.append([f"W/T/L vs {column_label(ref)}",
                             *["/".join(map(str, s["wtl"][(c, ref)])) if (c, ref) in s["wtl"] else "" for c in cols]])
    partial = [r["file"] for r in t["rows"] if r["file"] not in s.get("complete_files", [])]
    text = markdown(head, body)
    if partial:
        text += (f"\nNot in the summary rows (a run or peer missing, or fewer than {n_seeds} seeds): "
                 f"{', '.join(partial)}.\n")
    return text


def table_csv(t: dict) -> str:
    head = ["file"]
    for c in t["columns"]:
        head += [f"{c}_mean", f"{c}_std", f"{c}_seeds"]
    body = []
    for r in t["rows"]:
        row = [r["file"]]
        for c in t["columns"]:
            cell = r["cells"].get(c)
            row += [round(cell[0], 4), round(cell[1], 4), cell[2]] if cell else ["", "", 0]
        body.append(row)
    return csv_text(head, body)


def files_table(plan: dict) -> str:
    head = ["file", "rows", "features", "anomalies", "C", "training rows / client", "B", "epochs / round", "note"]
    body = []
    for f in plan["files"]:
        if "error" in f:
            body.append([f["name"], "", "", "", "", "", "", "", "skipped: " + f["error"].replace("|", "/")])
            continue
        body.append([f["name"], f"{f['rows']:,}", str(f["features"]), f"{f['anomalies']:,} ({100 * f['anomaly_share']:.1f} %)",
                     str(f["clients"]), f"{f['rows_per_client']:.0f}", str(f["batch_size"]), str(f["local_epochs"]),
                     _file_note(f)])
    return markdown(head, body)


def _file_note(f: dict) -> str:
    """What fedgca did to a file's cells: columns dropped, empty cells imputed (a bench made before the count
    existed has none)."""
    notes = [f"{f['dropped_columns']} column(s) dropped"] if f["dropped_columns"] else []
    if f.get("imputed_cells"):
        notes.append(f"{f['imputed_cells']:,} empty cell(s) imputed in {len(f['imputed_columns'])} column(s)")
    return "; ".join(notes)


def rank_plot(path: Path, t: dict) -> Path | None:
    """Average ranks on one axis with the Nemenyi critical difference and its groups, as ADBench and Demšar draw it."""
    fig = rank_figure(t)
    if fig is None:
        return None
    fig.savefig(path, dpi=120)
    return path


def rank_figure(t: dict):
    """The CD diagram of a table (``rank_plot``) as a matplotlib ``Figure``, or None without ranks."""
    s = t["summary"]
    if "rank" not in s:
        return None
    from matplotlib.figure import Figure  # no pyplot: the process's backend stays the user's

    items = sorted(s["rank"].items(), key=lambda kv: kv[1])
    k = len(items)
    fig = Figure(figsize=(8, 1.2 + 0.32 * k + 0.12 * len(s.get("cliques", []))))
    ax = fig.subplots()
    ax.set_xlim(k + 0.5, 0.5)  # rank 1 on the right, as in CD diagrams
    ax.set_ylim(-1.5 - 0.12 * len(s.get("cliques", [])), k)
    ax.get_yaxis().set_visible(False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    for i, (c, r) in enumerate(items):
        ax.plot([r, r], [-0.2, k - i - 0.5], color="0.4", lw=0.8)
        ax.plot(r, -0.2, "o", color="C0" if c in registry.REGISTRY else "C1")
        ax.text(r, k - i - 0.4, f"{column_label(c)} ({r:.2f})", ha="center", va="bottom", fontsize=8)
    if math.isfinite(s.get("cd", float("nan"))):
        ax.plot([1, 1 + s["cd"]], [-1.1, -1.1], color="k", lw=2, gid="cd")
        ax.text(1 + s["cd"] / 2, -1.0, f"CD = {s['cd']:.2f}", ha="center", va="bottom", fontsize=8)
        for j, group in enumerate(s.get("cliques", [])):  # columns the test cannot tell apart, joined by a bar
            lo, hi = min(s["rank"][c] for c in group), max(s["rank"][c] for c in group)
            ax.plot([lo - 0.03, hi + 0.03], [-0.45 - 0.12 * j] * 2, color="C3", lw=3, solid_capstyle="round",
                    gid=f"clique-{j}")
    ax.set_xlabel(f"average rank over {len(s['complete_files'])} files ({t['metric'].upper()}, {t['partition']}; "
                  "1 = best)")
    fig.tight_layout()
    return fig


def write(root, out=None, plots: bool = True) -> dict:
    """report.md, {metric}_{partition}.csv, files.csv/md and ranks_{metric}_{partition}.png in ``out``."""
    from fedgca.experiments.peers import PEERS

    root = Path(root)
    out = Path(out) if out else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    data = load(root)
    plan = data["plan"]
    n_runs, done = len(plan["runs"]), sum(1 for r in data["records"] if r["column"] in plan["methods"])
    lines = ["# Federated anomaly-detection bench", "",
             f"Methods: {', '.join(column_label(m) for m in plan['methods'])}; peers: "
             f"{', '.join(column_label(p) for p in plan['peers']) or 'none'}; seeds {', '.join(map(str, plan['seeds']))}; "
             f"partitions {', '.join(plan['partitions'])}. Runs finished: {done} of {n_runs}.", "",
             f"Each cell: the metric ×100 at the **validation-selected round** (the round whose models have the lowest "
             f"mean reconstruction error on each client's held-out normals; no test labels), mean ± std over seeds; "
             f"bold = the best in its row. Centralized peers are fitted on the union of the clients' training rows, "
             f"per-site peers on each client's rows alone (the mean over clients, as Single-Client's); all are "
             f"scored on the same test rows by the same metric code. Summary rows: over the files where every column has every "
             f"seed; W/T/L: files where the method is more than {TIE_PP} pp above / within / below the reference (Centralized, "
             f"Single-Client, and the centralized peer with the best mean).", ""]
    if plan["options"] or plan.get("corr_threshold") is not None:
        lines += ["Options set for every run: " + ", ".join(
            [f"{k} = {v}" for k, v in sorted(plan["options"].items())]
            + ([f"schema corr_threshold = {plan['corr_threshold']}"] if plan.get("corr_threshold") is not None else [])),
            ""]
    for p in plan["peers"]:
        lines.append(f"- {column_label(p)}: {PEERS[p].what}")
    lines += ["", "## Files", "", files_table(plan)]
    written = {}
    for partition in plan["partitions"]:
        for metric in METRICS:
            t = table(data, partition, metric)
            lines += [f"## {metric.upper()}, {partition}", ""]
            head = headline(t)
            if head:
                lines += [head, ""]
            lines += [render_table(t, len(plan["seeds"]))]
            ranked = rank_line(t)
            if ranked:
                lines += ["", ranked]
            (out / f"{metric}_{partition}.csv").write_text(table_csv(t))
            if plots and rank_plot(out / f"ranks_{metric}_{partition}.png", t):
                lines += [f"![average ranks](ranks_{metric}_{partition}.png)", ""]
            written[(partition, metric)] = t
    check = selection_check(data["records"], plan["methods"])
    if check:
        lines += ["## Does training pay? Selected round vs round 1", "",
                  "Runs (files × seeds × partitions) whose AUROC at the selected round is more than "
                  f"{TIE_PP} pp below their AUROC after round 1, and the mean difference (selected − round 1):", "",
                  markdown(["method", "runs", f"selected < round 1 − {TIE_PP} pp", "mean Δ (pp)"], check)]
    deployed = untrained_check(data["records"], plan["methods"])
    if deployed:
        lines += ["", "## Which models the clients deployed (--selection client-*)", "",
                  "Share of the clients that deployed the untrained model (round 0) because the selection's signal "
                  "rated it above every round's:", "",
                  markdown(["method", "runs", "clients deploying the untrained model"], deployed)]
    failed = root / "peers" / "failed.json"
    if failed.exists():
        lines += ["## Peer fits that failed", ""] + [f"- {f['peer']} on {f['file']} ({f['partition']}, seed {f['seed']}): "
                                                    f"{f['error']}" for f in json.loads(failed.read_text())] + [""]
    (out / "report.md").write_text("\n".join(lines))
    fields = ["file", "column", "partition", "seed", "auroc", "auprc", "first_auroc", "selected_round", "seconds",
              "key", "code", *(["untrained_share"] if deployed else [])]  # one row per run or peer fit (bench_runs.csv: not a paper report's runs.csv)
    (out / "bench_runs.csv").write_text(csv_text(fields, [[r.get(f) for f in fields] for r in data["records"]]))
    (out / "files.csv").write_text(csv_text(
        ["file", "rows", "features", "input_dim", "anomalies", "anomaly_share", "n_train", "n_test", "clients",
         "rows_per_client", "batch_size", "rounds", "local_epochs", "dropped_columns", "imputed_cells", "error"],
        [[f.get(k) for k in ("name", "rows", "features", "input_dim", "anomalies", "anomaly_share", "n_train",
                             "n_test", "clients", "rows_per_client", "batch_size", "rounds", "local_epochs",
                             "dropped_columns", "imputed_cells", "error")] for f in plan["files"]]))
    return {"out": out, "tables": written}


__all__ = ["load", "table", "write"]
