"""The scorecard's cells, Δ, verdicts and claims, from a small fixture of fabricated summaries.

The summaries are inputs to the comparison code, not results of any experiment.
"""
from __future__ import annotations

import json

import pytest

from fedgca.paper import scorecard
from fedgca.reporting import report


def _summary(root, dataset, method, seed, peak, k=10, rounds=100, partition="iid", **protocol):
    d = root / f"{dataset}-{method}-{k}-{seed}-{rounds}-{partition}-{'-'.join(map(str, protocol.values()))}"
    d.mkdir(parents=True)
    res = {"accuracy": peak, "auroc": 0.7, "auprc": 0.7}
    (d / "summary.json").write_text(json.dumps({
        "dataset": dataset, "method": method, "seed": seed, "rounds": rounds, "k": k, "backend": "gmm",
        "weights": "inverse", "partition": partition, "peak": res, "selected": res,
        "final": {**res, "accuracy": peak - 0.01}, "wall_seconds": 1.0, **protocol}))


@pytest.fixture()
def fixture_dir(tmp_path):
    # academic (paper: GCA 64.92, FedAvg 64.88, Single 64.54): GCA 64.90 ± ..., FedAvg 66.50 (outside)
    for seed, g, a, s in ((100, 0.6490, 0.6650, 0.6450), (200, 0.6492, 0.6652, 0.6452), (300, 0.6494, 0.6648, 0.6454)):
        _summary(tmp_path, "academic", "gca", seed, g)
        _summary(tmp_path, "academic", "fedavg", seed, a)
        _summary(tmp_path, "academic", "single", seed, s)
    for seed in (100, 200, 300):  # another K, all seeds: fedgca's own K* rule picks it, not the paper's K*
        _summary(tmp_path, "academic", "gca", seed, 0.70, k=40)
    _summary(tmp_path, "academic", "gca", 100, 0.90, k=80)  # one seed of three: does not compete for K*
    _summary(tmp_path, "academic", "fedavg", 100, 0.90, rounds=20)  # another setting: ignored
    _summary(tmp_path, "academic", "fedavg", 100, 0.90, partition="dirichlet")  # ignored
    return tmp_path


def test_cells_delta_and_verdicts(fixture_dir):
    data = scorecard.build(fixture_dir)
    cell = {(r["dataset"], r["method"]): r for r in data["table"]}
    gca, avg, single = cell["academic", "gca"], cell["academic", "fedavg"], cell["academic", "single"]
    assert gca["k"] == 10 and gca["seeds"] == 3 and gca["fedgca_mean"] == pytest.approx(64.92)
    assert gca["delta"] == pytest.approx(64.92 - 64.92, abs=1e-9) and gca["verdict"] == "within"
    assert avg["fedgca_mean"] == pytest.approx(66.50) and avg["delta"] == pytest.approx(66.50 - 64.88)
    assert avg["verdict"] == "outside"  # 1.62 pp > 1.0 pp
    assert single["delta"] == pytest.approx(64.52 - 64.54) and single["verdict"] == "within"
    assert cell["magic", "gca"]["verdict"] == "not run" and cell["magic", "gca"]["delta"] is None
    assert gca["own_k_star"]["k"] == 40  # fedgca's own K* rule noted beside the paper's K*
    assert scorecard.verdict("magic", 1.4) == "within" and scorecard.verdict("academic", 1.4) == "outside"


