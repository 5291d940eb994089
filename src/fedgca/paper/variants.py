"""``fedgca scorecard DIR --variants``: the parameter-sharing baselines under each protocol variant beside the paper.

Issue #15's question: under which unstated protocol choice do fedgca's FedAvg/FedProx/FedNova/DP-FedAvg
land on the paper's figures? For every run of a parameter-sharing baseline under DIR (IID, or the paper's
non-IID Dirichlet partition, α = 0.1: issue #33, against the paper's non-IID table), the paper statistic —
per seed the highest test accuracy over the evaluation points, mean and std over seeds — is computed per
variant:

* evaluation: ``global`` — the aggregated global model, once per round (the paper's text) — or ``local``
  — each client's own model after local training, before aggregation (averaged over clients like GCA).
  A ``--baseline-eval local`` run records both (its "round" rows are exactly a global run's rows: the
  evaluation draws no randomness, tested), so it serves both variants;
* optimiser state: ``keep`` (Adam state carried across rounds) or ``reset`` (a fresh Adam each round);
* threshold: where τ's quantile is taken (training rows, or validation rows).

Runs made with ``--eval-local-epochs`` also evaluated the clients' models after every local epoch e = 1…10:
:func:`local_epoch_rows` gives each cell's peak per e, and :func:`epoch_fit_lines` whether one e fits the
paper's cells (issue #33's lead: the paper's figure between the global and the after-training evaluation).

Verdict per cell: "consistent" when |Δ| ≤ paper std + fedgca std (the two ±1 std intervals overlap),
else "not". The paper's figures are packaged reference data, compared against only.
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedgca import methods
from fedgca.config import RunConfig
from fedgca.paper import scorecard
from fedgca.paper.scorecard import ROUNDS, paper_tables
from fedgca.reporting import tables
from fedgca.tabletext import dicts_csv, markdown

FIELDS = ["dataset", "partition", "method", "evaluation", "optimizer_state", "threshold", "rounds", "seeds", "mean", "std",
          "paper_mean", "paper_std", "delta", "verdict"]


PARTITIONS = ("iid", "dirichlet")  # the paper's two settings (non-IID: Dirichlet α = 0.1)
LOCAL_EPOCH = "local-epoch"


def _peaks(run_dir: Path, cfg: RunConfig) -> dict[str, float]:
    """Per evaluation variant, this run's peak test accuracy (fraction); with --eval-local-epochs also the
    peak over rounds after each local epoch e, as ``local-epoch:e``."""
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    out = {}
    for variant, phase in (("global", "round"), ("local", "local")):
        acc = [float(r["accuracy"]) for r in rows if r["phase"] == phase]
        if acc:
            out[variant] = max(acc)
    for r in rows:
        if r["phase"] == LOCAL_EPOCH:
            key = f"{LOCAL_EPOCH}:{int(r['epoch'])}"
            out[key] = max(out.get(key, -math.inf), float(r["accuracy"]))
    return out


def _setting(cfg: RunConfig) -> str | None:
    """The paper setting a run belongs to ("iid", "dirichlet" at the paper's α), else None."""
    if cfg.partition == "iid":
        return "iid"
    if cfg.partition == "dirichlet" and cfg.alpha == RunConfig.__dataclass_fields__["alpha"].default:
        return "dirichlet"
    return None


def collect(root, rounds: int = ROUNDS) -> dict[tuple, list[float]]:
    """{(dataset, partition, method, evaluation, optimizer_state, threshold, rounds): [peak per seed]} over the
    runs of ``rounds`` rounds in the paper's two settings (a directory of several sweeps may hold others)."""
    cells: dict[tuple, dict[int, float]] = defaultdict(dict)
    for summary in sorted(Path(root).rglob("summary.json")):
        run_dir = summary.parent
        try:
            cfg = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text())).resolved()
        except (OSError, ValueError, TypeError):
            continue
        if cfg.spec.family != "parameter-sharing" or cfg.spec.record_dp:
            continue
        setting = _setting(cfg)
        if setting is None or cfg.rounds != rounds or not (run_dir / "metrics.csv").exists():
            continue  # one setting per table (e.g. not the DP sweep's R = 10 FedAvg runs beside R = 100)
        for variant, peak in _peaks(run_dir, cfg).items():
            key = (cfg.dataset, setting, cfg.method, variant, cfg.optimizer_state, cfg.threshold, cfg.rounds)
            cells[key][cfg.seed] = peak
    return {k: [v[s] for s in sorted(v)] for k, v in cells.items()}


