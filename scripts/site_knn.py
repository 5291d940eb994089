"""A site's own nearest neighbours beside its autoencoder (issue #47, the gap to KNN, measured offline): how far is
a client's KNN on its own rows from the pooled KNN, and what does it add to Single-Client's and GCA's models?

    .venv/bin/python scripts/site_knn.py --data-dir ../shared/data --seeds 100,200,300 --partition iid
        [--files 6_cardio,...] [--workers 2] [--out docs/results/adbench/site_knn]

For every file × seed × partition one job runs Single-Client and GCA (own data's defaults, as `fedgca bench` runs
them) on the same split and keeps, per client and per round (0 = untrained), the deployed model's reconstruction
errors and latent codes of the client's training rows, validation normals and the test rows. It then scores, per
client (no test row or label reaches a choice; every standardisation is on the client's validation normals):

* ``single`` and ``gca``: each method's model at the round fedgca's rule picks (federation-val-error);
* ``site-knn``: PyOD's KNN (the bench's peer: k = 5, the largest distance) fitted on the client's own training
  rows only — a site alone with the strongest classical detector, nothing shared;
* ``single+knn`` / ``gca+knn``: the standardised mean of the model's errors and the site KNN's distances;
* ``single+lknn`` / ``gca+lknn``: the standardised mean of the model's errors and the KNN distance in the model's
  latent space to the client's own training codes (for GCA: the space aligned to the broadcast centroids).

Each job writes one JSON file (resumable); ``--table`` writes ``site_knn.md`` and ``site_knn.csv``: per partition
the mean AUROC, the files within 0.5 pp of Single-Client (the issue's bar for GCA), and the gap to the pooled KNN
of the committed peers (``peers_knn_lof/``, the same splits).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "docs" / "results" / "adbench" / "peers_knn_lof"
VARIANTS = ("single", "gca", "site-knn", "single+knn", "gca+knn", "single+lknn", "gca+lknn")


def _knn_scores(train: np.ndarray, *rows: np.ndarray) -> list[np.ndarray]:
    """PyOD's KNN (the bench's peer, its defaults) fitted on ``train``, its scores on each of ``rows``."""
    from pyod.models.knn import KNN

    det = KNN().fit(np.asarray(train, np.float32))
    return [np.asarray(det.decision_function(np.asarray(x, np.float32)), np.float64) for x in rows]


def _trace(path: str, options: dict) -> dict:
    """One run round by round: per round and client the deployed model's errors on its validation normals and the
    test rows, and its codes of the client's training rows, validation normals and the test rows."""
    import torch
    from selection_signals import study_simulation

    from fedgca.devices import to_numpy
    from fedgca.evaluation.metrics import shard_scores, shared_scores

    fed, sim = study_simulation(path, options)
    out = {"val": [], "test": [], "codes": []}

    def keep():
        d = sim.deployed
        n = d.val_shards.num_clients
        out["val"].append([np.asarray(s, np.float64) for s in shard_scores(d.clients, d.val_shards)])
        out["test"].append(np.asarray(to_numpy(shared_scores(d.clients, fed.test_x))[:n], np.float64))
        with torch.no_grad():
            def enc(i, x):
                return to_numpy(d.clients.slot_view(i).encode(x[None])[0]).astype(np.float32)
            out["codes"].append([(enc(i, d.shards.client(i)), enc(i, d.val_shards.client(i)), enc(i, fed.test_x))
                                 for i in range(n)])

    keep()
    for r in range(fed.cfg.rounds):
        sim.run_round(r, lambda phase, epoch: None)
        keep()
    d = sim.deployed
    out["rows"] = [(to_numpy(d.shards.client(i)), to_numpy(d.val_shards.client(i)))
                   for i in range(d.val_shards.num_clients)]
    out["test_x"] = to_numpy(fed.test_x)
    out["y"] = np.asarray(fed.dataset.test_y).astype(bool)
    return out


def _z(val: np.ndarray, test: np.ndarray) -> np.ndarray:
    from fedgca.evaluation.signals import standardisation

    mean, std = standardisation(val)
    return (test - mean) / std