def test_a_cell_without_r100_runs_shows_its_longest_r_unjudged(fixture_dir):
    """Fashion-MNIST on a CPU: a cell with no R = 100 run shows the largest R it was run at, marked with it, no
    tolerance verdict, no claims — also when another cell of the dataset has R = 100 runs (its sweep under way);
    a cell with R = 100 runs (academic's, Fashion-MNIST's FedAvg) ignores its shorter ones."""
    for seed in (100, 200, 300):
        _summary(fixture_dir, "fashion_mnist", "gca", seed, 0.79, rounds=2)
        _summary(fixture_dir, "fashion_mnist", "fedavg", seed, 0.81, rounds=2)
    _summary(fixture_dir, "fashion_mnist", "gca", 100, 0.99, rounds=1)  # a shorter R than the longest: ignored
    data = scorecard.build(fixture_dir)
    cell = {(r["dataset"], r["method"]): r for r in data["table"]}
    fm = cell["fashion_mnist", "fedavg"]
    assert fm["rounds"] == 2 and fm["fedgca_mean"] == pytest.approx(81.0) and fm["verdict"] == "R = 2 only"
    assert fm["delta"] == pytest.approx(81.0 - fm["paper_mean"])
    assert cell["fashion_mnist", "gca"]["rounds"] == 2 and cell["fashion_mnist", "gca"]["fedgca_mean"] == pytest.approx(79.0)
    assert cell["fashion_mnist", "single"]["verdict"] == "not run"
    assert cell["academic", "fedavg"]["rounds"] == 100 and cell["academic", "fedavg"]["verdict"] == "outside"
    assert all("fashion_mnist" not in c["fedgca"] for c in data["claims"])
    text = scorecard.render(data, "fixture")
    assert "2 at R = 2 (no R = 100 run: shown, not judged)" in text

    _summary(fixture_dir, "fashion_mnist", "fedavg", 100, 0.84, rounds=100)  # the R = 100 sweep's first run
    cell = {(r["dataset"], r["method"]): r for r in scorecard.build(fixture_dir)["table"]}
    fm = cell["fashion_mnist", "fedavg"]
    assert fm["rounds"] == 100 and fm["seeds"] == 1 and fm["fedgca_mean"] == pytest.approx(84.0)
    assert fm["verdict"] in ("within", "outside")
    assert cell["fashion_mnist", "gca"]["rounds"] == 2 and cell["fashion_mnist", "gca"]["verdict"] == "R = 2 only"
    assert scorecard._fmt(81.0, 0.0, 1) == "81.00 (n=1)" and scorecard._fmt(81.0, 0.5, 3) == "81.00 ± 0.50"


def test_claims(fixture_dir):
    claims = {c["claim"].split(":")[0]: c for c in scorecard.build(fixture_dir)["claims"]}
    assert claims["GCA vs FedAvg"]["status"] == "not reproduced"  # paper: GCA ahead; fixture: FedAvg ahead
    assert claims["GCA vs Single-Client"]["status"] == "reproduced"
    assert claims["GCA vs FedProx"]["status"] == "not run"


def test_written_files(fixture_dir, tmp_path):
    out = scorecard.write_scorecard(fixture_dir, tmp_path / "SCORECARD.md", data_dir=tmp_path / "no-data")
    text = out.read_text()
    assert "| academic | FedAvg | 64.88 ± 0.02 | 66.50 ± 0.02 | +1.62 | outside |" in text
    assert str(tmp_path) not in text  # no machine paths
    assert out.with_suffix(".csv").read_text().count("\n") == 1 + 49  # 7 datasets × 7 methods


def _variant_run(root, seed, opt, global_peak, local_peak):
    """A fabricated --baseline-eval local run: rows of both phases (their accuracies are the fixture's)."""
    d = root / f"fedavg-{opt}-{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"dataset": "academic", "method": "fedavg", "seed": seed,
                                               "baseline_eval": "local", "optimizer_state": opt}))
    (d / "summary.json").write_text("{}")
    rows = ["round,phase,epoch,accuracy,auroc,auprc,train_error,val_error,paper"]
    for r, (g, loc) in enumerate(((global_peak - 0.01, local_peak), (global_peak, local_peak - 0.02)), start=1):
        rows += [f"{r},local,,{loc},0.7,0.7,0.1,nan,1", f"{r},round,,{g},0.7,0.7,0.1,nan,0"]
    (d / "metrics.csv").write_text("\n".join(rows) + "\n")
    return d


def test_variants_table_delta_and_verdicts(tmp_path):
    """Paper academic FedAvg: 64.88 ± 0.02. Global peaks 65.40 ± 0 (not consistent), local 64.87 ± 0.01."""
    from fedgca.paper import variants

    for seed, loc in ((100, 0.6486), (200, 0.6487), (300, 0.6488)):
        _variant_run(tmp_path, seed, "keep", 0.6540, loc)
    rows = {(r["evaluation"], r["optimizer_state"]): r for r in variants.variant_rows(tmp_path)}
    assert set(rows) == {("global", "keep"), ("local", "keep")}
    g, loc = rows["global", "keep"], rows["local", "keep"]
    assert g["seeds"] == 3 and g["mean"] == pytest.approx(65.40) and g["delta"] == pytest.approx(0.52)
    assert g["verdict"] == "not"
    assert loc["mean"] == pytest.approx(64.87) and loc["std"] == pytest.approx(0.01)
    assert loc["delta"] == pytest.approx(-0.01) and loc["verdict"] == "consistent"
    out = variants.write_variants(tmp_path)
    assert "consistent with the paper on 1/1" in out.read_text() and out.with_suffix(".csv").exists()