def paper_cells(partition: str) -> dict[tuple[str, str], tuple[float, float]]:
    """{(dataset, method): (mean, std)} of the paper's table for this setting (packaged reference data)."""
    if partition == "iid":
        return paper_tables()[0]
    from fedgca.paper.scorecard_tables import reference

    return {(r["dataset"], r["method"]): (float(r["mean"]), float(r["std"])) for r in reference("noniid_accuracy")}


def _cell(peaks: list[float], paper: tuple[float, float]) -> dict:
    mean, std, n = tables.mean_std([100 * p for p in peaks])
    std = std if n > 1 else float("nan")  # one seed: no spread to compare against
    p_mean, p_std = paper
    delta = mean - p_mean
    ok = abs(delta) <= p_std + (std if math.isfinite(std) else 0.0)
    return {"seeds": n, "mean": mean, "std": std, "paper_mean": p_mean, "paper_std": p_std, "delta": delta,
            "verdict": "no paper cell" if math.isnan(p_mean) else ("consistent" if ok else "not")}


def _order(r: dict) -> tuple:
    order = {m: i for i, m in enumerate(methods.names())}
    return (PARTITIONS.index(r["partition"]), tables.dataset_rank(r["dataset"]), order[r["method"]], r["rounds"],
            r["threshold"], r["evaluation"], r["optimizer_state"])


def variant_rows(root, rounds: int = ROUNDS, cells: dict | None = None) -> list[dict]:
    rows = []
    for (ds, part, m, ev, opt, thr, rounds), peaks in (cells or collect(root, rounds)).items():
        if ev.startswith(LOCAL_EPOCH):
            continue
        rows.append({"dataset": ds, "partition": part, "method": m, "evaluation": ev, "optimizer_state": opt,
                     "threshold": thr, "rounds": rounds,
                     **_cell(peaks, paper_cells(part).get((ds, m), (math.nan, math.nan)))})
    rows.sort(key=_order)
    return rows


EPOCHS_FIELDS = ["dataset", "partition", "method", "optimizer_state", "rounds", "seeds", "paper_mean", "paper_std",
                 "global", "local", *(f"e{e}" for e in range(1, 11)), "best_e", "best_delta"]


def local_epoch_rows(root, rounds: int = ROUNDS, cells: dict | None = None) -> list[dict]:
    """Per cell of runs made with --eval-local-epochs: the paper's figure, the global and after-training
    peaks, the peak (mean over seeds, %) after each local epoch e, and the e closest to the paper."""
    cells = cells or collect(root, rounds)
    out = []
    for (ds, part, m, ev, opt, thr, r), peaks in cells.items():
        if ev != f"{LOCAL_EPOCH}:1" or thr != "train-quantile":
            continue
        base = (ds, part, m)
        row = {"dataset": ds, "partition": part, "method": m, "optimizer_state": opt, "rounds": r,
               "seeds": len(peaks), "threshold": thr, "evaluation": LOCAL_EPOCH}
        row["paper_mean"], row["paper_std"] = paper_cells(part).get((ds, m), (math.nan, math.nan))
        for name in ("global", "local", *(f"{LOCAL_EPOCH}:{e}" for e in range(1, 11))):
            got = cells.get((*base, name, opt, thr, r))
            col = name if not name.startswith(LOCAL_EPOCH) else f"e{name.split(':')[1]}"
            row[col] = tables.mean_std([100 * p for p in got])[0] if got and len(got) == len(peaks) else math.nan
            row[f"{col}_std"] = tables.mean_std([100 * p for p in got])[1] if got and len(got) > 1 else math.nan
        deltas = {e: row[f"e{e}"] - row["paper_mean"] for e in range(1, 11) if math.isfinite(row[f"e{e}"])}
        if deltas and math.isfinite(row["paper_mean"]):
            row["best_e"] = min(deltas, key=lambda e: (abs(deltas[e]), e))
            row["best_delta"] = deltas[row["best_e"]]
        else:
            row["best_e"], row["best_delta"] = None, math.nan
        out.append(row)
    out.sort(key=_order)
    return out


def epoch_fit_lines(rows: list[dict]) -> list[str]:
    """For each e: on how many cells (3 seeds, with a paper figure) the after-e peak is consistent with the paper
    (|Δ| ≤ paper std + fedgca std), and its mean |Δ|; then whether one e fits every cell."""
    rows = [r for r in rows if r["seeds"] >= 3 and math.isfinite(r["paper_mean"])]
    if not rows:
        return []
    out, fits_all = [], []
    for e in range(1, 11):
        ok = [r for r in rows if abs(r[f"e{e}"] - r["paper_mean"]) <= r["paper_std"] + r[f"e{e}_std"]]
        mad = float(np.mean([abs(r[f"e{e}"] - r["paper_mean"]) for r in rows]))
        out.append(f"e = {e}: consistent on {len(ok)}/{len(rows)} cells, mean |Δ| {mad:.2f} pp")
        if len(ok) == len(rows):
            fits_all.append(e)
    best = [r["best_e"] for r in rows]
    out.append(("one e fits every cell: " + ", ".join(map(str, fits_all))) if fits_all else
               "no single e is consistent with the paper on every cell; the closest e per cell: "
               + ", ".join(f"{r['dataset']} {methods.get(r['method']).label} e={r['best_e']} ({r['best_delta']:+.2f})"
                           for r in rows) + f" (distinct: {len(set(best))})")
    return out


