"""``fedgca scorecard DIR``: every cell of the paper's tables beside fedgca's runs, and the paper's claims.

The IID table is here; the K sweeps per backend, the weighting ablation, the non-IID comparison and
communication are :mod:`fedgca.paper.scorecard_tables`, each cell judged by :func:`verdict`.

The paper's figures (``published/``, with their provenance) are the target of the
comparison only. fedgca's cells come from the finished runs under DIR — ``summary.json`` files,
and the ``runs.csv`` tables ``fedgca report``/``compare`` write (so that the committed result
tables regenerate the scorecard) — IID, R = 100, peak accuracy under the paper's protocol, mean
and sample std over seeds. GCA is GCA-GMM with inverse weights at the paper's K* (SPEC's
presets); fedgca's own K* (the K with the highest mean peak among those run) is noted beside it.
Verdicts: |Δ| within 1.0 pp (1.5 pp on magic, whose seeds spread more) → "within", else "outside"; no runs → "not run".
A cell's note says why it is not run, or what it still waits for (``verdicts.cell_note``): its dataset's files are
absent, or a sweep's report lists its runs as unfinished (``pending.csv``, :func:`pending_cells`).

Beside it, the honest protocol (issue #15, item 5): runs with a validation split, τ on validation rows and
the round chosen by validation error (``protocol_of``) give the same cells without test labels, and the
paper's GCA-vs-baseline claims are re-checked on them.
"""
from __future__ import annotations

import csv
import logging
import math
from collections import defaultdict
from pathlib import Path

from fedgca import methods
from fedgca.config import BACKENDS, DATASET_PRESETS, K_GRID
from fedgca.paper import scorecard_tables
from fedgca.paper.runs import (
    HONEST_FIGURES,
    collect_attacks,
    collect_runs,
    paper_tables,
    protocol_of,
    row_of_csv,
)
from fedgca.paper.verdicts import (
    ROUNDS,
    SEEDS,
    TOLERANCE_PP,
    TOLERANCE_PP_BY_DATASET,
    cell_note,
    verdict,
    with_note,
)
from fedgca.paper.verdicts import fmt_cell as _fmt
from fedgca.reporting import tables
from fedgca.reporting.groups import BACKEND_LABELS, k_star_of, load_runs
from fedgca.tabletext import dicts_csv, markdown

log = logging.getLogger(__name__)

BASELINES = ("single", "fedavg", "fedprox", "fednova", "dpfedavg", "centralized")


# ---------------------------------------------------------------------------- cells


def fedgca_cells(rows: list[dict], figure: str = "peak_accuracy", rounds: int = ROUNDS) -> dict[tuple[str, str], dict]:
    """{(dataset, method): {"mean", "std", "n", "k"}} in % under the paper's setting (IID, R = 100; or another
    ``rounds``).

    GCA's cell is at the paper's K* (SPEC's preset) and carries fedgca's own K* (the report's rule,
    ``groups.k_star_of``, on ``figure``) as ``own_k_star``.
    """
    groups: dict = defaultdict(list)
    for r in rows:
        if r["partition"] != "iid" or r["rounds"] != rounds or r["seed"] not in SEEDS or figure not in r:
            continue
        if r["method"] == "gca" and (r["backend"] != "gmm" or r["weights"] != "inverse"):
            continue
        groups[(r["dataset"], r["method"], r["k"] if r["method"] == "gca" else None)].append(r[figure])
    cells, gca_by_k = {}, defaultdict(dict)
    for (ds, m, k), vals in groups.items():
        mean, std, n = tables.mean_std(vals)
        cell = {"mean": 100 * mean, "std": 100 * std, "n": n, "k": k}
        if m == "gca":
            gca_by_k[ds][k] = (math.fsum(vals) / len(vals), cell)
        else:
            cells[(ds, m)] = cell
    for ds, by_k in gca_by_k.items():
        own = by_k[k_star_of({k: mean for k, (mean, _) in by_k.items()},
                             {k: cell["n"] for k, (_, cell) in by_k.items()})][1]
        paper_k = DATASET_PRESETS.get(ds, {}).get("k")
        cells[(ds, "gca")] = {**(by_k[paper_k][1] if paper_k in by_k else own), "own_k_star": own}
    return cells