def test_noniid_variants_and_the_local_epoch_diagnostic(tmp_path):
    """Non-IID runs are judged against the paper's non-IID table (academic FedAvg 62.24 ± 1.20), and the
    --eval-local-epochs rows give a peak per local epoch e; e = 3 is fabricated to sit on the paper's figure."""
    from fedgca.paper import variants

    for seed in (100, 200, 300):
        d = tmp_path / f"noniid-{seed}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"dataset": "academic", "method": "fedavg", "seed": seed,
                                                   "partition": "dirichlet", "baseline_eval": "local",
                                                   "eval_local_epochs": True}))
        (d / "summary.json").write_text("{}")
        rows = ["round,phase,epoch,accuracy,auroc,auprc,train_error,val_error,paper"]
        for r in (1, 2):
            rows += [f"{r},local-epoch,{e},{0.60 + 0.0074 * e - 0.001 * (e - 3) ** 2 - 0.01 * (2 - r)},0.7,0.7,0.1,nan,0"
                     for e in range(1, 11)]
            rows += [f"{r},local,,0.55,0.7,0.7,0.1,nan,1", f"{r},round,,0.6422,0.7,0.7,0.1,nan,0"]
        (d / "metrics.csv").write_text("\n".join(rows) + "\n")
    got = {(r["partition"], r["evaluation"]): r for r in variants.variant_rows(tmp_path)}
    assert set(got) == {("dirichlet", "global"), ("dirichlet", "local")}
    assert got["dirichlet", "global"]["paper_mean"] == pytest.approx(62.24)  # the non-IID table, not the IID one
    assert got["dirichlet", "global"]["delta"] == pytest.approx(64.22 - 62.24)
    (epochs,) = variants.local_epoch_rows(tmp_path)
    assert epochs["e3"] == pytest.approx(62.22) and epochs["global"] == pytest.approx(64.22)
    assert epochs["best_e"] == 3 and epochs["best_delta"] == pytest.approx(-0.02)
    lines = variants.epoch_fit_lines([epochs])
    assert lines[2].startswith("e = 3: consistent on 1/1") and lines[-1].startswith("one e fits every cell")
    text = variants.write_variants(tmp_path).read_text()
    assert "after every local epoch" in text and (tmp_path / "VARIANTS_local_epochs.csv").exists()


def test_protocol_variants_are_not_paper_cells(fixture_dir):
    """A run under another reporting protocol (here --baseline-eval local) never enters a paper cell."""
    d = fixture_dir / "variant"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({
        "dataset": "academic", "method": "fedavg", "seed": 400, "rounds": 100, "k": 10, "backend": "gmm",
        "weights": "inverse", "partition": "iid", "baseline_eval": "local",
        "peak": {"accuracy": 0.10, "auroc": 0.7, "auprc": 0.7}}))
    cell = {(r["dataset"], r["method"]): r for r in scorecard.build(fixture_dir)["table"]}
    assert cell["academic", "fedavg"]["seeds"] == 3


def test_honest_protocol_cells_and_claims(fixture_dir):
    """Runs with a validation split and τ on validation rows are the honest section's, never paper cells; a
    protocol variant with a validation split (local evaluation) is neither."""
    honest = dict(val_fraction=0.1, threshold="val-quantile")
    for seed, g, a, s in ((100, 0.640, 0.650, 0.645), (200, 0.642, 0.652, 0.647), (300, 0.644, 0.654, 0.649)):
        _summary(fixture_dir, "academic", "gca", seed, g, **honest)
        _summary(fixture_dir, "academic", "fedavg", seed, a, **honest)
        _summary(fixture_dir, "academic", "single", seed, s, **honest)
        _summary(fixture_dir, "academic", "fedprox", seed, 0.99, baseline_eval="local", **honest)
    data = scorecard.build(fixture_dir)
    paper_cells = {(r["dataset"], r["method"]): r for r in data["table"]}
    assert paper_cells["academic", "gca"]["fedgca_mean"] == pytest.approx(64.92)  # unchanged by honest runs
    assert paper_cells["academic", "fedprox"]["verdict"] == "not run"
    rows = {r["method"]: r for r in data["honest"]}
    assert set(rows) == {"single", "fedavg", "gca"}  # the local-evaluation variant is not honest either
    assert rows["gca"]["selected_accuracy_mean"] == pytest.approx(64.2)
    assert rows["gca"]["final_accuracy_mean"] == pytest.approx(63.2)
    assert rows["gca"]["fedgca_mean"] == pytest.approx(64.92) and rows["gca"]["paper_mean"] == pytest.approx(64.92)
    claims = {c["claim"]: c for c in data["honest_claims"]}
    # paper: GCA ahead of Single and of FedAvg on academic; honest fixture: behind both
    single = claims["GCA vs Single-Client"]
    assert single["paper"] == "1/1" and single["selected_accuracy"] == "0/1"
    assert claims["GCA vs FedAvg"]["survives"] == "no" and "GCA vs FedProx" not in claims
    text = scorecard.render(data, "fixture")
    assert "| academic | GCA (K*=10) | 64.92 ± 0.01 | 64.92 ± 0.02 | 64.20 ± 0.20 |" in text