def summary_lines(rows: list[dict]) -> list[str]:
    """Per variant (evaluation × optimiser state × threshold, 3 seeds): on how many paper cells it is
    consistent, and whether on all of those run."""
    by = defaultdict(list)
    for r in rows:
        if r["seeds"] >= 3 and r["verdict"] != "no paper cell":
            by[(PARTITIONS.index(r["partition"]), r["evaluation"], r["optimizer_state"], r["threshold"])].append(r)
    out = []
    for (part, ev, opt, thr), rs in sorted(by.items()):
        good = [r for r in rs if r["verdict"] == "consistent"]
        bias = float(np.mean([r["delta"] for r in rs]))
        out.append(f"{PARTITIONS[part]}, evaluation={ev}, optimizer-state={opt}, threshold={thr}: consistent with the paper on "
                   f"{len(good)}/{len(rs)} cells run (mean Δ {bias:+.2f} pp); not on: "
                   + (", ".join(f"{r['dataset']} {methods.get(r['method']).label} ({r['delta']:+.2f})"
                                for r in rs if r["verdict"] != "consistent") or "none"))
    return out


def claim_rows(root, rows: list[dict], rounds: int = ROUNDS) -> list[dict]:
    """The paper's "GCA ahead of baseline B" claims re-checked with B under each variant: GCA's cell is its
    paper-protocol peak at the paper's K* (GCA is always scored on the clients' own models), B's the variant's
    peak; on the datasets where both were run with 3 seeds. The paper's side is its own figures on those datasets."""
    runs = scorecard.collect_runs(root, quiet=True)
    gca = {"iid": {d: c["mean"] for (d, m), c in scorecard.fedgca_cells(runs, rounds=rounds).items()
                   if m == "gca" and c["n"] >= len(scorecard.SEEDS)},
           "dirichlet": _noniid_gca(runs, rounds)}
    by = defaultdict(dict)
    for r in rows:
        part = r["partition"]
        if r["seeds"] >= len(scorecard.SEEDS) and r["dataset"] in gca[part] and \
                (r["dataset"], r["method"]) in paper_cells(part):
            by[(part, r["evaluation"], r["optimizer_state"], r["threshold"], r["method"])][r["dataset"]] = r["mean"]
    out = []
    order = {m: i for i, m in enumerate(methods.names())}
    for (part, ev, opt, thr, m), means in sorted(by.items(), key=lambda kv: (PARTITIONS.index(kv[0][0]), kv[0][1:4],
                                                                             order[kv[0][4]])):
        ds = sorted(means, key=tables.dataset_rank)
        source = {**{(d, "gca"): gca[part][d] for d in ds}, **{(d, m): means[d] for d in ds}}
        pw = scorecard.wins({k: v[0] for k, v in paper_cells(part).items()}, ds, "gca", m)
        fw = scorecard.wins(source, ds, "gca", m)
        out.append({"partition": part, "evaluation": ev, "optimizer_state": opt, "threshold": thr, "method": m,
                    "datasets": ", ".join(ds), "paper": f"{len(pw)}/{len(ds)} ({', '.join(pw) or 'none'})",
                    "fedgca": f"{len(fw)}/{len(ds)} ({', '.join(fw) or 'none'})",
                    "status": "reproduced" if pw == fw else "not reproduced"})
    return out


def _noniid_gca(runs: list[dict], rounds: int) -> dict[str, float]:
    """GCA's non-IID cells (the paper's K = 10, GMM, inverse weights; 3 seeds): {dataset: mean peak %}."""
    from fedgca.paper.scorecard_tables import NONIID_K

    by = defaultdict(list)
    for r in runs:
        if r["partition"] == "dirichlet" and r["method"] == "gca" and r["k"] == NONIID_K and r["backend"] == "gmm" \
                and r["weights"] == "inverse" and r["rounds"] == rounds and r["seed"] in scorecard.SEEDS:
            by[r["dataset"]].append(100 * r["peak_accuracy"])
    return {d: float(np.mean(v)) for d, v in by.items() if len(v) >= len(scorecard.SEEDS)}