def shorter_cells(rows: list[dict], have: dict) -> dict[tuple[str, str], dict]:
    """For a cell with no R = 100 run (Fashion-MNIST on a CPU, or its cells still waiting while its R = 100 sweep
    runs): the cell at the largest R it was run at, marked with that ``rounds``. Shown beside the paper, never
    given a tolerance verdict or counted in the paper's claims: a peak over R rounds is not a peak over 100."""
    lengths = {r["rounds"] for r in rows if r["partition"] == "iid" and r["seed"] in SEEDS and r["rounds"] < ROUNDS}
    out: dict = {}
    for rounds in sorted(lengths, reverse=True):
        for key, cell in fedgca_cells(rows, rounds=rounds).items():
            if key not in have and key not in out:
                out[key] = {**cell, "rounds": rounds}
    return out


def coverage(rows: list[dict], datasets: list[str], order: list[str]) -> list[dict]:
    """What has been run, per dataset, of issue #15's grids (paper protocol, R = 100, seeds 100/200/300): the IID
    table's seven cells, the GCA K sweep per backend, the weighting ablation (both weightings at the paper's K*)
    and the non-IID comparison with its K sweep. A cell counts as run when all three seeds are."""
    seeds: dict = defaultdict(set)
    for r in rows:
        if r["seed"] in SEEDS:
            k = r["k"] if r["method"] == "gca" else None
            seeds[(r["dataset"], r["partition"], r["method"], k, r["backend"], r["weights"], r["rounds"])].add(r["seed"])

    def done(d, partition, method, k=None, backend="gmm", weights="inverse", rounds=ROUNDS) -> bool:
        if method != "gca":
            k, backend, weights = None, "gmm", "inverse"  # keys of a baseline's row carry no GCA settings
        return len(seeds.get((d, partition, method, k, backend, weights, rounds), ())) == len(SEEDS)

    def count(flags: dict) -> str:
        missing = [str(name) for name, ok in flags.items() if not ok]
        return f"{len(flags) - len(missing)}/{len(flags)}" + (f" (missing {', '.join(missing)})"
                                                               if missing and len(missing) < len(flags) else "")

    out = []
    for d in datasets:
        k_star = DATASET_PRESETS.get(d, {}).get("k")
        table = {methods.get(m).label: done(d, "iid", m, k_star) for m in order}
        iid = count(table)
        if not all(table.values()):  # e.g. Fashion-MNIST on a CPU: the largest R its table is complete at
            shorter = {key[-1] for key in seeds if key[:2] == (d, "iid") and key[-1] < ROUNDS}
            complete = [R for R in shorter if all(done(d, "iid", m, k_star, rounds=R) for m in order)]
            iid += f"; {len(order)}/{len(order)} at R = {max(complete)}" if complete else ""
        gca_noniid = [k for k in K_GRID if done(d, "dirichlet", "gca", k)]
        noniid = {methods.get(m).label: done(d, "dirichlet", m) for m in order if m != "gca"}
        noniid["GCA"] = bool(gca_noniid)
        out.append({
            "dataset": d,
            "iid_table": iid,
            "k_sweep_gmm": count({f"K={k}": done(d, "iid", "gca", k) for k in K_GRID}),
            "k_sweep_other_backends": "; ".join(
                f"{BACKEND_LABELS[b]} {count({f'K={k}': done(d, 'iid', 'gca', k, b) for k in K_GRID})}"
                for b in BACKENDS if b != "gmm"),
            "weighting_ablation": count({f"{w} K={k_star}": done(d, "iid", "gca", k_star, weights=w)
                                         for w in ("inverse", "uniform")}),
            "noniid_methods": count(noniid) + (f" (GCA at K = {', '.join(map(str, gca_noniid))})"
                                               if gca_noniid else ""),
            "noniid_k_sweep": count({f"K={k}": k in gca_noniid for k in K_GRID}),
        })
    return out


# ---------------------------------------------------------------------------- the scorecard


