"""The scorecard's inputs: the paper's published figures, and fedgca's finished runs under a directory (``summary.json``
files and the ``runs.csv`` tables ``fedgca report``/``compare`` write), each tagged with its protocol."""
from __future__ import annotations

import csv
import io
import json
import logging
from collections import defaultdict
from importlib import resources
from pathlib import Path, PurePosixPath

from fedgca import methods, provenance
from fedgca.paper.verdicts import ROUNDS
from fedgca.reporting import tables
from fedgca.reporting.groups import load_runs

log = logging.getLogger(__name__)


def paper_tables() -> tuple[dict, list[dict]]:
    """{(dataset, method): (mean %, std %)} and the communication rows, from the packaged reference data."""
    ref = resources.files("fedgca.paper") / "published"
    acc = {(r["dataset"], r["method"]): (float(r["mean"]), float(r["std"]))
           for r in csv.DictReader(io.StringIO((ref / "iid_accuracy.csv").read_text()))}
    comm = list(csv.DictReader(io.StringIO((ref / "communication.csv").read_text())))
    return acc, comm


HONEST_FIGURES = ("selected_accuracy", "selected_auroc", "final_accuracy")


def protocol_of(row: dict) -> str | None:
    """"paper" (the paper's protocol), "honest" (a validation split, τ on validation rows, the round chosen by
    validation error; parameter sharing otherwise as the paper states it) or None (a protocol variant)."""
    if tables.paper_protocol(row):
        return "paper"
    honest = {"threshold": "val-quantile", "baseline_eval": "global", "optimizer_state": "keep"}
    if all(row.get(k, tables.PROTOCOL_DEFAULTS[k]) == v for k, v in honest.items()) \
            and float(row.get("val_fraction") or 0) > 0:
        return "honest"
    return None


def _row_of_summary(s: dict) -> dict:
    return {"dataset": s["dataset"], "method": s["method"], "seed": int(s["seed"]), "rounds": int(s["rounds"]),
            "k": s.get("k"), "backend": s.get("backend", "gmm"), "weights": s.get("weights", "inverse"),
            "partition": s.get("partition", "iid"), "peak_accuracy": float(s["peak"]["accuracy"]),
            "protocol": protocol_of(s), "val_fraction": float(s.get("val_fraction") or 0),
            "code": (s.get("code") or {}).get("git") or None,
            **{f: float(s[f.split("_")[0]][f.split("_")[1]]) for f in HONEST_FIGURES
               if f.split("_")[0] in s}}


def row_of_csv(r: dict) -> dict:
    return {"dataset": r["dataset"], "method": r["method"], "seed": int(r["seed"]), "rounds": int(r["rounds"]),
            "k": int(r["k"]) if r.get("k") not in (None, "", "None") else None, "backend": r.get("backend", "gmm"),
            "weights": r.get("weights", "inverse"), "partition": r.get("partition", "iid"),
            "peak_accuracy": float(r["peak_accuracy"]), "protocol": protocol_of(r),
            "val_fraction": float(r.get("val_fraction") or 0), "code": r.get("code") or None,
            **{f: float(r[f]) for f in HONEST_FIGURES if r.get(f) not in (None, "")}}