def test_variants_table_of_shorter_runs(tmp_path):
    """--rounds R tabulates the runs of R rounds alone, and says the paper's figures are R = 100's."""
    from fedgca.paper import variants

    for seed, loc in ((100, 0.6486), (200, 0.6487), (300, 0.6488)):
        _variant_run(tmp_path, seed, "keep", 0.6540, loc)
    for seed in (100, 200, 300):  # R = 2 runs of the same cell, far from the paper
        d = _variant_run(tmp_path / "r2", seed, "keep", 0.50, 0.40)
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "rounds": 2}))
    assert {r["rounds"] for r in variants.variant_rows(tmp_path)} == {100}
    short = variants.variant_rows(tmp_path, rounds=2)
    assert {(r["rounds"], r["evaluation"]) for r in short} == {(2, "global"), (2, "local")}
    assert {round(r["mean"], 2) for r in short} == {50.0, 40.0} and {r["verdict"] for r in short} == {"not"}
    text = variants.write_variants(tmp_path, tmp_path / "V.md", rounds=2).read_text()
    assert "--variants --rounds 2`" in text and "R = 100's" in text and text.count("on 0/1 cells") == 2
    with pytest.raises(ValueError, match="R = 7"):
        variants.write_variants(tmp_path, tmp_path / "V7.md", rounds=7)


def test_claims_under_each_variant(tmp_path):
    """Paper academic: GCA 64.92 ahead of FedAvg 64.88. fedgca's GCA 64.92 is behind FedAvg's global peak
    (65.40: the claim is not reproduced) and ahead of its pre-aggregation peak (64.87: reproduced)."""
    from fedgca.paper import variants

    for seed, loc in ((100, 0.6486), (200, 0.6487), (300, 0.6488)):
        _variant_run(tmp_path, seed, "keep", 0.6540, loc)
        _summary(tmp_path, "academic", "gca", seed, 0.6492)
    _summary(tmp_path, "adult", "gca", 100, 0.90)  # one seed only, and no baseline run: no claim on adult
    claims = {c["evaluation"]: c for c in variants.claim_rows(tmp_path, variants.variant_rows(tmp_path))}
    assert set(claims) == {"global", "local"}
    assert claims["global"]["datasets"] == "academic" and claims["global"]["paper"] == "1/1 (academic)"
    assert claims["global"]["fedgca"] == "0/1 (none)" and claims["global"]["status"] == "not reproduced"
    assert claims["local"]["fedgca"] == "1/1 (academic)" and claims["local"]["status"] == "reproduced"
    text = variants.write_variants(tmp_path).read_text()
    assert "GCA-vs-baseline claims under each variant" in text and "| iid | local | keep | train-quantile | FedAvg" in text


def test_a_summary_that_is_not_a_runs_is_skipped_with_a_note(fixture_dir, caplog):
    """A corrupt or foreign summary.json costs one warning naming it; the cells are built from the rest."""
    (fixture_dir / "corrupt").mkdir()
    (fixture_dir / "corrupt" / "summary.json").write_text('{"dataset": ')
    (fixture_dir / "foreign").mkdir()
    (fixture_dir / "foreign" / "summary.json").write_text('{"dataset": "academic", "method": "fedavg", "seed": 400}')
    with caplog.at_level("WARNING"):
        cell = {(r["dataset"], r["method"]): r for r in scorecard.build(fixture_dir)["table"]}
    assert cell["academic", "fedavg"]["seeds"] == 3 and cell["academic", "gca"]["seeds"] == 3
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2 and any("corrupt" in m for m in skipped) and any("foreign" in m for m in skipped)


