"""Label-free selection signals against the test-label oracle (issue #47 item 2, its first step: measure).

    .venv/bin/python scripts/selection_signals.py --data-dir ../shared/data [--files 6_cardio,...]
        [--methods centralized,single,fedavg,fedprox,gca] [--seeds 100] [--partition iid] [--workers 2]
        [--out docs/results/adbench/signals]

For every file × method × seed of the bench (own data's defaults, as `fedgca bench` runs them), the federation is run
in process and, before the first round (round 0: the untrained models) and after every round, each deployed model
is measured by:

* ``val_error``: its mean reconstruction error on its client's held-out validation normals (fedgca's rule today:
  the lowest wins);
* ``proxy_<generator>``: a proxy AUROC — its client's validation normals against synthetic anomalies made from
  those same rows by one documented generator (``GENERATORS``; the highest wins);
* ``test_auroc``: the test-label oracle (never read by a signal).

Each job writes one JSON file (resumable: a file already there is skipped). ``--table`` reads them and writes
``regret.csv`` / ``regret.md`` (and ``per_file.csv``): per method and signal, the mean regret (oracle AUROC − AUROC at the round the
signal picks; per client where each client deploys its own model, per federation where the model is shared),
how often the pick is the untrained model, and the mean AUROC deployed. No test row or label reaches a signal:
the generators see only the client's validation rows (tests/test_selection_signals.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from fedgca.evaluation.signals import GENERATORS, client_anomalies, proxy_auroc, standardisation

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = ("val_error", "last", *(f"proxy_{g}" for g in GENERATORS))
ORACLE = "test_auroc"  # the test-label oracle: in the table as the bar, never a signal
LOWER_IS_BETTER = {"val_error"}
# The files where training made every method worse than the untrained autoencoder (docs/results/adbench/untrained.csv)
HURT = ("7_Cardiotocography", "6_cardio", "15_Hepatitis", "41_Waveform", "23_mammography", "37_Stamps")


# ------------------------------------------------------------------------------------------------- one run

def _measure(fed, method, seed: int, r: int) -> dict:
    """Every signal and the oracle for each deployed model after round ``r`` (0 = untrained)."""
    import torch

    from fedgca.devices import to_numpy
    from fedgca.evaluation.metrics import auroc_rows, shard_scores, shared_scores

    clients, val_shards = method.deployed.clients, method.deployed.val_shards
    n = val_shards.num_clients
    val = shard_scores(clients, val_shards)
    test = to_numpy(shared_scores(clients, fed.test_x))[:n]
    y = np.asarray(fed.dataset.test_y).astype(bool)
    out = {"round": r, "val_error": [float(s.mean()) for s in val], "test_auroc": auroc_rows(test, y).tolist()}
    for g in GENERATORS:  # the same rows and AUROC as a run's --selection client-proxy-<g> (fedgca.evaluation.signals)
        vals = []
        for i in range(n):
            normals = to_numpy(val_shards.client(i))
            fake = torch.as_tensor(client_anomalies(normals, g, seed, i), dtype=torch.float32)
            vals.append(proxy_auroc(val[i], to_numpy(shared_scores(clients.slot_view(i), fake))[0]))
        out[f"proxy_{g}"] = vals
    return out


def _ensembles(test: list, val: list, picked: list[int], y: np.ndarray, latent: list | None = None) -> dict:
    """Score ensembles of one run's candidate models, per client (``--ensembles``): each model's test scores made
    comparable by its own validation scores (z = (s − mean) / std over the client's validation normals: no label),
    then averaged over a set of candidates. ``test[r]``: [clients, M] scores of the models after r rounds;
    ``val[r][i]``: client i's validation scores; ``picked[i]``: the round the validation-error rule picks;
    ``latent`` (GCA): per round (test, validation) distances of each client's codes to the nearest centroid the
    server broadcast that round, scored beside (and instead of) the reconstruction error."""
    from fedgca.evaluation.metrics import auroc_rows

    def std_scores(scores, validation):  # the run option's standardisation (ensemble-rounds)
        mean, std = standardisation(validation)
        return (scores - mean) / std

    z = np.stack([[std_scores(t[i], v[i]) for i in range(len(v))]
                  for t, v in zip(test, val)])  # [rounds, clients, M]
    n = z.shape[1]
    sets = {"all rounds": lambda i: list(range(len(z))), "trained rounds": lambda i: list(range(1, len(z))),
            "untrained + picked": lambda i: sorted({0, picked[i]}), "last 5 rounds": lambda i: list(range(len(z) - 5,
                                                                                                           len(z)))}
    out = {name: auroc_rows(np.stack([z[rows(i), i].mean(axis=0) for i in range(n)]), y).tolist()
           for name, rows in sets.items()}
    if latent is not None:  # GCA: each client's distance to the nearest broadcast centroid, at the picked round
        lz = [[None if t is None else std_scores(t[i], v[i]) for i in range(n)]
              for t, v in latent]  # [rounds][clients] (None: round 0, nothing broadcast yet)
        both, alone = [], []
        for i in range(n):
            j = picked[i] if lz[picked[i]][i] is not None else len(lz) - 1
            both.append((z[picked[i], i] + lz[j][i]) / 2)
            alone.append(lz[j][i])
        out["reconstruction + latent distance (picked)"] = auroc_rows(np.stack(both), y).tolist()
        out["latent distance (picked)"] = auroc_rows(np.stack(alone), y).tolist()
    return out


def study_simulation(path: str, options: dict):
    """(federation, simulation) of one bench run of an ADBench file (own data's defaults, as `fedgca bench`), before
    its first round; refused without a validation split (nothing for a signal to read)."""
    from fedgca.binding import bind
    from fedgca.data.source import open_source
    from fedgca.simulation.driver import Simulation
    from fedgca.simulation.federation import build_federation

    source = open_source(Path(path))
    cfg, dataset = bind(options, source)
    fed = build_federation(cfg, source, dataset)
    if fed.val_shards is None:
        raise ValueError(f"{path}: no validation split (--val-fraction 0): nothing for a signal to read")
    return fed, Simulation(fed)


def measure_run(path: str, options: dict, out: str, ensembles: bool = False) -> str:
    """One bench run (file, method, seed, partition), measured round by round; its JSON written to ``out``
    (``ensembles``: also the score ensembles of ``_ensembles``)."""
    from fedgca.rundir import atomic_write_text
    from fedgca.threads import limit_threads

    limit_threads(1)
    fed, method = study_simulation(path, options)
    cfg = fed.cfg
    test, val, latent = [], [], []

    def keep():
        if ensembles:
            import torch

            from fedgca.devices import to_numpy
            from fedgca.evaluation.metrics import shard_scores, shared_scores

            d = method.deployed
            val.append(shard_scores(d.clients, d.val_shards))
            test.append(to_numpy(shared_scores(d.clients, fed.test_x))[:d.val_shards.num_clients])
            sent = getattr(method.method, "broadcast", None)
            if isinstance(sent, dict) and "centroids" in sent:
                mu = torch.as_tensor(np.asarray(sent["centroids"]), dtype=torch.float32)

                def dist(i, x):
                    with torch.no_grad():
                        codes = d.clients.slot_view(i).encode(x[None])[0]
                        return to_numpy(torch.cdist(codes, mu.to(codes.device)).min(dim=1).values ** 2)
                n = d.val_shards.num_clients
                latent.append(([dist(i, fed.test_x) for i in range(n)],
                               [dist(i, d.val_shards.client(i)) for i in range(n)]))
            else:
                latent.append((None, None))

    rounds = [_measure(fed, method, cfg.seed, 0)]
    keep()
    for r in range(cfg.rounds):
        method.run_round(r, lambda phase, epoch: None)
        rounds.append(_measure(fed, method, cfg.seed, r + 1))
        keep()
    doc = {"file": Path(path).stem, "method": cfg.method, "seed": cfg.seed, "partition": cfg.partition,
           "shared_model": bool(method.deployed.one_model or cfg.spec.pooled), "clients": cfg.clients,
           "rounds": rounds}
    if ensembles:
        gca = any(t is not None for t, _ in latent)
        doc["ensembles"] = _ensembles(test, val, picks(doc, "val_error"), np.asarray(fed.dataset.test_y).astype(bool),
                                      [(None, None) if t is None else (t, v) for t, v in latent] if gca else None)
    atomic_write_text(Path(out), json.dumps(doc))
    return out


# ------------------------------------------------------------------------------------------------- the table

def picks(doc: dict, signal: str) -> list[int]:
    """The round each client deploys under ``signal`` (one round for all when the model is shared)."""
    rounds = doc["rounds"]
    n = len(rounds[0]["test_auroc"])
    if signal == "last":
        return [len(rounds) - 1] * n
    sign = 1.0 if signal in LOWER_IS_BETTER else -1.0
    values = np.array([r[signal] for r in rounds]) * sign  # [rounds, clients], lower = better
    if doc["shared_model"]:
        return [int(np.argmin(values.mean(axis=1)))] * n
    return [int(j) for j in np.argmin(values, axis=0)]


def run_regret(doc: dict, signal: str) -> tuple[float, float, float]:
    """(mean regret in pp, share of clients deploying round 0, mean deployed AUROC ×100) of one run."""
    auc = np.array([r["test_auroc"] for r in doc["rounds"]])  # [rounds, clients]
    chosen = picks(doc, signal)
    deployed = np.array([auc[j, i] for i, j in enumerate(chosen)])
    oracle = auc.mean(axis=1).max() if doc["shared_model"] else auc.max(axis=0)
    return (float(np.mean(oracle - deployed) * 100), float(np.mean(np.array(chosen) == 0)),
            float(deployed.mean() * 100))


def table(out: Path) -> str:
    from fedgca.tabletext import csv_text, markdown

    docs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    # a partition's seeds whose every file × method run is measured (a study stopped part-way leaves some out)
    cells = {(d["partition"], d["seed"]): set() for d in docs}
    for d in docs:
        cells[(d["partition"], d["seed"])].add((d["file"], d["method"]))
    full = max((len(v) for v in cells.values()), default=0)
    docs = [d for d in docs if len(cells[(d["partition"], d["seed"])]) == full]
    rows, md = [], []
    methods = sorted({d["method"] for d in docs})
    partitions = sorted({d["partition"] for d in docs})
    for part in partitions:
        for m in methods:
            mine = [d for d in docs if d["method"] == m and d["partition"] == part]
            for sig in (*SIGNALS, ORACLE):
                res = np.array([run_regret(d, sig) for d in mine])
                rows.append([part, m, sig, len(mine), *[round(float(v), 3) for v in res.mean(axis=0)]])
                md.append([part, m, sig, str(len(mine)), f"{res[:, 0].mean():.2f}", f"{100 * res[:, 1].mean():.0f} %",
                           f"{res[:, 2].mean():.2f}"])
    head = ["partition", "method", "signal (test_auroc: the oracle)", "runs", "mean regret (pp)", "round 0 chosen",
            "deployed AUROC"]
    seeds = {p: sorted({d["seed"] for d in docs if d["partition"] == p}) for p in partitions}
    (out / "regret.csv").write_text(csv_text(["partition", "method", "signal", "runs", "regret_pp", "round0_share",
                                              "deployed_auroc"], rows))
    per_file = [[d["partition"], d["method"], d["file"], d["seed"], sig, *[round(v, 3) for v in run_regret(d, sig)]]
                for d in docs for sig in (*SIGNALS, ORACLE)]
    (out / "per_file.csv").write_text(csv_text(["partition", "method", "file", "seed", "signal", "regret_pp",
                                                "round0_share", "deployed_auroc"], per_file))
    text = ("Seeds with every run measured: " + "; ".join(f"{p} {', '.join(map(str, v))}" for p, v in seeds.items())
            + "\n\n" + markdown(head, md))
    (out / "regret.md").write_text(text)
    return text


def today(doc: dict) -> float:
    """Mean deployed AUROC ×100 under fedgca's default rule (``federation-val-error``): one round for the
    federation, the trained round with the lowest mean validation error."""
    auc = np.array([r["test_auroc"] for r in doc["rounds"]])
    val = np.array([r["val_error"] for r in doc["rounds"]])
    return float(100 * auc[1 + int(np.argmin(val[1:].mean(axis=1)))].mean())


def ensemble_table(out: Path) -> str:
    """ensembles.md: per partition and method, mean AUROC ×100 of the validation-error pick, the untrained model,
    each score ensemble and the oracle — over every file, and over the files where training hurt (``HURT``)."""
    from fedgca.tabletext import markdown

    docs = [d for d in (json.loads(p.read_text()) for p in sorted(out.glob("*.json"))) if "ensembles" in d]
    if not docs:
        return ""
    names = list(dict.fromkeys(n for d in docs for n in d["ensembles"]))  # GCA's have two more
    head = ["partition", "method", "files", "runs", "today (federation-val-error)", "client val_error pick",
            "untrained", *names, "oracle"]
    body = []
    for part in sorted({d["partition"] for d in docs}):
        for m in sorted({d["method"] for d in docs}):
            mine = [d for d in docs if d["partition"] == part and d["method"] == m]
            for which, keep in (("all", lambda d: True), ("training hurt", lambda d: d["file"] in HURT)):
                sel = [d for d in mine if keep(d)]
                if not sel:
                    continue
                cols = [[today(d) for d in sel], [run_regret(d, "val_error")[2] for d in sel],
                        [100 * np.mean(d["rounds"][0]["test_auroc"]) for d in sel],
                        *[[100 * np.mean(d["ensembles"][n]) for d in sel if n in d["ensembles"]] for n in names],
                        [run_regret(d, ORACLE)[2] for d in sel]]
                body.append([part, m, which, str(len(sel)), *[f"{np.mean(c):.2f}" if c else "–" for c in cols]])
    text = markdown(head, body)
    (out / "ensembles.md").write_text(text)
    from fedgca.tabletext import csv_text

    per_run = [[d["partition"], d["method"], d["file"], d["seed"], round(today(d), 3),
                round(run_regret(d, "val_error")[2], 3),
                round(100 * float(np.mean(d["rounds"][0]["test_auroc"])), 3),
                *[round(100 * float(np.mean(d["ensembles"][n])), 3) if n in d["ensembles"] else "" for n in names],
                round(run_regret(d, ORACLE)[2], 3)] for d in docs]
    (out / "ensembles.csv").write_text(csv_text(["partition", "method", "file", "seed", "today", "client_val_error_pick",
                                                 "untrained",
                                                 *names, "oracle"], per_run))
    return text


def study_arguments(description: str, out: str, workers: int) -> argparse.ArgumentParser:
    """The options every ADBench study script takes (this one and gca_twin.py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--files", default=None, help="comma-separated file stems [default: every ADBench file]")
    ap.add_argument("--seeds", default="100")
    ap.add_argument("--partition", default="iid")
    ap.add_argument("--workers", type=int, default=workers)
    ap.add_argument("--out", default=out)
    ap.add_argument("--table", action="store_true", help="only write the table of the runs measured")
    return ap


def file_study_partitions(out: Path, variants):
    """A file study's JSON files in ``out``, per partition: (partition, its documents, files, seeds, per file the
    mean AUROC ×100 of each variant — the mean over its seeds of the mean over clients)."""
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    for part in sorted({d["partition"] for d in docs}):
        mine = [d for d in docs if d["partition"] == part]
        files = sorted({d["file"] for d in mine})
        per_file = {v: np.array([np.mean([np.mean(d["auroc"][v]) for d in mine if d["file"] == f]) * 100
                                 for f in files]) for v in variants}
        yield part, mine, files, sorted({d["seed"] for d in mine}), per_file


def write_study_table(out: Path, stem: str, head: list, body: list, rows: list) -> str:
    """``stem``.md (``head`` and ``body``) and ``stem``.csv (``rows``: partition, file, variant, AUROC) in ``out``."""
    from fedgca.tabletext import csv_text, markdown

    text = markdown(head, body)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.csv").write_text(csv_text(["partition", "file", "variant", "auroc"], rows))
    return text


def file_study_main(description: str, out: str, workers: int, module: str) -> int:
    """The main of a study with one job per file × seed × partition (gca_twin.py, site_knn.py): ``module``'s
    ``measure(path, seed, partition, out)`` for every job without its JSON file, then its ``table(out)``."""
    import importlib

    args = study_arguments(description, out, workers).parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    study = importlib.import_module(module)  # by name: the workers find the job there (the script is __main__)
    if not args.table:
        from fedgca.experiments.pool import study_jobs

        jobs = [(str(f), int(s), args.partition, str(out / f"{f.stem}-{args.partition}-seed{s}.json"))
                for s in args.seeds.split(",") for f in study_files(args)]
        todo = [j for j in jobs if not Path(j[3]).exists()]
        logging.basicConfig(level=logging.WARNING)
        print(f"{len(todo)} of {len(jobs)} jobs to measure", file=sys.stderr)
        study_jobs(study.measure, todo, args.workers)
    print(study.table(out))
    return 0


def study_files(args) -> list[Path]:
    """The ADBench files of ``--data-dir`` (``--files``: only those stems)."""
    from fedgca.experiments import bench

    files, _ = bench.discover([Path(args.data_dir) / "adbench"])
    return [f for f in files if not args.files or f.stem in args.files.split(",")]


def main() -> int:
    ap = study_arguments(__doc__.splitlines()[0], str(ROOT / "docs" / "results" / "adbench" / "signals"), 2)
    ap.add_argument("--methods", default="centralized,single,fedavg,fedprox,gca")
    ap.add_argument("--ensembles", action="store_true",
                    help="also measure score ensembles of the candidate models (scripts' docstring)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        from fedgca.experiments.pool import study_jobs

        files = study_files(args)
        jobs = [(str(f), {"method": m, "seed": int(s), "partition": args.partition},
                 str(out / f"{f.stem}-{args.partition}-{m}-seed{s}.json"), args.ensembles)
                for f in files for m in args.methods.split(",") for s in args.seeds.split(",")]
        todo = [j for j in jobs if not Path(j[2]).exists()]
        import selection_signals  # the workers find the job by this module's name (this file is __main__ here)

        logging.basicConfig(level=logging.WARNING)
        print(f"{len(todo)} of {len(jobs)} runs to measure", file=sys.stderr)
        study_jobs(selection_signals.measure_run, todo, args.workers)
    print(table(out))
    print(ensemble_table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