def write_variants(root, out=None, rounds: int = ROUNDS) -> Path:
    cells = collect(root, rounds)
    rows = variant_rows(root, rounds, cells)
    if not rows:
        raise ValueError(f"{root}: no finished IID or non-IID parameter-sharing runs of R = {rounds} found")
    out = Path(out) if out else Path(root) / "VARIANTS.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    fmt = {"mean": 2, "std": 2, "paper_mean": 2, "paper_std": 2, "delta": 2}
    csv_rows = [{k: (f"{r[k]:.{fmt[k]}f}" if k in fmt and math.isfinite(r[k]) else r[k]) for k in FIELDS}
                for r in rows]
    out.with_suffix(".csv").write_text(dicts_csv(csv_rows, FIELDS))
    body = [[r["dataset"], r["partition"], methods.get(r["method"]).label, r["evaluation"], r["optimizer_state"], r["threshold"],
             str(r["rounds"]), str(r["seeds"]), f"{r['mean']:.2f} ± {r['std']:.2f}",
             f"{r['paper_mean']:.2f} ± {r['paper_std']:.2f}", f"{r['delta']:+.2f}", r["verdict"]] for r in rows]
    text = ["# Parameter-sharing baselines: protocol variants against the paper", "",
            "Peak accuracy (%) under the paper's statistic, mean ± sample std over seeds; Δ = fedgca − paper; "
            "consistent: |Δ| ≤ paper std + fedgca std. Written by `fedgca scorecard DIR --variants"
            + (f" --rounds {rounds}`. The paper's figures are R = {ROUNDS}'s: a verdict here says only whether "
               f"R = {rounds} lands near them." if rounds != ROUNDS else "`."), "",
            markdown(["dataset", "partition", "method", "evaluation", "optimiser state", "threshold", "R", "seeds",
                      "fedgca", "paper", "Δ (pp)", "verdict"], body), "", "## Per variant", ""]
    text += [f"- {line}" for line in summary_lines(rows)] + [""]
    epochs = local_epoch_rows(root, rounds, cells)
    if epochs:
        fmt_e = lambda v: f"{v:.2f}" if isinstance(v, float) and math.isfinite(v) else "—"  # noqa: E731
        text += ["## The clients' models after every local epoch (--eval-local-epochs)", "",
                 "Peak accuracy (%, mean over seeds) of the clients' own models after local epoch e, the best over "
                 "the rounds, beside the global model's (after aggregation) and the paper's; e = 10 is the "
                 "'local' evaluation. Best e: the e whose peak is closest to the paper's figure.", "",
                 markdown(["dataset", "partition", "method", "seeds", "paper", "global", *(f"e={e}" for e in range(1, 11)),
                           "best e", "Δ at best e"],
                          [[r["dataset"], r["partition"], methods.get(r["method"]).label, str(r["seeds"]),
                            f"{r['paper_mean']:.2f} ± {r['paper_std']:.2f}", fmt_e(r["global"]),
                            *(fmt_e(r[f"e{e}"]) for e in range(1, 11)), str(r["best_e"]), f"{r['best_delta']:+.2f}"]
                           for r in epochs]), ""]
        text += [f"- {line}" for line in epoch_fit_lines(epochs)] + [""]
        out.with_name(out.stem + "_local_epochs.csv").write_text(dicts_csv(
            [{k: (f"{r[k]:.2f}" if isinstance(r[k], float) and math.isfinite(r[k]) else r[k]) for k in EPOCHS_FIELDS}
             for r in epochs], EPOCHS_FIELDS))
    claims = claim_rows(root, rows, rounds)
    if claims:
        text += ["## The paper's GCA-vs-baseline claims under each variant", "",
                 "GCA ahead of the baseline (mean peak accuracy): GCA's paper-protocol cell at the paper's K* "
                 "(always the clients' own models) against the baseline under the variant; the paper's count is "
                 "its own figures on the same datasets."
                 + (f" These are R = {rounds} figures against the paper's R = {ROUNDS}: GCA and the baselines may "
                    "be at different points of their training, so a status here is not a verdict on the claim."
                    if rounds != ROUNDS else ""), "",
                 markdown(["partition", "evaluation", "optimiser state", "threshold", "GCA vs", "datasets", "paper",
                           "fedgca", "status"],
                          [[c["partition"], c["evaluation"], c["optimizer_state"], c["threshold"], methods.get(c["method"]).label,
                            c["datasets"], c["paper"], c["fedgca"], c["status"]] for c in claims]), ""]
    out.write_text("\n".join(text))
    return out