def test_config_json_decides_the_protocol_of_a_summary_that_omits_it(fixture_dir, caplog):
    """The first variant runs' summaries name no baseline_eval; their config.json does. Such a run is not a paper
    cell, and a run met twice with different figures is used once and named."""
    from fedgca.reporting import tables
    from fedgca.reporting.groups import load_runs

    d = fixture_dir / "0-old-variant"  # met first: path order
    d.mkdir()
    res = {"accuracy": 0.10, "auroc": 0.7, "auprc": 0.7}
    (d / "summary.json").write_text(json.dumps({
        "dataset": "academic", "method": "fedavg", "seed": 300, "rounds": 100, "k": 10, "partition": "iid",
        "peak": res, "final": res, "selected": res, "wall_seconds": 1.0}))
    (d / "config.json").write_text(json.dumps({"dataset": "academic", "method": "fedavg", "seed": 300,
                                               "baseline_eval": "local"}))
    (fixture_dir / "copy").mkdir()
    (fixture_dir / "copy" / "runs.csv").write_text(  # the same academic GCA seed-100 run, another figure
        "dataset,method,seed,rounds,k,backend,weights,partition,peak_accuracy\n"
        "academic,gca,100,100,10,gmm,inverse,iid,0.5\n")
    with caplog.at_level("WARNING"):
        cell = {(r["dataset"], r["method"]): r for r in scorecard.build(fixture_dir)["table"]}
    assert cell["academic", "fedavg"]["fedgca_mean"] == pytest.approx(66.50)  # not pulled down by the 10 %
    assert cell["academic", "gca"]["fedgca_mean"] == pytest.approx(64.92)  # the summary, met first
    assert any("copy/runs.csv, line 2 repeats" in r.getMessage() for r in caplog.records)
    run = next(r for r in load_runs(fixture_dir)[0] if r.path == d)
    assert ",local,keep," in tables.raw_csv([run.record]).splitlines()[1]  # runs.csv names what the summary omits


def test_a_run_that_names_its_commit_is_used_over_an_older_copy_of_it(fixture_dir, caplog):
    """The same config and seed from two code versions: the copy whose commit is recorded (today's code) is the
    cell's, whichever is met first; without commits on either side, the first met."""
    (fixture_dir / "zz-newer").mkdir()  # met after the fixture's summaries (path order)
    (fixture_dir / "zz-newer" / "runs.csv").write_text(
        "dataset,method,seed,rounds,k,backend,weights,partition,peak_accuracy,code\n"
        "academic,gca,100,100,10,gmm,inverse,iid,0.5,55e5a27abc\n")
    with caplog.at_level("WARNING"):
        cell = {(r["dataset"], r["method"]): r for r in scorecard.build(fixture_dir)["table"]}
    rows = scorecard.collect_runs(fixture_dir, quiet=True)
    (gca100,) = [r for r in rows if (r["dataset"], r["method"], r["seed"], r["k"], r["partition"])
                 == ("academic", "gca", 100, 10, "iid")]
    assert gca100["peak_accuracy"] == 0.5 and gca100["code"] == "55e5a27abc"
    assert cell["academic", "gca"]["seeds"] == 3
    assert any("zz-newer/runs.csv, line 2 repeats" in m and "names its commit (55e5a27)" in m
               for m in (r.getMessage() for r in caplog.records))


def test_what_has_been_run_counts_cells_whose_three_seeds_finished(fixture_dir):
    """academic in the fixture: GCA K=10 and K=40 and FedAvg/Single at all three seeds; K=80 and non-IID FedAvg
    at one seed, which does not count."""
    for seed in (100, 200, 300):
        _summary(fixture_dir, "academic", "gca", seed, 0.60, partition="dirichlet", k=20)
    data = scorecard.build(fixture_dir)
    cov = {r["dataset"]: r for r in data["coverage"]}
    a = cov["academic"]
    assert a["iid_table"] == "3/7 (missing Centralized, FedProx, FedNova, DP-FedAvg)"
    assert a["k_sweep_gmm"] == "2/4 (missing K=20, K=80)"
    assert a["weighting_ablation"] == "1/2 (missing uniform K=10)"
    assert a["noniid_methods"] == "1/7 (missing Single-Client, Centralized, FedAvg, FedProx, FedNova, DP-FedAvg) " \
                                  "(GCA at K = 20)"
    assert a["noniid_k_sweep"] == "1/4 (missing K=10, K=40, K=80)"
    assert cov["magic"]["iid_table"] == "0/7" and cov["magic"]["k_sweep_other_backends"].startswith("K-means 0/4")
    assert "## What has been run" in scorecard.render(data, "fixture")