def cell_key(r: dict) -> tuple:
    """A run's cell in the paper's tables: partition, dataset, method, and GCA's K, backend and weights."""
    gca = r["method"] == "gca"
    return (r["partition"], r["dataset"], r["method"], r["k"] if gca else None, r["backend"] if gca else "gmm",
            r["weights"] if gca else "inverse")


def pending_cells(root, finished: frozenset = frozenset()) -> dict[tuple, tuple[int, list[str]]]:
    """{cell: (runs, folders)}: the paper-protocol runs (R = 100, the paper's seeds) that reports under ``root``
    list as not finished (``fedgca report`` of a sweep in progress writes ``pending.csv``), less those in
    ``finished`` ({(cell_key, seed)}: runs another folder under ``root`` holds finished, e.g. a sweep's last
    runs finished by a second sweep file after the first's run directories were lost)."""
    from fedgca.reporting.report import PENDING

    root = Path(root)
    out: dict = {}
    for path in sorted(root.rglob(PENDING)):
        where = path.parent.relative_to(root).as_posix()
        for raw in csv.DictReader(path.open()):
            if protocol_of(raw) != "paper":
                continue
            try:
                r = row_of_csv({**raw, "peak_accuracy": "nan"})
            except (KeyError, TypeError, ValueError):
                continue  # another version's list: a cell without its note, nothing worse
            if r["rounds"] == ROUNDS and r["seed"] in SEEDS and (cell_key(r), r["seed"]) not in finished:
                n, folders = out.get(cell_key(r), (0, []))
                out[cell_key(r)] = (n + 1, folders + [where] * (where not in folders))
    return out


def _annotate(data: dict, root, no_data: frozenset, runs: list[dict]) -> None:
    """Each cell's note (``verdicts.note``): the reason a cell is not run, or the runs it still waits for
    (``runs``: the finished runs, which no folder's list of unfinished ones can make pending again)."""
    pending = pending_cells(root, frozenset((cell_key(r), r["seed"]) for r in runs if r["rounds"] == ROUNDS))
    for r in data["table"]:
        k = DATASET_PRESETS.get(r["dataset"], {}).get("k") if r["method"] == "gca" else None
        r["note"] = cell_note(r["seeds"], r["dataset"] in no_data,
                         pending.get(cell_key({**r, "partition": "iid", "k": k, "backend": "gmm", "weights": "inverse"})))
    more = data["more"]
    for r in more["k_sweep"]:
        r["note"] = cell_note(r["seeds"], r["dataset"] in no_data, pending.get(cell_key({**r, "method": "gca",
                                                                                     "weights": "inverse"})))
    for r in more["noniid"]:
        cell = {**r, "partition": "dirichlet", "k": scorecard_tables.NONIID_K, "backend": "gmm", "weights": "inverse"}
        r["note"] = cell_note(r["seeds"], r["dataset"] in no_data, pending.get(cell_key(cell)))
    for r in more["weighting"]:
        for w in ("inverse", "uniform"):
            r[f"{w}_note"] = cell_note(r[f"{w}_seeds"], r["dataset"] in no_data, None)


