"""``fedgca bench`` (issue #40): two small shared ADBench files through the real CLI — the table's shape, the
peers' columns, a failing file reported and skipped, resume — and the own-data defaults it runs with."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fedgca.cli.main import main

FILES = ("42_WBC.npz", "45_wine.npz")


@pytest.fixture(scope="module")
def bench(tmp_path_factory, data_dir):
    """A bench of two shared files and two bad ones: an .npz whose y marks every row an anomaly, and a text file."""
    root = tmp_path_factory.mktemp("bench")
    files = root / "files"
    files.mkdir()
    for name in FILES:
        (files / name).write_bytes((data_dir / "adbench" / name).read_bytes())
    np.savez(files / "all_anomalies.npz", X=np.random.default_rng(0).normal(size=(40, 3)), y=np.ones(40, dtype=int))
    (files / "notes.mat").write_text("not a MATLAB file")
    out = root / "out"
    args = ["bench", str(files), "--out", str(out), "--methods", "centralized,single,gca", "--seeds", "100,200",
            "--peers", "iforest,knn,lof,knn-site", "--workers", "0", "--rounds", "2", "--no-plots"]
    assert main(args) == 0
    return {"out": out, "args": args, "files": files}


def _report(out):
    return (out / "report" / "report.md").read_text()


def test_table_has_files_as_rows_and_methods_and_peers_as_columns(bench):
    import csv

    with open(bench["out"] / "report" / "auroc_iid.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["file"] for r in rows] == ["42_WBC", "45_wine"]
    for column in ("centralized", "single", "gca", "iforest", "knn", "lof"):
        assert all(r[f"{column}_seeds"] == "2" and 0 <= float(r[f"{column}_mean"]) <= 100 for r in rows), column
    text = _report(bench["out"])
    assert ("| file | Centralized | Single-Client | GCA | IForest (central) | KNN (central) | LOF (central) "
            "| KNN (each site) |") in text
    for summary in ("**mean** (2 files)", "**average rank**", "W/T/L vs Centralized", "W/T/L vs Single-Client"):
        assert summary in text
    # the best centralized peer by mean is named, and every method is counted against it too (issue #47 item 1)
    means = {c: np.mean([float(r[f"{c}_mean"]) for r in rows]) for c in ("iforest", "knn", "lof")}
    best = max(means, key=means.get)
    label = {"iforest": "IForest", "knn": "KNN", "lof": "LOF"}[best]
    assert f"Best centralized peer (AUROC, iid): **{label} (central)**, mean {means[best]:.2f} over 2 files" in text
    assert f"W/T/L vs {label} (central)" in text
    # the peers scored the runs' own test rows: the same count as the runs'
    peer = json.loads(next((bench["out"] / "peers" / "42_WBC").glob("iid-seed100-iforest.json")).read_text())
    run = next(json.loads(p.read_text()) for p in (bench["out"] / "runs").glob("*/summary.json")
               if json.loads(p.read_text())["dataset"] == "42_WBC" and json.loads(p.read_text())["seed"] == 100)
    assert peer["n_test"] == run["data"]["n_test"] and peer["n_train"] == sum(run["client_sizes"])


def test_knn_and_lof_are_default_peers():
    """Issue #47 item 1: the strongest classical detectors on ADBench's one-class protocol are in every bench, and
    KNN at each site alone (the bar for sharing nothing)."""
    from fedgca.cli.main import build_parser

    args = build_parser().parse_args(["bench", "files"])
    assert {"knn", "lof", "knn-site"} <= set(args.peers.split(","))


def test_the_per_site_peer_is_each_clients_own_knn(bench):
    """KNN (each site): PyOD's KNN fitted on each client's training rows of the run's split alone, its AUROC the mean
    over clients (scikit-learn's AUROC as the reference); never the 'best centralized peer'."""
    from pyod.models.knn import KNN
    from sklearn.metrics import roc_auc_score

    from fedgca.binding import bind
    from fedgca.data.partition import client_splits
    from fedgca.data.source import open_source

    rec = json.loads((bench["out"] / "peers" / "42_WBC" / "iid-seed200-knn-site.json").read_text())
    run = next(json.loads(p.read_text()) for p in (bench["out"] / "runs").glob("*/summary.json")
               if json.loads(p.read_text())["dataset"] == "42_WBC" and json.loads(p.read_text())["seed"] == 200)
    cfg, ds = bind({"seed": 200, "partition": "iid"}, open_source(bench["files"] / "42_WBC.npz"))
    parts, _ = client_splits(cfg, ds)
    assert len(parts) == run["clients"] and rec["per_site"]["n_train"] == [len(p) for p in parts] == run["client_sizes"]
    want = [roc_auc_score(ds.test_y, KNN().fit(ds.train[p]).decision_function(ds.test_x)) for p in parts]
    np.testing.assert_allclose(rec["per_site"]["auroc"], want, rtol=0, atol=1e-12)
    assert rec["auroc"] == pytest.approx(np.mean(want), abs=1e-12)
    assert "Best centralized peer (AUROC, iid): **KNN (each site)" not in _report(bench["out"])


def test_a_failing_file_is_one_line_and_the_rest_goes_on(bench):
    text = _report(bench["out"])
    lines = [line for line in text.splitlines() if "skipped:" in line]
    assert len(lines) == 2
    assert any("all_anomalies" in line and "no normal rows" in line for line in lines)
    assert any("notes" in line and "notes.mat" in line for line in lines)


def test_rerunning_resumes_and_runs_nothing_again(bench, capsys):
    before = {p: p.stat().st_mtime_ns for p in (bench["out"] / "runs").glob("*/summary.json")}
    assert len(before) == 2 * 3 * 2
    assert main(bench["args"]) == 0
    assert "0 run(s) finished now, 12 before" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_dry_run_says_what_each_file_gets(bench, capsys):
    assert main([*bench["args"][:-1], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "42_WBC: 223 rows × 9 features, 4.5 % anomalies; C = 2" in out
    assert "skipped notes.mat" in out


def test_a_file_too_small_for_its_clients_names_the_largest_c(data_dir, tmp_path, capsys):
    path = tmp_path / "15_Hepatitis.npz"
    path.write_bytes((data_dir / "adbench" / "15_Hepatitis.npz").read_bytes())
    assert main(["run", "--data", str(path), "--clients", "10", "--rounds", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("the largest C it supports is 4 (--clients)") and "15_Hepatitis" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "r").exists()


def test_own_data_defaults_follow_the_data():
    from fedgca.data.defaults import (
        default_clients,
        epochs_per_round,
        max_clients,
        own_defaults,
    )

    assert [default_clients(n) for n in (54, 1230, 31908)] == [2, 10, 10] and default_clients(595) == 5
    assert epochs_per_round(21, 21) == 10 and epochs_per_round(2552, 50) == 2 and epochs_per_round(40000, 50) == 1
    d = own_defaults(31908, None, "iid")
    assert d["clients"] == 10 and d["val_fraction"] == 0.2 and d["threshold"] == "val-quantile"
    assert d["local_epochs"] == 2 and (d["recon_epochs"], d["align_epochs"]) == (2, 1) and d["batch_size"] == 50
    assert d["eval_recon_epochs"] is False  # per-round evaluation: the selection is per round
    # what the user sets is kept, and what follows from it follows: a smaller C gives fewer epochs per round
    d = own_defaults(31908, None, "iid", given={"clients": 2, "val_fraction": 0.0})
    assert "clients" not in d and d["threshold"] == "train-quantile" and d["local_epochs"] == 1
    assert own_defaults(54, None, "iid")["batch_size"] == 22  # a 27-row client: 22 training rows, one batch
    from fedgca.data.partition import iid_partition, split_validation

    def smallest(n, c, v):  # the real IID partition and validation split, brute force
        return min(len(t) for t in split_validation(iid_partition(n, c, 1), v, 1)[0])

    for n, v in ((54, 0.2), (1000, 0.2), (7, 0.0)):
        c = max_clients(n, v, 10)
        assert smallest(n, c, v) >= 10 or c == 1
        assert smallest(n, c + 1, v) < 10


@pytest.mark.parametrize("name", ["6_cardio.npz", "20_letter.npz"])
def test_predict_flags_the_promised_share_of_held_out_normals(name, data_dir):
    """With the defaults (a validation share, the selected round's model, τ from validation scores), each client's
    detector flags about 1 − quantile of the test set's normals, rows no client trained on."""
    import fedgca

    with np.load(data_dir / "adbench" / name) as f:
        X, y = f["X"], f["y"]
    r = fedgca.run(fedgca.load_data((X, y)), method="gca", seed=100)
    rows = np.loadtxt(r.out / "test_rows.csv", skiprows=1, dtype=int)
    normals = X[rows][y[rows] == 0]
    flagged = [float(det.predict(det.transform(normals)).mean()) for det in r.detectors]
    promised = 1 - r.config.quantile
    assert abs(np.mean(flagged) - promised) <= 0.10, flagged
    assert r.detectors[0].meta["round"] == r.summary["selected"]["round"]
    # ... and they are that round's models: their AUROC on the test set is the selected round's, client by client
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    per_client = pd.read_csv(r.out / "metrics_clients.csv")
    at = per_client[(per_client["phase"] == "round") & (per_client["round"] == r.summary["selected"]["round"])]
    x_test, y_test = X[rows], y[rows]
    for det, expected in zip(r.detectors, at.sort_values("client")["auroc"]):
        assert abs(roc_auc_score(y_test, det.decision_function(det.transform(x_test))) - expected) < 1e-4
    assert set(r.summary["data"]["defaulted"]) >= {"clients", "val_fraction", "threshold", "rounds", "local_epochs"}


def test_a_bench_with_pyod_ae_ends_without_a_leaked_semaphore_warning(data_dir, tmp_path):
    """Issue #50 item 5: PyOD's AutoEncoder makes a semaphore in the peer worker; a worker stopped by a signal never
    released it, and every bench ended with Python's "leaked semaphore objects" warning. Completed pools now let
    their workers exit on their own."""
    import subprocess
    import sys

    files = tmp_path / "files"
    files.mkdir()
    (files / "42_WBC.npz").write_bytes((data_dir / "adbench" / "42_WBC.npz").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "fedgca.cli.main", "bench", str(files), "--methods", "single",
                           "--seeds", "100", "--rounds", "1", "--peers", "pyod-ae", "--workers", "2", "--no-plots",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(list((tmp_path / "out" / "peers" / "42_WBC").glob("*.json"))) == 1


def test_peer_workers_are_forked_with_pyods_scoring_function_compiled():
    """PyOD's AutoEncoder scores with a numba function compiled at its first call (~8 s, in each peer worker's first
    fit). The peer fork server imports fedgca.experiments.peers_jit, which compiles it for the types the AutoEncoder
    passes: a fit then compiles nothing more."""
    pytest.importorskip("pyod")
    from pyod.models.auto_encoder import AutoEncoder
    from pyod.utils import stat_models

    from fedgca.experiments import pool

    assert "fedgca.experiments.peers_jit" in pool.PEER_PRELOAD
    import fedgca.experiments.peers_jit  # noqa: F401 — what the fork server does before it forks

    compiled = list(stat_models._pairwise_distances_no_broadcast_helper.signatures)
    assert len(compiled) == 1
    X = np.random.default_rng(0).standard_normal((40, 3))  # float64 rows, as a user's file gives them
    AutoEncoder(hidden_neuron_list=[8, 4], epoch_num=1, batch_size=20, verbose=0, device="cpu").fit(X)
    assert stat_models._pairwise_distances_no_broadcast_helper.signatures == compiled