def test_many_repeats_between_two_files_are_one_warning(fixture_dir, caplog):
    """A sweep re-run with newer code repeats dozens of runs: one line says how many and by how much, not one
    line per run; three or fewer are still named one by one."""
    (fixture_dir / "zz-rerun").mkdir()
    rows = "".join(f"academic,{m},{seed},100,10,gmm,inverse,iid,{0.5 + seed / 1e4},abc1234\n"
                   for m in ("gca", "fedavg") for seed in (100, 200, 300))
    (fixture_dir / "zz-rerun" / "runs.csv").write_text(
        "dataset,method,seed,rounds,k,backend,weights,partition,peak_accuracy,code\n" + rows)
    with caplog.at_level("WARNING"):
        scorecard.collect_runs(fixture_dir)
    msgs = [r.getMessage() for r in caplog.records]
    (summary,) = [m for m in msgs if "zz-rerun/runs.csv" in m]
    assert summary.startswith("6 runs in zz-rerun/runs.csv repeat runs in the run directories under . ") \
        and "by up to 15.50 pp" in summary, msgs


def test_between_two_named_commits_the_later_ones_copy_is_used(tmp_path, caplog):
    """Two copies of one run, both naming their commit: where the scorecard's directory is in a git clone that has
    both commits, the descendant's copy is used, in either path order; without that history, the first met."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "old")
    old = git("rev-parse", "HEAD")
    git("commit", "-q", "--allow-empty", "-m", "new")
    new = git("rev-parse", "HEAD")
    head = "dataset,method,seed,rounds,k,backend,weights,partition,peak_accuracy,code\n"
    for first, second in ((old, new), (new, old)):
        root = tmp_path / f"results-{first[:7]}"
        for name, commit in (("a", first), ("b", second)):
            peak = 0.7 if commit == new else 0.6
            (root / name).mkdir(parents=True)
            (root / name / "runs.csv").write_text(head + f"academic,fedavg,100,100,10,gmm,inverse,iid,{peak},{commit}\n")
        caplog.clear()
        with caplog.at_level("WARNING"):
            (row,) = scorecard.collect_runs(root)
        assert row["code"] == new and row["peak_accuracy"] == 0.7
        assert any(f"the one from the later commit ({new[:7]}, a descendant of {old[:7]}) is used" in r.getMessage()
                   for r in caplog.records)
    unrelated = tmp_path.parent / f"{tmp_path.name}-nogit"  # outside the clone: no history to order them by
    for name, commit, peak in (("a", old, 0.6), ("b", new, 0.7)):
        (unrelated / name).mkdir(parents=True)
        (unrelated / name / "runs.csv").write_text(head + f"academic,fedavg,100,100,10,gmm,inverse,iid,{peak},{commit}\n")
    (row,) = scorecard.collect_runs(unrelated, quiet=True)
    assert row["code"] == old  # the first met (a/ before b/)


# ---------------------------------------------------------------------------- the other published tables (#33)


def _more(root, comm_rows=None):
    return scorecard.build(root, comm_rows)["more"]


def test_k_sweep_per_backend_cells_and_k_star(tmp_path):
    # paper (k_sweep.csv) academic K-means: 64.91 / 64.91 / 64.92 / 64.92, K* = 40 (ties to the smaller K)
    for seed in (100, 200, 300):
        for k, acc in ((10, 0.6491), (20, 0.6600), (40, 0.6700), (80, 0.6300)):
            _summary(tmp_path, "academic", "gca", seed, acc, k=k, backend="kmeans")
    more = _more(tmp_path)
    row = {(r["partition"], r["backend"], r["dataset"], r["k"]): r for r in more["k_sweep"]}
    assert row["iid", "kmeans", "academic", 10]["delta"] == pytest.approx(64.91 - 64.91, abs=1e-9)
    assert row["iid", "kmeans", "academic", 10]["verdict"] == "within"
    assert row["iid", "kmeans", "academic", 20]["delta"] == pytest.approx(66.00 - 64.91)
    assert row["iid", "kmeans", "academic", 20]["verdict"] == "outside"  # 1.09 pp > 1.0
    assert row["iid", "kmeans", "academic", 80]["delta"] == pytest.approx(63.00 - 64.92)
    assert row["iid", "softkmeans", "academic", 10]["verdict"] == "not run"
    star = {(s["partition"], s["backend"], s["dataset"]): s for s in more["k_stars"]}
    assert star["iid", "kmeans", "academic"]["paper_k_star"] == 40
    assert star["iid", "kmeans", "academic"]["fedgca_k_star"] == 40 and star["iid", "kmeans", "academic"]["complete"]
    claim = next(c for c in scorecard.build(tmp_path)["claims"] if c["claim"].startswith("backends"))
    assert claim["status"] == "not run"  # one backend of four: no spread across backends to judge
    for seed in (100, 200, 300):  # a second backend with the four K: the spread (66.99 − 63.00) is not modest
        for k in (10, 20, 40, 80):
            _summary(tmp_path, "academic", "gca", seed, 0.6699, k=k, backend="minibatch")
    claim = next(c for c in scorecard.build(tmp_path)["claims"] if c["claim"].startswith("backends"))
    assert claim["status"] == "not reproduced on academic" and "academic 4.00" in claim["fedgca"]
    # a backend with some K finished does not count yet; a dataset judged on fewer backends names them
    for seed in (100, 200, 300):
        _summary(tmp_path, "academic", "gca", seed, 0.10, k=10, backend="softkmeans")
        for k in (10, 20, 40, 80):
            _summary(tmp_path, "magic", "gca", seed, 0.70, k=k)  # GMM
            _summary(tmp_path, "magic", "gca", seed, 0.70 + k / 10_000, k=k, backend="kmeans")
    claim = next(c for c in scorecard.build(tmp_path)["claims"] if c["claim"].startswith("backends"))
    assert claim["fedgca"] == ("range over GMM, K-means, Mini-batch K-means: academic 4.00 (K-means, Mini-batch "
                               "K-means only), magic 0.80 (GMM, K-means only) pp")
    assert claim["status"] == "not reproduced on academic"


def test_noniid_comparison_and_its_claim(tmp_path):
    # paper non-IID academic: GCA 63.36, FedAvg 62.24 (GCA ahead); magic: GCA 61.75, FedAvg 62.39 (GCA behind)
    for seed in (100, 200, 300):
        _summary(tmp_path, "academic", "gca", seed, 0.6300, k=10, partition="dirichlet")
        _summary(tmp_path, "academic", "gca", seed, 0.9000, k=40, partition="dirichlet")  # not the paper's K = 10
        _summary(tmp_path, "academic", "fedavg", seed, 0.6500, partition="dirichlet")
        _summary(tmp_path, "magic", "gca", seed, 0.6200, k=10, partition="dirichlet")
        _summary(tmp_path, "magic", "fedavg", seed, 0.6000, partition="dirichlet")
    more = _more(tmp_path)
    cell = {(r["dataset"], r["method"]): r for r in more["noniid"]}
    assert cell["academic", "gca"]["fedgca_mean"] == pytest.approx(63.00)
    assert cell["academic", "gca"]["delta"] == pytest.approx(63.00 - 63.36) and cell["academic", "gca"]["verdict"] == "within"
    assert cell["academic", "fedavg"]["delta"] == pytest.approx(65.00 - 62.24)
    assert cell["academic", "fedavg"]["verdict"] == "outside" and cell["credit", "gca"]["verdict"] == "not run"
    claim = next(c for c in more["more_claims"] if c["claim"].startswith("non-IID"))
    # paper: ahead on academic, behind on magic; fixture: behind on academic, ahead on magic
    assert claim["status"] == "not reproduced" and "ahead on 1/2 (magic)" in claim["fedgca"]


def test_weighting_table_from_report_tables(tmp_path):
    d = tmp_path / "weights_align"
    d.mkdir()
    (d / "iid_weights_align_client0.csv").write_text(
        "dataset,backend,K*,inverse,uniform,Δ (pts)\n"
        "academic,GMM,10,65.50 ± 0.20,64.00 ± 0.30,-1.50\n"  # paper 65.29 / 65.12
        "magic,GMM,40,70.00 ± 1.00,71.00 ± 1.00,+1.00\n")  # K = 40 is not the paper's K* = 80: not this cell
    more = _more(tmp_path)
    row = {r["dataset"]: r for r in more["weighting"]}
    assert row["academic"]["inverse_delta"] == pytest.approx(65.50 - 65.29)
    assert row["academic"]["inverse_verdict"] == "within"
    assert row["academic"]["uniform_delta"] == pytest.approx(64.00 - 65.12)
    assert row["academic"]["uniform_verdict"] == "outside"
    assert row["magic"]["inverse_verdict"] == "not run"
    claim = next(c for c in more["more_claims"] if c["claim"].startswith("weighting"))
    assert claim["status"] == "reproduced" and claim["fedgca"].startswith("1/1 (academic)")


def test_communication_table(tmp_path):
    from fedgca.paper.scorecard_tables import reference

    rows = []
    for d, u, up in (("academic", 390, 0.024), ("bank", 3460, 0.211)):
        for k in (10, 20, 40, 80):
            ref = {r["dataset"]: r for r in reference("communication")}[d]
            total = float(ref[f"gca_k{k}_mib"]) if d == "academic" else float(ref[f"gca_k{k}_mib"]) - 0.031
            rows.append({"dataset": d, "k": k, "U": u, "gca_up_mib": up, "fl_total_mib": float(ref["fl_total_mib"]),
                         "gca_total_mib": total})
    row = {r["dataset"]: r for r in _more(tmp_path, rows)["communication"]}
    assert row["academic"]["verdict"] == "equal" and row["academic"]["fedgca_U"] == 390
    assert row["bank"]["verdict"] == "differs" and row["bank"]["paper_U"] == 3960
    assert row["magic"]["verdict"] == "not run"


def test_the_scorecard_renders_every_table(fixture_dir, tmp_path):
    out = scorecard.write_scorecard(fixture_dir, tmp_path / "SCORECARD.md", data_dir=tmp_path / "no-data")
    text = out.read_text()
    for title in ("GCA accuracy by K and clustering backend (IID)", "GCA-GMM accuracy by K (non-IID)",
                  "Alignment weighting at K*", "Non-IID comparison", "Communication per round"):
        assert f"## {title}" in text
    assert (tmp_path / "SCORECARD_tables.csv").read_text().startswith("table,dataset,item,k,paper_mean")


def test_a_data_variant_is_scored_as_its_datasets_cells(fixture_dir, tmp_path):
    """`fedgca scorecard DIR --as bank-tail=bank`: only the variant's runs, counted as bank's cells (paper: bank GCA
    51.18 ± 0.06, Single-Client 50.74 ± 0.06); the preset's own runs and other datasets' stay out; its communication
    row comes from a run's recorded shard sizes (20 shards of 1,983 rows → U = 3,960, the paper's)."""
    for seed, g, s in ((100, 0.5110, 0.5070), (200, 0.5120, 0.5080), (300, 0.5130, 0.5075)):
        own = {"data_digest": "8120e6aa55b45f11", "clients": 20, "rho": 0.1}  # as an own-data run records them
        _summary(fixture_dir, "bank-tail", "gca", seed, g, **own)
        _summary(fixture_dir, "bank-tail", "single", seed, s, **own)
        _summary(fixture_dir, "bank", "gca", seed, 0.57)  # the preset's runs: not the variant's
    run = next(fixture_dir.glob("bank-tail-gca-10-100-*"))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "clients": 20, "rho": 0.1, "input_shape": [15],
                                                  "client_sizes": [1983] * 20}))
    out = scorecard.write_scorecard(fixture_dir, tmp_path / "card" / "S.md", variant=("bank-tail", "bank"))
    text = out.read_text()
    assert "| bank | GCA (K*=10) | 51.18 ± 0.06 | 51.20 ± 0.10 | +0.02 | within |" in text
    assert "| bank | Single-Client | 50.74 ± 0.06 | 50.75 ± 0.05 | +0.01 | within |" in text
    assert "academic" not in text.split("## The paper's claims")[0]  # the variant's dataset only
    assert "| bank | 3960 / 3960 | 0.242 / 0.242 | 6.587 / 6.587 |" in text and "--as bank-tail=bank" in text
    data = scorecard.build(fixture_dir, variant=("bank-tail", "bank"))
    assert [r["dataset"] for r in data["table"]] == ["bank"] * 7
    assert {r["dataset"] for r in data["more"]["noniid"]} == {"bank"}
    plain = scorecard.build(fixture_dir)  # without --as the variant is own data: in no cell and no claim
    assert "bank-tail" not in json.dumps(plain, default=str)
    assert {r["dataset"] for r in plain["table"] if r["fedgca_mean"] is not None} == {"academic", "bank"}
    # A report of the variant's runs (runs.csv and comm.csv, no summaries) scores the same, communication row included.
    report.write_report(fixture_dir, tmp_path / "rep", plots=False)
    again = scorecard.write_scorecard(tmp_path / "rep", tmp_path / "rep" / "S.md", variant=("bank-tail", "bank"))
    assert again.read_text().split("\n", 3)[3] == text.split("\n", 3)[3]


def test_the_committed_scorecard_regenerates_byte_identically(data_dir, tmp_path, monkeypatch):
    """`fedgca scorecard docs/results --data-dir ../shared/data` rewrites the committed SCORECARD files as they are
    (issue #33): every figure in them comes from the committed result tables, by today's code."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    out = scorecard.write_scorecard(Path("docs/results"), tmp_path / "SCORECARD.md", data_dir=data_dir)
    for name in ("SCORECARD.md", "SCORECARD.csv", "SCORECARD_tables.csv"):
        assert (out.parent / name).read_text() == (repo / "docs/results" / name).read_text(), name