def build(root, comm_rows: list[dict] | None = None, variant: tuple[str, str] | None = None,
          no_data: frozenset = frozenset()) -> dict:
    """Every table's cells and the claims. ``variant`` = (name, dataset): score data variant ``name``'s runs as
    ``dataset``'s cells, and show that dataset only. ``no_data``: the datasets whose files are absent (a cell of
    theirs that is not run says so)."""
    paper, paper_comm = paper_tables()
    runs = collect_runs(root, variant=variant)
    cells = fedgca_cells(runs)
    short = shorter_cells(runs, cells)
    attacks = collect_attacks(root)
    order = [m for m in methods.names() if any(k[1] == m for k in paper)]
    datasets = [d for d in DATASET_PRESETS if any(k[0] == d for k in paper) and (variant is None or d == variant[1])]
    table = []
    for d in datasets:
        for m in order:
            p = paper.get((d, m))
            c = cells.get((d, m)) or short.get((d, m))
            delta = None if c is None or p is None else c["mean"] - p[0]
            rounds = c.get("rounds", ROUNDS) if c else ROUNDS
            table.append({"dataset": d, "method": m, "paper_mean": p[0] if p else None,
                          "paper_std": p[1] if p else None, "fedgca_mean": c["mean"] if c else None,
                          "fedgca_std": c["std"] if c else None, "seeds": c["n"] if c else 0,
                          "k": c["k"] if c else None, "delta": delta, "verdict": verdict(d, delta, rounds),
                          "rounds": rounds, "own_k_star": c.get("own_k_star") if c else None})
    more = scorecard_tables.build(runs, Path(root), comm_rows, lambda d, delta: verdict(d, delta), ROUNDS, SEEDS)
    if variant is not None:  # the variant's dataset only (the other datasets' rows would all read "not run")
        more = {k: [r for r in v if r.get("dataset") in (None, variant[1])] if k != "more_claims" and isinstance(v, list)
                else v for k, v in more.items()}
    data = {"table": table, "claims": claims(paper, cells, attacks, paper_comm, comm_rows) + more["more_claims"],
            "datasets": datasets, "coverage": coverage(runs, datasets, order),
            **honest(root, paper, cells, order, datasets, variant), "more": more, "variant": variant}
    _annotate(data, root, no_data, runs)
    return data


def honest(root, paper: dict, cells: dict, order: list[str], datasets: list[str],
           variant: tuple[str, str] | None = None) -> dict:
    """The same cells under the honest protocol (``protocol_of``), beside the paper's and fedgca's paper-protocol
    figures, and the paper's GCA-vs-baseline claims re-checked on the honest accuracy and AUROC."""
    rows = collect_runs(root, "honest", quiet=True, variant=variant)  # build() has said what it skipped
    figs = {f: fedgca_cells(rows, f) for f in HONEST_FIGURES}
    table = []
    for d in datasets:
        for m in order:
            if (d, m) not in figs["selected_accuracy"]:
                continue
            p, c = paper.get((d, m)), cells.get((d, m))
            table.append({"dataset": d, "method": m, "k": figs["selected_accuracy"][(d, m)]["k"],
                          "paper_mean": p[0] if p else None, "paper_std": p[1] if p else None,
                          "fedgca_mean": c["mean"] if c else None, "fedgca_std": c["std"] if c else None,
                          **{f"{f}_{x}": figs[f][(d, m)][x] if (d, m) in figs[f] else None
                             for f in HONEST_FIGURES for x in ("mean", "std", "n")}})
    ran = sorted({d for (d, m) in figs["selected_accuracy"] if m == "gca"}, key=tables.dataset_rank)
    checks = []
    for b in BASELINES:
        both = [d for d in ran if (d, b) in figs["selected_accuracy"]]
        if not both:
            continue
        p_means = {k: v[0] for k, v in paper.items()}
        row = {"claim": f"GCA vs {methods.get(b).label}", "datasets": ", ".join(both),
               "paper": f"{len(wins(p_means, both, 'gca', b))}/{len(both)}"}
        for f in ("selected_accuracy", "selected_auroc"):
            means = {k: v["mean"] for k, v in figs[f].items()}
            row[f] = f"{len(wins(means, both, 'gca', b))}/{len(both)}"
        row["survives"] = "yes" if row["paper"] == row["selected_accuracy"] else "no"
        checks.append(row)
    vf = sorted({r["val_fraction"] for r in rows})
    return {"honest": table, "honest_claims": checks, "honest_val_fraction": vf}


def wins(source: dict, datasets, a: str, b: str) -> list[str]:
    """The datasets on which method ``a``'s mean is above ``b``'s in ``source`` ({(dataset, method): mean})."""
    return [d for d in datasets if (d, a) in source and (d, b) in source and source[(d, a)] > source[(d, b)]]


