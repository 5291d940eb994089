"""`fedgca report`: grouping, mean ± std, the K* rule, captions and files.

The first tests render summaries fabricated in a temporary directory: their
numbers are inputs to the rendering code, not results of any experiment.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.experiments.sweep_spec import canonical
from fedgca.reporting import report
from fedgca.reporting.groups import k_star_of

SIZES = [79] * 8 + [78] * 2  # academic, C = 10 (IID)


def _summary(cfg: RunConfig, peak: float, final: float | None = None) -> dict:
    cfg = cfg.resolved()
    final = peak - 0.01 if final is None else final
    res = lambda acc: {"accuracy": acc, "auroc": acc + 0.05, "auprc": acc + 0.02}  # noqa: E731
    up = 4 * sum(int(cfg.rho * n) for n in SIZES) * 16 if cfg.method == "gca" else 4 * 10 * 46758
    down = 4 * 10 * cfg.k * 17 if cfg.method == "gca" else 4 * 10 * 46758
    return {
        "dataset": cfg.dataset, "method": cfg.method, "seed": cfg.seed, "rounds": cfg.rounds, "clients": cfg.clients,
        "k": cfg.k, "rho": cfg.rho, "backend": cfg.backend, "weights": cfg.weights, "partition": cfg.partition,
        "input_dim": 22, "input_shape": [22], "latent_dim": 16, "param_count": 46758, "client_sizes": SIZES,
        "uploads_per_round": 390, "bytes_up_per_round": up, "bytes_down_per_round": down, "wall_seconds": 1.0,
        "peak": res(peak), "final": res(final), "selected": res(final),
    }


def _write(root: Path, cfg: RunConfig, peak: float, final: float | None = None, curve=None, name=None) -> Path:
    cfg = canonical(cfg)
    d = root / (name or cfg.key())
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg.to_dict()))
    (d / "summary.json").write_text(json.dumps(_summary(cfg, peak, final)))
    if curve is not None:
        with (d / "metrics.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["round", "phase", "epoch", "accuracy", "auroc", "auprc", "train_error", "val_error", "paper"])
            for r, acc in enumerate(curve, start=1):
                w.writerow([r, "recon", 1, acc, 0.5, 0.5, 1.0, "nan", 1])
                w.writerow([r, "round", "", acc, 0.5, 0.5, 1.0, "nan", 0])
    return d


# Peak accuracies per K and seed (100, 200, 300). K = 20 and K = 40 tie exactly on the
# highest mean (the same three numbers in another order) → K* = 20, the smaller K.
PEAK_BY_K = {10: (0.70, 0.71, 0.72), 20: (0.80, 0.82, 0.84), 40: (0.84, 0.80, 0.82), 80: (0.79, 0.80, 0.81)}


@pytest.fixture()
def fabricated(tmp_path):
    root = tmp_path / "runs"
    base = dict(dataset="academic", rounds=5)
    for k, peaks in PEAK_BY_K.items():
        for seed, p in zip((100, 200, 300), peaks):
            _write(root / "sweep" / "runs", RunConfig(**base, k=k, seed=seed), p, curve=[p - 0.02, p - 0.01])
            # uniform weights: 1 point worse at every K
            _write(root / "sweep" / "runs", RunConfig(**base, k=k, seed=seed, weights="uniform"), p - 0.01)
            # a K-means backend whose best K is 80
            _write(root / "sweep" / "runs", RunConfig(**base, k=k, seed=seed, backend="kmeans"),
                   0.9 if k == 80 else 0.5)
    for seed, p in zip((100, 200, 300), (0.60, 0.62, 0.64)):
        _write(root / "compare", RunConfig(**base, method="fedavg", seed=seed), p, curve=[p - 0.05, p],
               name=f"academic-fedavg-{seed}")
        _write(root / "noniid", RunConfig(**base, method="fedavg", seed=seed, partition="dirichlet"), p - 0.1)
        _write(root / "noniid", RunConfig(**base, k=10, seed=seed, partition="dirichlet"), p)
    # The same FedAvg experiment found again elsewhere, with an option FedAvg does not read: counted once.
    _write(root / "copy", RunConfig(**base, method="fedavg", seed=100, k=80), 0.99, name="dup")
    # Another setting (fewer rounds): its own section, never pooled with the 5-round runs.
    _write(root / "quick", RunConfig(dataset="academic", rounds=1, seed=100, k=10), 0.5)
    for seed, (nt_f, dc_f, nt_g, dc_g) in zip((100, 200, 300), ((1.0, 0.30, 3.0, 0.05), (1.2, 0.28, 3.2, 0.07),
                                                                 (1.4, 0.26, 3.4, 0.06))):
        (root / "attacks").mkdir(exist_ok=True)
        (root / "attacks" / f"a{seed}").mkdir()
        (root / "attacks" / f"a{seed}" / "attack.json").write_text(json.dumps([
            {"method": "fedavg", "dataset": "academic", "seed": seed, "victim": 0, "ntmse": nt_f, "delta_cos": dc_f},
            {"method": "gca", "dataset": "academic", "seed": seed, "victim": 0, "ntmse": nt_g, "delta_cos": dc_g},
        ]))
    return root


def _table(data, tid) -> report.Table:
    (t,) = [t for s in data["sections"] for t in s.tables if t.id == tid]
    return t


def test_k_star_rule_ties_go_to_the_smaller_k():
    def g(k, vals):
        grp = report.Group("academic", "gca", "iid", (), "gmm", "inverse", k)
        grp.runs = [report.Run({"peak": {"accuracy": v}}, RunConfig("academic", k=k, seed=s), Path("."))
                    for s, v in zip((100, 200, 300), vals)]
        return grp

    groups = [g(k, v) for k, v in PEAK_BY_K.items()]
    assert report.k_star(groups).k == 20
    assert report.k_star(list(reversed(groups))).k == 20  # order of discovery does not matter
    groups[3] = g(80, (0.8201, 0.82, 0.82))  # strictly higher mean wins
    assert report.k_star(groups).k == 80
    # Only grid values are candidates when any is present.
    assert report.k_star([g(10, (0.5,)), g(15, (0.9,))]).k == 10
    assert report.k_star([g(3, (0.5,)), g(5, (0.9,))]).k == 5
    # A K run on fewer seeds (a sweep still going) does not compete with the fully run ones.
    assert report.k_star([g(10, (0.5, 0.5, 0.5)), g(20, (0.9,))]).k == 10
    assert report.k_star([g(10, (0.5, 0.5, 0.5)), g(20, (0.9,)), g(40, (0.6, 0.6, 0.6))]).k == 40
    # the rule's one home, which the scorecard calls too
    assert k_star_of({10: 0.5, 20: 0.9}, {10: 3, 20: 1}) == 10 and k_star_of({10: 0.5, 20: 0.9}) == 20


def test_report_tables_from_fabricated_runs(fabricated):
    data = report.build(fabricated)
    assert any("duplicate" in n for n in data["notes"])
    assert len(data["runs"]) == 12 * 3 + 9 + 1  # 36 GCA sweep runs, 9 compare/non-IID runs, 1 quick run
    titles = [s.title for s in data["sections"]]
    assert titles[:2] == ["Setting 1", "Setting 2"] and "Attacks" in titles and "Communication" in titles

    by_k = _table(data, "iid_accuracy_by_k_peak_s1")
    assert by_k.head == ["dataset", "backend", "K=10", "K=20", "K=40", "K=80", "K*"]
    gmm = next(r for r in by_k.grid() if r[1] == "GMM")
    assert gmm == ["academic", "GMM", "71.00 ± 1.00", "82.00 ± 2.00", "82.00 ± 2.00", "80.00 ± 1.00", "20"]
    km = next(r for r in by_k.grid() if r[1] == "K-means")
    assert km[-1] == "80"

    comp = _table(data, "iid_comparison_accuracy_peak_s1")
    assert comp.head == ["dataset", "FedAvg", "GCA-GMM", "GCA-K-means"]
    assert comp.grid() == [["academic", "62.00 ± 2.00", "82.00 ± 2.00", "90.00 ± 0.00"]]
    assert "academic K=20" in comp.caption() and "academic K=80" in comp.caption()
    final = _table(data, "iid_comparison_accuracy_final_s1")
    assert final.grid()[0][1] == "61.00 ± 2.00"

    w = _table(data, "iid_weights_peak_s1")
    assert w.grid()[0] == ["academic", "GMM", "20", "82.00 ± 2.00", "81.00 ± 2.00", "-1.00"]

    non = _table(data, "noniid_comparison_accuracy_peak_s1")
    assert non.grid() == [["academic", "52.00 ± 2.00", "62.00 ± 2.00"]]
    assert "Non-IID" in non.caption()

    nt = _table(data, "attack_ntmse")
    assert nt.grid() == [["academic", "1.200 ± 0.200", "3.200 ± 0.200"]]
    dc = _table(data, "attack_delta_cos")
    assert dc.grid() == [["academic", "0.280 ± 0.020", "0.060 ± 0.010"]]

    mib = _table(data, "comm_mib")
    assert ["academic", "10", "0.024", "0.006", "0.030", "3.567", "99.15%"] in mib.grid()
    assert "recorded per-round bytes agree" in mib.caption()

    quick = _table(data, "iid_comparison_accuracy_peak_s2")
    assert quick.grid() == [["academic", "50.00 (1 seed)"]]
    assert "1 seed per cell" in quick.caption()

    # every table names its protocol
    for s in data["sections"]:
        for t in s.tables:
            cap = t.caption()
            assert "Protocol:" in cap, t.id
            if t.protocol == "peak":
                assert "paper (peak)" in cap
            elif t.protocol == "final":
                assert "final" in cap
            elif t.protocol == "selected":
                assert "validation-selected" in cap and "val_fraction = 0" in cap


def test_curves_mean_over_seeds(fabricated):
    data = report.build(fabricated)
    gca = [c for c in data["curves"] if c["method"] == "GCA-GMM" and c["partition"] == "iid"]
    assert [c["round"] for c in gca] == [1, 2]
    assert gca[1]["mean"] == pytest.approx(0.81) and gca[1]["n"] == 3  # K* = 20: (0.79, 0.81, 0.83)
    fed = [c for c in data["curves"] if c["method"] == "FedAvg" and c["partition"] == "iid"]
    assert fed[1]["mean"] == pytest.approx(0.62) and fed[1]["std"] == pytest.approx(0.02)


def test_write_report_files(fabricated, capsys):
    from fedgca.cli.main import main

    assert main(["report", str(fabricated)]) == 0
    out = fabricated / "report"
    md = (out / "report.md").read_text()
    assert md.splitlines()[0] in capsys.readouterr().out and "iid_comparison_accuracy_peak_s1" in md
    for name in ("report.md", "report.tex", "cells.csv", "curves.csv", "runs.csv", "index.csv", "comm.csv",
                 "iid_accuracy_by_k_peak_s1.csv", "attack_ntmse.csv", "comm_mib.csv",
                 "acc_iid_peak_s1.png", "acc_iid_final_s1.png", "attack_ntmse.png", "attack_delta_cos.png",
                 "curves_iid_academic.png", "comm.png"):
        assert (out / name).exists() and (out / name).stat().st_size > 0, name
    assert (out / "acc_iid_peak_s1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tex = (out / "report.tex").read_text()
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") > 10
    assert r"$\pm$" in tex and "fashion_mnist" not in tex and r"\caption{" in tex
    assert tex.isascii()  # every symbol of the captions is escaped (±, Δ, K*, ρ, §, ...)
    index = list(csv.DictReader((out / "index.csv").open()))
    assert all(r["protocol"] in ("peak", "final", "selected", "attack", "comm") for r in index)
    cells = list(csv.DictReader((out / "cells.csv").open()))
    row = next(c for c in cells if c["table"] == "iid_accuracy_by_k_peak_s1" and c["column"] == "K=20"
               and c["row"] == "academic / GMM")
    assert float(row["mean"]) == pytest.approx(0.82) and float(row["std"]) == pytest.approx(0.02)
    assert row["n"] == "3"
    # a second report over the same tree does not read its own output
    assert main(["report", str(fabricated)]) == 0


def test_empty_directory_is_an_error(tmp_path, capsys):
    from fedgca.cli.main import main

    assert main(["report", str(tmp_path)]) == 2
    assert "no finished runs" in capsys.readouterr().err


def test_tiny_real_run_end_to_end(tmp_path, data_dir):
    """One real run (academic, 1 round, 1 epoch) through the report."""
    from fedgca.simulation.runner import run

    cfg = RunConfig("academic", rounds=1, recon_epochs=1, align_epochs=1)
    summary = run(cfg, tmp_path / "runs" / "one", data_dir=data_dir, progress=False)
    paths = report.write_report(tmp_path)
    md = paths["md"].read_text()
    assert "GCA-GMM" in md and "academic K=10" in md
    data = report.build(tmp_path, exclude=paths["dir"])
    comp = _table(data, "iid_comparison_accuracy_peak")
    assert comp.grid()[0][1] == f"{100 * summary['peak']['accuracy']:.2f} (1 seed)"
    mib = _table(data, "comm_mib")
    assert "academic: 1 run(s)' recorded per-round bytes agree." in mib.caption()
    inputs = _table(data, "comm_inputs")
    assert inputs.grid() == [["academic", "10", "390", "16", "46,758"]]
    assert "one run's shards: academic IID)" in inputs.caption()  # which partition's shards U counts
    assert (paths["dir"] / "curves_iid_academic.png").exists()


def test_weighting_ablation_paper_statistic_from_real_runs(tmp_path, data_dir):
    """metrics_clients.csv holds each evaluation client by client (its mean is metrics.csv's row), and the
    report's weighting-ablation table with the paper's statistic — per seed, client 0's best accuracy over
    the alignment-epoch evaluations — equals that maximum taken from the checkpoint's own rows."""
    import math

    from fedgca.rundir import load_tensors
    from fedgca.simulation.runner import run

    expect = {}
    for weights in ("inverse", "uniform"):
        for seed in (100, 200):
            cfg = RunConfig("academic", rounds=2, recon_epochs=1, align_epochs=2, eval_align_epochs=True,
                            weights=weights, seed=seed)
            out = tmp_path / "runs" / f"{weights}-{seed}"
            run(cfg, out, data_dir=data_dir, progress=False)
            rows = load_tensors(out / "checkpoint.pt")["rows"]
            per = list(csv.DictReader((out / "metrics_clients.csv").open(newline="")))
            overall = list(csv.DictReader((out / "metrics.csv").open(newline="")))
            assert len(per) == 10 * len(overall) == 10 * len(rows)  # C = 10 clients per evaluation
            for i, row in enumerate(overall):
                mine = [float(p["accuracy"]) for p in per[10 * i: 10 * (i + 1)]]
                assert [p["client"] for p in per[10 * i: 10 * (i + 1)]] == [str(c) for c in range(10)]
                assert math.isclose(sum(mine) / 10, float(row["accuracy"]), rel_tol=1e-12)
            align = [r["per_client"]["accuracy"][0] for r in rows if r["phase"] == "align"]
            assert len(align) == 2 * 2  # R × T_align evaluations
            expect.setdefault(weights, []).append(max(align))
    data = report.build(tmp_path)
    table = _table(data, "iid_weights_align_client0")
    (row,) = table.rows
    assert row[:3] == ["academic", "GMM", "10"]
    for cell, weights in zip(row[3:5], ("inverse", "uniform")):
        assert math.isclose(cell[0], sum(expect[weights]) / 2, rel_tol=1e-12) and cell[2] == 2
    assert row[5] == f"{100 * (row[4][0] - row[3][0]):+.2f}"


def test_runs_csv_names_the_commit_of_each_run():
    from fedgca.reporting import tables

    base = {"dataset": "academic", "method": "gca", "seed": 100, "rounds": 1, "wall_seconds": 1.0,
            **{p: {m: 0.5 for m in tables.DETECTION} for p in ("peak", "final", "selected")}}
    rows = list(csv.DictReader(io.StringIO(tables.raw_csv(
        [{**base, "code": {"git": "55e5a27abc", "cpu": "AVX512"}}, base]))))  # the second predates `code`
    assert [(r["code"], r["cpu"]) for r in rows] == [("55e5a27abc", "AVX512"), ("", "")]


def test_runs_csv_names_the_privacy_a_dp_run_spent():
    from fedgca.reporting import tables

    base = {"dataset": "magic", "seed": 100, "rounds": 1, "wall_seconds": 1.0,
            **{p: {m: 0.5 for m in tables.DETECTION} for p in ("peak", "final", "selected")}}
    user = {"epsilon": 4.2, "delta": 1e-5, "noise_multiplier": 0.05, "clip": 1.0}  # DP-FedAvg's block
    record = {"epsilon": 2.0, "delta": 1e-5, "grad_sigma": 89.0, "code_sigma": 89.0}  # DP-GCA's
    rows = list(csv.DictReader(io.StringIO(tables.raw_csv(
        [{**base, "method": "dpfedavg", "dp": user}, {**base, "method": "dpgca", "dp": record},
         {**base, "method": "gca"}]))))
    got = [[r[c] for c in ("dp_epsilon", "dp_delta", "dp_sigma", "dp_code_sigma")] for r in rows]
    assert got == [["4.2", "1e-05", "0.05", ""], ["2.0", "1e-05", "89.0", "89.0"], ["", "", "", ""]]


def test_a_sweep_in_progress_lists_its_unfinished_runs_and_the_scorecard_says_why(tmp_path, data_dir):
    """`fedgca report` of a sweep directory whose grid (sweep.json) is not finished writes pending.csv and a "Not
    finished" section with the predicted work (experiments/cost.py) and the pace of its finished runs (the ledger);
    the scorecard marks the cells those runs belong to; once all finished, the list goes."""
    from fedgca.experiments import cost, sweep
    from fedgca.paper import scorecard

    grid = [canonical(RunConfig("academic", backend="kmeans", k=k, seed=s))
            for k, s in ((10, 100), (10, 200), (10, 300), (20, 100))]
    root = tmp_path / "sweep"
    (root / sweep.RUNS).mkdir(parents=True)
    (root / sweep.SPEC_FILE).write_text(json.dumps([{"key": c.key(), "config": c.to_dict()} for c in grid]))
    _write(root / sweep.RUNS, grid[0], 0.6491)
    sweep.Ledger(root / sweep.LEDGER).append("finished", grid[0].key(), seconds=100.0)
    out = tmp_path / "rep"
    report.write_report(root, out, plots=False, data_dir=data_dir)
    pending = list(csv.DictReader((out / report.PENDING).open()))
    assert [r["key"] for r in pending] == [c.key() for c in grid[1:]] and {r["state"] for r in pending} == {"pending"}
    flops = {c.key(): cost.run_flops(c, cost.sizes(c, DataSource.builtin(c.dataset, data_dir))) for c in grid}
    left = sum(flops[c.key()] for c in grid[1:])
    assert [float(r["tflop"]) for r in pending] == [round(flops[c.key()] / 1e12, 2) for c in grid[1:]]
    md = (out / "report.md").read_text()
    assert "## Not finished" in md and "3 of the sweep's 4 runs have not finished (3 pending)" in md
    assert f"≈ {cost.hours(left / (flops[grid[0].key()] / 100.0))} of one worker" in md
    assert "| academic gca partition=iid backend=kmeans K=10 weights=inverse | 200, 300 |" in md

    data = scorecard.build(out)
    row = {(r["backend"], r["k"]): r for r in data["more"]["k_sweep"] if r["dataset"] == "academic"
           and r["partition"] == "iid"}
    assert row["kmeans", 10]["seeds"] == 1 and row["kmeans", 10]["note"] == "2 runs pending in ."
    assert row["kmeans", 20]["verdict"] == "not run" and row["kmeans", 20]["note"] == "1 run pending in ."
    assert row["kmeans", 40]["note"] == "" and row["softkmeans", 10]["note"] == ""
    card = scorecard.write_scorecard(out, tmp_path / "S.md", data_dir=tmp_path / "no-data").read_text()
    assert "| academic | K-means | 20 | 64.91 ± 0.01 | — | — | not run (1 run pending in .) |" in card
    assert "| credit | GCA | 82.40 ± 0.09 | — | — | not run (no data files) |" in card
    assert "Not run at all: adult (no data files), bank (no data files), credit (no data files)" in card

    # the K = 20 run finished by a second sweep file (the first's run directories lost): pending no more
    second = tmp_path / "second"
    (second / sweep.RUNS).mkdir(parents=True)
    (second / sweep.SPEC_FILE).write_text(json.dumps([{"key": grid[3].key(), "config": grid[3].to_dict()}]))
    _write(second / sweep.RUNS, grid[3], 0.6493)
    cards = tmp_path / "cards"
    shutil.copytree(out, cards / "first")
    report.write_report(second, cards / "second", plots=False, data_dir=data_dir)
    row = {(r["backend"], r["k"]): r for r in scorecard.build(cards)["more"]["k_sweep"]
           if r["dataset"] == "academic" and r["partition"] == "iid"}
    assert row["kmeans", 20]["seeds"] == 1 and row["kmeans", 20]["note"] == ""
    assert row["kmeans", 10]["note"] == "2 runs pending in first"

    for c in grid[1:]:
        _write(root / sweep.RUNS, c, 0.6491)
    report.write_report(root, out, plots=False, data_dir=data_dir)
    assert not (out / report.PENDING).exists() and "Not finished" not in (out / "report.md").read_text()


# ---------------------------------------------------------------------------- issue #62: ranks and figures


def test_the_nemenyi_q_is_demsars_table_and_goes_on_past_ten_columns():
    """scipy's studentized range gives Demšar's (2006) Table 5 for k ≤ 10 (to its three decimals' rounding) and the
    published values beyond it (q_0.05(k, ∞)/√2: 3.219 at k = 11, 3.391 at k = 15), so the default bench's 11
    columns get a critical difference."""
    from fedgca.reporting import bench

    demsar = {2: 1.960, 3: 2.343, 4: 2.569, 5: 2.728, 6: 2.850, 7: 2.949, 8: 3.031, 9: 3.102, 10: 3.164}
    for k, q in demsar.items():
        assert bench.nemenyi_q(k) == pytest.approx(q, abs=1.5e-3), k
    assert bench.nemenyi_q(11) == pytest.approx(3.219, abs=1e-3) and bench.nemenyi_q(15) == pytest.approx(3.391, abs=1e-3)
    assert bench.critical_difference(11, 25) == pytest.approx(3.219 * (11 * 12 / (6 * 25)) ** 0.5, rel=1e-3)


def _rank_table(k=11, n=25, seed=0):
    import numpy as np

    from fedgca.reporting import bench

    rng = np.random.default_rng(seed)
    cols = ["centralized", "single", "fedavg", "fedprox", "gca", "pyod-ae", "iforest", "ecod", "knn", "lof",
            "knn-site"][:k]  # the default bench's 11 columns
    m = rng.normal(size=(n, k)) + np.linspace(0, 2, k)  # later columns better on average
    rk = np.array([bench.ranks(row) for row in m])
    rank = dict(zip(cols, rk.mean(axis=0)))
    cd = bench.critical_difference(k, n)
    return {"partition": "iid", "metric": "auroc", "columns": cols, "rows": [],
            "summary": {"complete_files": [f"f{i}" for i in range(n)], "rank": rank, "mean": dict(zip(cols, m.mean(0))),
                        "cd": cd, "friedman": bench.friedman(m), "cliques": bench.cliques(rank, cd), "wtl": {}}}


def test_friedman_cd_and_cliques_are_drawn_at_the_default_width():
    """11 columns, as the default bench has: Friedman's test (scipy) in the report line, the CD bar and one bar per
    group the test cannot tell apart, read from the figure's artists; every group spans less than CD."""
    import numpy as np
    from scipy.stats import friedmanchisquare

    from fedgca.reporting import bench

    t = _rank_table()
    s = t["summary"]
    assert s["friedman"][0] > 0 and s["friedman"][1] < 0.05
    assert s["cliques"] and all(max(s["rank"][c] for c in g) - min(s["rank"][c] for c in g) < s["cd"]
                                for g in s["cliques"])
    m = np.array([[0.9, 0.8, 0.7], [0.85, 0.8, 0.6], [0.7, 0.9, 0.5]])
    assert bench.friedman(m) == pytest.approx(tuple(friedmanchisquare(*m.T)))
    gids = [line.get_gid() for line in bench.rank_figure(t).axes[0].lines]
    assert "cd" in gids and sum(1 for g in gids if g and g.startswith("clique-")) == len(s["cliques"])
    line = bench.rank_line(t)
    assert f"CD = {s['cd']:.2f}" in line and "Friedman's χ² = " in line and "(q = 3.219)" in line


def test_plotting_leaves_the_users_matplotlib_backend_alone(tmp_path):
    """A notebook has loaded pyplot with its backend; fedgca's plots (the report's bars and curves, the bench's CD
    diagram, the privacy curves, the attack grid) draw through matplotlib's object API and leave it as it was."""
    import subprocess
    import sys

    code = f"""
import matplotlib
matplotlib.use("svg")
import matplotlib.pyplot as plt
import numpy as np
from pathlib import Path
from fedgca.reporting import plots, bench, privacy
from fedgca.attacks.run import save_grid
sys_path = Path({str(tmp_path)!r})
plots.grouped_bars(sys_path / "a.png", "t", ["x", "y"], [("m", [1, 2], [0.1, 0.2])], "acc")
plots.curves_plot(sys_path / "b.png", "t", {{"m": [{{"round": 1, "mean": 0.5, "std": 0.1}}]}})
save_grid(sys_path / "c.png", np.zeros((3, 1, 4, 4)), np.zeros((5, 1, 4, 4)))
print(matplotlib.get_backend())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "svg"
    assert all((tmp_path / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in ("a.png", "b.png", "c.png"))
