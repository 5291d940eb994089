"""The scorecard's cells, Δ, verdicts and claims, from a small fixture of fabricated summaries.

The summaries are inputs to the comparison code, not results of any experiment.
"""
from __future__ import annotations

import json

import pytest

from fedgca.reporting import scorecard


def _summary(root, dataset, method, seed, peak, k=10, rounds=100, partition="iid"):
    d = root / f"{dataset}-{method}-{k}-{seed}-{rounds}-{partition}"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({
        "dataset": dataset, "method": method, "seed": seed, "rounds": rounds, "k": k, "backend": "gmm",
        "weights": "inverse", "partition": partition, "peak": {"accuracy": peak, "auroc": 0.7, "auprc": 0.7}}))


@pytest.fixture()
def fixture_dir(tmp_path):
    # academic (paper: GCA 64.92, FedAvg 64.88, Single 64.54): GCA 64.90 ± ..., FedAvg 66.50 (outside)
    for seed, g, a, s in ((100, 0.6490, 0.6650, 0.6450), (200, 0.6492, 0.6652, 0.6452), (300, 0.6494, 0.6648, 0.6454)):
        _summary(tmp_path, "academic", "gca", seed, g)
        _summary(tmp_path, "academic", "fedavg", seed, a)
        _summary(tmp_path, "academic", "single", seed, s)
    _summary(tmp_path, "academic", "gca", 100, 0.70, k=40)  # one seed at another K: not the paper's K*
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