def claims(paper: dict, cells: dict, attacks: dict, paper_comm: list[dict], comm_rows) -> list[dict]:
    """The paper's comparative claims, each checked on the datasets fedgca has run."""
    out = []
    ran = sorted({d for (d, m) in cells if m == "gca"}, key=tables.dataset_rank)
    p_means = {k: v[0] for k, v in paper.items()}
    f_means = {k: v["mean"] for k, v in cells.items()}
    all_ds = sorted({d for d, _ in paper}, key=tables.dataset_rank)
    for b in BASELINES:
        both = [d for d in ran if (d, b) in cells]
        paper_all = wins(p_means, all_ds, "gca", b)
        if not both:
            out.append({"claim": f"GCA vs {methods.get(b).label}: the paper has GCA ahead on {len(paper_all)} of "
                                 f"{len(all_ds)} datasets", "paper": f"{len(paper_all)}/{len(all_ds)}",
                        "fedgca": "—", "status": "not run"})
            continue
        pw, fw = wins(p_means, both, "gca", b), wins(f_means, both, "gca", b)
        status = "reproduced" if pw == fw else "not reproduced"
        out.append({"claim": f"GCA vs {methods.get(b).label}: the paper has GCA ahead on {len(paper_all)} of "
                             f"{len(all_ds)} datasets", "paper": f"{len(pw)}/{len(both)} on the datasets run here "
                                                               f"({', '.join(pw) or 'none'})",
                    "fedgca": f"{len(fw)}/{len(both)} ({', '.join(fw) or 'none'})", "status": status})
    # the attack direction: higher NTMSE and lower Δcos = less leakage (SPEC §6)
    attacked = sorted({d for (d, m) in attacks if m == "gca" and (d, "fedavg") in attacks}, key=tables.dataset_rank)
    if attacked:
        def mean(d, m, k):
            v = attacks[(d, m)][k]
            return sum(v) / len(v) if v else float("nan")

        less = [d for d in attacked if mean(d, "gca", "ntmse") > mean(d, "fedavg", "ntmse")
                and mean(d, "gca", "delta_cos") < mean(d, "fedavg", "delta_cos")]
        out.append({"claim": "GCA leaks less than FedAvg to a server-side attack (higher NTMSE, lower Δcos)",
                    "paper": "on every dataset attacked", "fedgca": f"{len(less)}/{len(attacked)} ({', '.join(less)})",
                    "status": "reproduced" if len(less) == len(attacked) else "not reproduced"})
    else:
        out.append({"claim": "GCA leaks less than FedAvg to a server-side attack (higher NTMSE, lower Δcos)",
                    "paper": "on every dataset attacked", "fedgca": "—", "status": "not run"})
    # communication: the paper's MiB per round against the payloads fedgca builds
    if comm_rows:
        ours = {(r["dataset"], r["k"]): r for r in comm_rows}
        agree, differ = [], []
        for p in paper_comm:
            d = p["dataset"]
            pairs = [(float(p["gca_up_mib"]), ours.get((d, 10), {}).get("gca_up_mib")),
                     (float(p["fl_total_mib"]), ours.get((d, 10), {}).get("fl_total_mib"))]
            pairs += [(float(p[f"gca_k{k}_mib"]), ours.get((d, k), {}).get("gca_total_mib")) for k in K_GRID]
            if any(v is None for _, v in pairs):
                continue
            (agree if all(abs(a - b) <= 0.0011 for a, b in pairs) else differ).append(d)
        out.append({"claim": "per-round communication (GCA up, FL total, GCA total at K = 10/20/40/80, MiB)",
                    "paper": "communication table", "fedgca": f"equal to 3 decimals on {len(agree)} datasets "
                                                              f"({', '.join(agree)}); differs on "
                                                              f"{', '.join(differ) or 'none'}",
                    "status": "reproduced" if not differ else "reproduced except " + ", ".join(differ)})
    return out