def collect_runs(root, protocol: str = "paper", quiet: bool = False, variant: tuple[str, str] | None = None) -> list[dict]:
    """One row per run of a method the paper tabulates, under ``protocol`` (``protocol_of``), found under ``root``
    (summaries first, in path order;
    a runs.csv adds the runs it alone holds). Protocol variants (issue #15's investigation) are not paper cells.
    A run met twice with different figures (two code versions of one config) is used once and named in a
    warning: the copy from the later of two commits of one history (git ancestry, where ``root`` is in a clone
    that has both), else the one that names its commit over one from before runs recorded it, else the first met;
    unreadable summaries and rows are skipped with one. ``variant`` = (name, dataset): only the runs of data
    variant ``name`` (own data, e.g. bank's file under another test split), counted as ``dataset``'s."""
    root = Path(root)
    rows, first = [], {}
    tabulated = {m for _, m in paper_tables()[0]}  # e.g. not DP-GCA, whose runs.csv rows omit their ε
    published = {d for d, _ in paper_tables()[0]}  # own data (a data variant too) is no paper cell

    def key(r):
        return (r["dataset"], r["method"], r["seed"], r["rounds"], r["k"] if r["method"] == "gca" else None,
                r["backend"], r["weights"], r["partition"], r["val_fraction"])

    def add(r, source):
        if r["method"] not in tabulated:
            return
        if variant is not None:
            if r["dataset"] != variant[0]:
                return
            r["dataset"] = variant[1]
        elif r["dataset"] not in published:
            return
        k = key(r)
        if k not in first:
            first[k] = (source, len(rows))
            rows.append(r)
            return
        (seen, i), old = first[k], rows[first[k][1]]
        if r["peak_accuracy"] == old["peak_accuracy"]:
            return
        figures = f"{100 * r['peak_accuracy']:.4f} against {100 * old['peak_accuracy']:.4f} %"
        later = provenance.later_commit(old["code"], r["code"], root) if r["code"] and old["code"] else None
        if later is not None:  # two commits of one history: the later code's copy
            kind, outcome = "later", (f"the one from the later commit ({later[:7]}, a descendant of "
                                      f"{(old['code'] if later == r['code'] else r['code'])[:7]}) is used")
            replace = later == r["code"]
        elif bool(r["code"]) and not old["code"]:  # provenance known beats unknown (older code)
            kind, outcome = "named", f"it is used, since it names its commit ({r['code'][:7]}) and the other does not"
            replace = True
        else:
            kind = "first" if bool(old["code"]) == bool(r["code"]) else "named"
            outcome, replace = f"the {'first' if kind == 'first' else 'one that names its commit'} is used", False
        if replace:
            first[k], rows[i] = (source, i), r
        repeats.append((source, seen, kind, abs(r["peak_accuracy"] - old["peak_accuracy"]),
                        f"{source} repeats {seen} with another peak accuracy ({figures}): {outcome}"))

    runs, notes = load_runs(root)  # unreadable summaries are skipped there, with a note
    repeats: list[tuple] = []
    for run in runs:
        s = run.record
        if protocol_of(s) != protocol:
            continue
        try:
            r = _row_of_summary(s)
        except (KeyError, TypeError, ValueError) as err:  # a summary.json that is not a run's
            notes.append(f"skipped {run.path / 'summary.json'}: no {err}")
            continue
        add(r, run.path.relative_to(root).as_posix())
    for path in sorted(root.rglob("runs.csv")):
        for line, raw in enumerate(csv.DictReader(path.open()), start=2):
            if protocol_of(raw) != protocol:
                continue
            try:
                r = row_of_csv(raw)
            except (KeyError, TypeError, ValueError) as err:
                notes.append(f"skipped {path}, line {line}: {err}")
                continue
            add(r, f"{path.relative_to(root).as_posix()}, line {line}")
    for note in [] if quiet else notes + _summarise_repeats(repeats):
        log.warning("%s", note)
    return rows


def _summarise_repeats(repeats: list[tuple]) -> list[str]:
    """One line per repeated run, or, where more than three runs of one file repeat those of another with the same
    outcome (a sweep re-run with newer code), one line for them all."""
    def where(source: str) -> str:  # a runs.csv, or the folder of a run directory's summary.json
        return source.split(", line")[0] if ", line" in source else \
            f"the run directories under {PurePosixPath(source).parent.as_posix()}"

    groups: dict = defaultdict(list)
    for source, seen, kind, diff, line in repeats:
        groups[(where(source), where(seen), kind)].append((diff, line))
    out = []
    for (source, seen, _), items in groups.items():
        if len(items) <= 3:
            out += [line for _, line in items]
        else:
            largest = max(items)
            out.append(f"{len(items)} runs in {source} repeat runs in {seen} with other peak accuracies (by up to "
                       f"{100 * largest[0]:.2f} pp; e.g. {largest[1]})")
    return out


def collect_attacks(root) -> dict[tuple[str, str], dict[str, list[float]]]:
    """{(dataset, method): {"ntmse": [...], "delta_cos": [...]}} from attack.json files under ``root``."""
    out: dict = defaultdict(lambda: {"ntmse": [], "delta_cos": []})
    for p in sorted(Path(root).rglob("*attack*.json")):
        try:
            a = json.loads(p.read_text())
            out[(a["dataset"], a["method"])]["ntmse"].append(float(a["ntmse"]))
            out[(a["dataset"], a["method"])]["delta_cos"].append(float(a["delta_cos"]))
        except (ValueError, KeyError, TypeError):
            continue
    for metric, name in (("ntmse", "attack_ntmse.csv"), ("delta_cos", "attack_delta_cos.csv")):
        labels = {spec.label: m for m, spec in methods.REGISTRY.items()}
        for p in sorted(Path(root).rglob(name)):  # the report's per-dataset means (when no attack.json is there)
            runs = p.parent / "runs.csv"  # ... of a report with R = 100 runs (e.g. not the R = 10 DP curves')
            if runs.exists() and not any(int(r["rounds"]) == ROUNDS for r in csv.DictReader(runs.open())):
                continue
            for r in csv.DictReader(p.open()):
                for label, cell in r.items():
                    m = labels.get(label)
                    if m and cell and not out[(r["dataset"], m)][metric]:
                        out[(r["dataset"], m)][metric].append(float(cell.split("±")[0]))
    return dict(out)