def measure(path: str, seed: int, partition: str, out: str) -> str:
    from gca_twin import _picked

    from fedgca.evaluation.metrics import auroc_rows
    from fedgca.rundir import atomic_write_text
    from fedgca.threads import limit_threads

    limit_threads(1)
    runs = {m: _trace(path, {"method": m, "seed": seed, "partition": partition}) for m in ("single", "gca")}
    t = runs["gca"]
    y, n = t["y"], len(t["val"][0])
    # the same split for both methods: the site KNN is fitted once, on the rows each client trained on
    for i in range(n):
        assert np.array_equal(runs["single"]["rows"][i][0], t["rows"][i][0])
    knn = [_knn_scores(t["rows"][i][0], t["rows"][i][1], t["test_x"]) for i in range(n)]  # (val, test) per client
    pick = {m: _picked(r) for m, r in runs.items()}
    scores = {"site-knn": [knn[i][1] for i in range(n)]}
    for m, r in runs.items():
        p = pick[m]
        scores[m] = [r["test"][p][i] for i in range(n)]
        scores[f"{m}+knn"] = [(_z(r["val"][p][i], r["test"][p][i]) + _z(*knn[i])) / 2 for i in range(n)]
        lknn = [_knn_scores(*r["codes"][p][i]) for i in range(n)]
        scores[f"{m}+lknn"] = [(_z(r["val"][p][i], r["test"][p][i]) + _z(*lknn[i])) / 2 for i in range(n)]
    doc = {"file": Path(path).stem, "seed": seed, "partition": partition, "clients": n, "picked": pick,
           "auroc": {k: auroc_rows(np.stack(scores[k]), y).tolist() for k in VARIANTS}}
    atomic_write_text(Path(out), json.dumps(doc))
    return out


def _pooled_knn(partition: str) -> dict[tuple[str, int], float]:
    """The committed pooled KNN's AUROC per (file, seed) of ``partition`` (the bench's peer on the same splits)."""
    import csv

    with open(PEERS / "bench_runs.csv", newline="") as fh:
        return {(r["file"], int(r["seed"])): float(r["auroc"]) * 100 for r in csv.DictReader(fh)
                if r["column"] == "knn" and r["partition"] == partition}


def table(out: Path) -> str:
    from selection_signals import file_study_partitions, write_study_table

    rows, body = [], []
    for part, mine, files, seeds, per_file in file_study_partitions(out, VARIANTS):
        pooled = _pooled_knn(part)
        have = [f for f in files if all((f, s) in pooled for s in seeds)]
        knn = np.array([np.mean([pooled[(f, s)] for s in seeds]) for f in have]) if have else None
        for v in VARIANTS:
            gap = per_file[v] - per_file["single"]
            # the bar GCA is held to: ≥ Single-Client − 0.5 pp per file; here against the same variant of Single
            twin = v.replace("gca", "single")
            bar = per_file[v] - per_file[twin] if v.startswith("gca") else None
            vs_knn = (per_file[v][[files.index(f) for f in have]].mean() - knn.mean()) if knn is not None else None
            body.append([part, v, f"{len(files)} × {len(seeds)}", f"{per_file[v].mean():.2f}",
                         f"{gap.mean():+.2f}",
                         "–" if bar is None else f"{int((bar >= -0.5).sum())}/{len(files)} ({bar.mean():+.2f})",
                         "–" if vs_knn is None else f"{vs_knn:+.2f}"])
        rows += [[part, f, v, round(float(per_file[v][k]), 3)] for k, f in enumerate(files) for v in VARIANTS]
        if knn is not None:
            body.append([part, "pooled KNN (committed peer)", f"{len(have)} × {len(seeds)}", f"{knn.mean():.2f}",
                         "", "", "0"])
    head = ["partition", "variant", "files × seeds", "mean AUROC", "− Single-Client (pp)",
            "GCA's files ≥ Single's same variant − 0.5 pp (mean Δ)", "− pooled KNN (pp)"]
    return write_study_table(out, "site_knn", head, body, rows)


def main() -> int:
    from selection_signals import file_study_main

    return file_study_main(__doc__.splitlines()[0], str(ROOT / "docs" / "results" / "adbench" / "site_knn"), 2,
                           "site_knn")


if __name__ == "__main__":
    raise SystemExit(main())