def render(data: dict, source: str) -> str:
    rows = data["table"]
    head = ["dataset", "method", "paper", "fedgca", "Δ (pp)", "verdict"]
    body = [[r["dataset"], methods.get(r["method"]).label + (f" (K*={r['k']})" if r["method"] == "gca" and r["k"]
                                                             else ""),
             _fmt(r["paper_mean"], r["paper_std"]), _fmt(r["fedgca_mean"], r["fedgca_std"], r["seeds"]),
             "—" if r["delta"] is None else f"{r['delta']:+.2f}", with_note(r["verdict"], r.get("note"))] for r in rows]
    counts = defaultdict(int)
    for r in rows:
        counts[r["verdict"]] += 1
    own = [f"{r['dataset']} K={r['own_k_star']['k']} "
           f"({_fmt(r['own_k_star']['mean'], r['own_k_star']['std'], r['own_k_star']['n'])})"
           for r in rows if r.get("own_k_star") and r["own_k_star"]["k"] != r["k"]]
    claims_body = [[c["claim"], c["paper"], c["fedgca"], c["status"]] for c in data["claims"]]
    return "\n".join([
        "# Reproduction scorecard", "",
        f"fedgca's runs under `{source}` against the paper's IID table (peak test accuracy, %, the paper's "
        f"protocol; IID, R = {ROUNDS}, seeds {'/'.join(map(str, SEEDS))}; mean ± sample std over seeds, n= when "
        "fewer). GCA is GCA-GMM with inverse weights at the paper's K* (SPEC's presets). "
        f"Tolerance ±{TOLERANCE_PP:g} pp (magic ±{TOLERANCE_PP_BY_DATASET['magic']:g} pp). "
        + ("Regenerate: `fedgca scorecard DIR --data-dir ../shared/data`." if not data.get("variant") else
           f"**Data variant**: the runs of own data `{data['variant'][0]}` are scored as {data['variant'][1]}'s cells "
           f"(its file under another split); its communication row is measured from its runs' shard sizes. "
           f"Regenerate: `fedgca scorecard DIR --as {'='.join(data['variant'])}`."), "",
        f"Cells: {counts['within']} within tolerance, {counts['outside']} outside, "
        + "".join(f"{n} at {v[:-5]} (no R = {ROUNDS} run: shown, not judged), " for v, n in sorted(counts.items())
                  if v.startswith("R = "))
        + f"{counts['not run']} not run.", "",
        markdown(head, body),
        ("GCA's cells use the paper's K* (SPEC's presets). Where fedgca's own K* rule (best mean peak among the K "
         "run) picks another K: " + "; ".join(own) + ".\n") if own else "", "## The paper's claims", "",
        "Each claim of the paper's text, checked on the datasets fedgca has run (the tables below give the cells).",
        "",
        markdown(["claim", "paper", "fedgca", "status"], claims_body), "",
        *(scorecard_tables.render(data["more"], data["datasets"]) if data.get("more") else []),
        *_render_honest(data),
        *_render_coverage(data),
    ])


def _render_coverage(data: dict) -> list[str]:
    head = ["dataset", "IID table", "K sweep (GMM)", "K sweep (other backends)", "weighting ablation",
            "non-IID methods", "non-IID K sweep (GMM)"]
    keys = ["iid_table", "k_sweep_gmm", "k_sweep_other_backends", "weighting_ablation", "noniid_methods",
            "noniid_k_sweep"]
    return [
        "## What has been run", "",
        f"Of issue #15's grids, per dataset: the cells whose three seeds ({'/'.join(map(str, SEEDS))}) have finished "
        f"at R = {ROUNDS} under the paper's protocol, out of the grid's cells (K ∈ {{{', '.join(map(str, K_GRID))}}}; "
        "the weighting ablation is GCA-GMM with inverse and with uniform weights at the paper's K*; non-IID is "
        "Dirichlet α = 0.1, GCA counted at any K of the grid). A cell run at fewer seeds or rounds counts as missing.", "",
        markdown(head, [[r["dataset"], *(r[k] for k in keys)] for r in data["coverage"]]), "",
    ]


def _render_honest(data: dict) -> list[str]:
    if not data.get("honest"):
        return ["## An honest protocol", "", "No honest-protocol runs (`examples/sweep_honest.toml`) under this "
                "directory yet.", ""]
    vf = "/".join(f"{v:g}" for v in data["honest_val_fraction"])
    head = ["dataset", "method", "paper (peak)", "fedgca (peak)", "honest accuracy", "honest AUROC",
            "honest final accuracy"]
    body = [[r["dataset"], methods.get(r["method"]).label + (f" (K*={r['k']})" if r["method"] == "gca" and r["k"]
                                                             else ""),
             _fmt(r["paper_mean"], r["paper_std"]), _fmt(r["fedgca_mean"], r["fedgca_std"]),
             *(_fmt(r[f"{f}_mean"], r[f"{f}_std"], r[f"{f}_n"]) for f in HONEST_FIGURES)] for r in data["honest"]]
    claims_body = [[c["claim"], c["datasets"], c["paper"], c["selected_accuracy"], c["selected_auroc"], c["survives"]]
                   for c in data["honest_claims"]]
    return [
        "## An honest protocol", "",
        f"The same cells when nothing is chosen with test labels: each client holds out {vf} of its normal rows "
        "(never trained on), τ is the 0.75-quantile of its validation scores, and the reported round is the one "
        "with the lowest mean validation reconstruction error (`examples/sweep_honest.toml`; IID, R = 100, seeds "
        "100/200/300). \"paper (peak)\" and \"fedgca (peak)\" are the paper-protocol cells above; the honest "
        "runs train without their validation rows.", "",
        markdown(head, body), "",
        "The paper's GCA-vs-baseline claims on the datasets with honest runs: on how many GCA is ahead "
        "(paper: its own figures; honest: selected-round accuracy and AUROC). A claim survives when the honest "
        "accuracy gives the paper's count.", "",
        markdown(["claim", "datasets", "paper", "honest accuracy", "honest AUROC", "survives"], claims_body), "",
    ]


def variant_comm(root, name: str, dataset: str) -> list[dict] | None:
    """The communication rows of data variant ``name`` (C, ρ, shard sizes and input width as one of its IID runs
    recorded them), labelled ``dataset``; in a report directory, which holds no summaries, the rows its
    ``comm.csv`` measured from them (``fedgca report``); None without either."""
    from fedgca.experiments import comm

    runs, _ = load_runs(root)
    for run in runs:
        s = run.record
        if s.get("dataset") == name and s.get("partition", "iid") == "iid" and s.get("client_sizes"):
            return [{**r, "dataset": dataset} for r in comm.measure(comm.run_inputs(s))]
    table = Path(root) / "comm.csv"
    if table.is_file():
        import pandas as pd

        rows = pd.read_csv(table, thousands=",").query("dataset == @name").to_dict("records")
        ints = ("k", "C", "U", "D_z", "P")
        return [{**r, **{c: int(r[c]) for c in ints}, "dataset": dataset} for r in rows] or None
    return None


def write_scorecard(root, out=None, data_dir=None, variant: tuple[str, str] | None = None) -> Path:
    """SCORECARD.md/.csv and _tables.csv. ``variant`` = (name, dataset): data variant ``name``'s runs as
    ``dataset``'s cells (``fedgca scorecard DIR --as NAME=DATASET``); its communication row from its runs' sizes."""
    comm_rows, no_data = None, frozenset()
    try:
        from fedgca.experiments import comm

        if variant:
            comm_rows = variant_comm(root, *variant)
        else:  # the datasets whose files are absent get their documented sizes there ("documented")
            comm_rows, sources = comm.comm_table(None, data_dir=data_dir)
            no_data = frozenset(d for d, source in sources.items() if source == "documented")
    except (OSError, ValueError, RuntimeError):
        comm_rows = None  # no data files: the communication claim is "not run"
    data = build(root, comm_rows, variant, no_data)
    root = Path(root)
    out = Path(out) if out else root / "SCORECARD.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    label = root.name if root.is_absolute() else root.as_posix()
    out.write_text(render(data, label))
    flat = [{**{k: v for k, v in r.items() if k != "own_k_star"},
             "own_k_star": r["own_k_star"]["k"] if r.get("own_k_star") else None,
             "own_k_star_mean": r["own_k_star"]["mean"] if r.get("own_k_star") else None} for r in data["table"]]
    out.with_suffix(".csv").write_text(dicts_csv(flat, list(flat[0])))
    more = scorecard_tables.flat_rows(data["more"])
    out.with_name(out.stem + "_tables.csv").write_text(dicts_csv(more, list(more[0])))
    return out
