"""DP release of own data's preprocessing statistics (issue #43 item 3, docs/DP.md mechanism 0): the mechanism's
sensitivity by brute force and its noise, the whole composed ε recomputed with dp-accounting apart from fedgca's
accountant, one answer in both drivers (refused without --dp-stats-sigma), and Flower over per-site files equal to
the simulator."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
from site_files import write_sites

from fedgca.cli.main import main
from fedgca.data import DataError, Schema, infer_schema
from fedgca.data.encoding import local_stats, released_stats
from fedgca.data.source import open_source
from fedgca.protocol import dp
from fedgca.protocol.gca import upload_size

# bank's numeric columns with bounds a practitioner knows without reading the rows (the data's documentation)
RANGES = {"age": [18, 100], "balance": [-10000, 100000], "day": [1, 31], "duration": [0, 5000],
          "campaign": [1, 70], "pdays": [-1, 900], "previous": [0, 300]}


@pytest.fixture(scope="module")
def sites(tmp_path_factory, data_dir):
    """Three sites' files (bank's rows of three jobs, 1,200 each), a per-site schema with public ranges."""
    root = tmp_path_factory.mktemp("dpsites")
    site_dir = write_sites(root, data_dir, 1200)
    schema, _ = infer_schema(site_dir / "admin.csv", label="y", normal="no")
    d = schema.with_test("per-site").to_dict()
    for f in d["features"]:
        if f["name"] in RANGES:
            f["range"] = RANGES[f["name"]]
    (root / "schema.json").write_text(json.dumps(d))
    del d["features"][0]["range"]
    (root / "no_range.json").write_text(json.dumps(d))
    return site_dir, root


def _args(sites, method: str, out: Path, *extra: str, schema: str = "schema.json") -> list[str]:
    site_dir, root = sites
    return ["--data", str(site_dir), "--schema", str(root / schema), "--partition", "natural", "--method", method,
            "--rounds", "2", "--recon-epochs", "1", "--align-epochs", "1", "--local-epochs", "1",
            "--val-fraction", "0.1", "--threshold", "val-quantile", "--out", str(out), *extra]


# ---------------------------------------------------------------------------- the mechanism


def test_one_replaced_row_moves_the_sums_by_at_most_the_accounted_sensitivity():
    """Brute force over random and extreme rows: ||ΔΣu|| ≤ 2√d and ||ΔΣu²|| ≤ √d, the bounds the events use."""
    rng = np.random.default_rng(0)
    d = 6
    low, high = np.full(d, -3.0), np.array([1.0, 2.0, 5.0, 10.0, 4.0, 3.5])
    zero = np.random.default_rng(1)  # σ = 0 would be refused by the options; a tiny σ shows the clipped sums
    for trial in range(300):
        X = rng.normal(0, 4, (20, d))
        Y = X.copy()
        Y[trial % 20] = rng.choice([-1e6, 1e6], d) if trial % 3 == 0 else rng.normal(0, 50, d)
        u = [np.clip((Z - (high + low) / 2) / ((high - low) / 2), -1, 1) for Z in (X, Y)]
        assert np.linalg.norm(u[0].sum(0) - u[1].sum(0)) <= dp.STATS_SUM_SENSITIVITY * math.sqrt(d) + 1e-9
        assert np.linalg.norm((u[0] ** 2).sum(0) - (u[1] ** 2).sum(0)) <= \
            dp.STATS_SQUARES_SENSITIVITY * math.sqrt(d) + 1e-9
    X = rng.uniform(-3, 1, (500, d))
    n, mean, m2 = dp.private_column_stats(X, low, high, 1e-12, zero)
    assert n == 500 and np.allclose(mean, X.mean(0)) and np.allclose(np.diag(m2) / n, X.var(0), rtol=1e-6)
    assert np.count_nonzero(m2 - np.diag(np.diag(m2))) == 0  # only the diagonal is released


def test_noise_of_the_release_has_the_accounted_scale():
    """σ_s·√d per coordinate of the sums: measured over 4,000 releases of one dataset (means · n)."""
    d, n, sigma = 4, 50, 0.7
    X = np.zeros((n, d))
    low, high = np.full(d, -1.0), np.full(d, 1.0)
    sums = np.array([dp.private_column_stats(X, low, high, sigma, np.random.default_rng(s))[1] * n
                     for s in range(4000)])
    assert abs(sums.std() / (sigma * math.sqrt(d)) - 1) < 0.05 and abs(sums.mean()) < 0.1


def test_the_plain_path_releases_the_exact_moments(sites):
    X = np.random.default_rng(3).normal(size=(40, 3))
    plain = released_stats(X, None, stats_sigma=None, seed=1, site=0)
    for k, v in local_stats(X).items():
        assert np.array_equal(plain[k], v)


def test_bounds_come_from_the_schema_or_the_run_stops_in_one_line(sites):
    _, root = sites
    low, high = Schema.load(root / "schema.json").public_bounds()
    schema = Schema.load(root / "schema.json")
    for f, lo, hi in zip(schema.features, low, high):
        assert (lo, hi) == (tuple(RANGES[f.name]) if f.type == "numeric" else (0.0, float(len(f.categories))))
    with pytest.raises(DataError, match="'age' need a public \"range\""):
        Schema.load(root / "no_range.json").public_bounds()
    with pytest.raises(DataError, match="low < high"):
        Schema.from_dict({"features": [{"name": "a", "range": [2, 1]}]})
    with pytest.raises(DataError, match="only numeric"):
        Schema.from_dict({"features": [{"name": "a", "type": "categorical", "range": [0, 1]}]})


# ---------------------------------------------------------------------------- accounting


def _independent_epsilon(sizes, cfg, sigma, stats_sigma, delta):
    """The whole run's ε written out from SPEC and docs/DP.md with dp-accounting's own defaults (its RDP orders,
    its events), none of fedgca's accountant code: mechanism 0 once, then per round the DP-SGD steps and the
    subsampled code release, composed over R rounds; the worst client."""
    eps = []
    for n in sizes:
        b = min(cfg["batch_size"], n)
        steps = (cfg["recon_epochs"] + cfg["align_epochs"]) * math.ceil(n / b)
        m = upload_size(n, cfg["rho"])
        per_round = dpa.ComposedDpEvent([
            dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma / 2)), steps),
            dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(sigma / 2))])
        whole = dpa.ComposedDpEvent([dpa.GaussianDpEvent(stats_sigma / 2), dpa.GaussianDpEvent(stats_sigma),
                                     dpa.SelfComposedDpEvent(per_round, cfg["rounds"])])
        acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(whole)
        eps.append(acc.get_epsilon(delta))
    return max(eps)


@pytest.fixture(scope="module")
def dp_run(sites, tmp_path_factory):
    out = tmp_path_factory.mktemp("dprun")
    assert main(["run", "--threads", "1", *_args(sites, "dpgca", out / "sim", "--target-epsilon", "8",
                                                  "--dp-stats-sigma", "4")]) == 0
    return out


def test_summary_accounts_the_statistics_and_dp_accounting_recomputes_the_whole_epsilon(dp_run):
    s = json.loads((dp_run / "sim" / "summary.json").read_text())
    cfg = json.loads((dp_run / "sim" / "config.json").read_text())
    rec = s["dp"]
    assert rec["stats_sigma"] == 4.0 and "not_covered" not in rec and "preprocessing statistics" in rec["label"]
    assert 0 < rec["epsilon_preprocessing_only"] < rec["epsilon"] <= 8.0
    independent = _independent_epsilon(s["client_sizes"], cfg, rec["grad_sigma"], 4.0, rec["delta"])
    assert independent == pytest.approx(rec["epsilon"], rel=0.01)
    stats_alone = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    stats_alone.compose(dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0), dpa.GaussianDpEvent(4.0)]))
    assert stats_alone.get_epsilon(rec["delta"]) == pytest.approx(rec["epsilon_preprocessing_only"], rel=0.01)


def test_a_target_the_statistics_alone_exceed_is_refused():
    scheds = [dp.ClientSchedule(1000, 50, 2, 100, 5)]
    with pytest.raises(ValueError, match="preprocessing statistics alone"):
        dp.calibrate(scheds, dp.RecordDP(stats_sigma=0.3), 1e-5, 1.0)


# ---------------------------------------------------------------------------- both drivers


def test_the_simulator_refuses_a_dp_method_on_per_site_statistics_as_flower_does(sites, tmp_path, capsys):
    """Before: the simulator ran and its ε label claimed all a client releases; now one line, as the ServerApp."""
    assert main(["run", *_args(sites, "dpgca", tmp_path / "a", "--target-epsilon", "8")]) == 2
    err = capsys.readouterr().err
    assert "ε would not cover" in err and "--dp-stats-sigma" in err and len(err.strip().splitlines()) == 1
    assert main(["run", *_args(sites, "dpgca", tmp_path / "b", "--target-epsilon", "8", "--dp-stats-sigma", "4",
                               schema="no_range.json")]) == 2
    assert "'age' need a public \"range\"" in capsys.readouterr().err


def test_stats_sigma_is_refused_where_the_encoding_is_not_fitted_from_sites(tmp_path, data_dir, capsys):
    assert main(["run", "--dataset", "magic", "--data-dir", str(data_dir), "--method", "dpgca", "--rounds", "1",
                 "--dp-stats-sigma", "4", "--val-fraction", "0.1", "--threshold", "val-quantile",
                 "--out", str(tmp_path / "m")]) == 2
    assert "built-in 'magic'" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["dpgca", "dpsgd-fedavg"])
def test_dp_on_flower_over_site_files_equals_the_simulator(sites, dp_run, tmp_path, method):
    """The nodes release the same noised statistics as the simulator's per-site fit (same function, same draws):
    the same preprocessing, the same accounting and the same metrics (a DP client on Flower does not send its
    training error, so that column is the one difference)."""
    extra = ("--target-epsilon", "8", "--dp-stats-sigma", "4")
    if method == "dpgca":
        sim = dp_run / "sim"
    else:
        sim = tmp_path / "sim"
        assert main(["run", "--threads", "1", *_args(sites, method, sim, *extra)]) == 0
    assert main(["flower", "simulate", *_args(sites, method, tmp_path / "flower", *extra)]) == 0
    fl = tmp_path / "flower"
    assert json.loads((fl / "summary.json").read_text())["dp"] == json.loads((sim / "summary.json").read_text())["dp"]
    site_dir, root = sites
    ds = open_source(site_dir, Schema.load(root / "schema.json")).load(100, stats_sigma=4.0)
    assert json.loads((fl / "preprocessor.json").read_text()) == ds.preprocessor.to_dict()  # every float equal
    assert ds.preprocessor.to_dict() != open_source(site_dir, Schema.load(root / "schema.json")).load(
        100).preprocessor.to_dict()  # (and the noise is there)
    rows = [list(csv.DictReader((d / "metrics.csv").open())) for d in (sim, fl)]
    assert len(rows[0]) == len(rows[1]) > 0
    for a, b in zip(*rows):
        assert {k: v for k, v in a.items() if k != "train_error"} == {k: v for k, v in b.items() if k != "train_error"}



def test_a_node_with_an_empty_cell_refuses_before_releasing_anything(sites, tmp_path):
    """Issue #50 item 3: under the schema's default `missing: impute`, a node's file with one empty numeric cell made
    its release NaN (and the server then left the site out: whether it took part hung on one record). Now the node's
    `query.stats` handler refuses before computing anything, naming no count or column; with the cell filled it
    releases finite statistics."""
    import pandas as pd
    from flwr.app import Context, Message, Metadata, RecordDict

    from fedgca.config import RunConfig
    from fedgca.flower import client_app
    from fedgca.flower.records import CONFIG, STATS, config_record, numpy_dict

    site_dir, root = sites
    frame = pd.read_csv(site_dir / "admin.csv", sep=";")
    frame.loc[frame.index[frame["y"] == "no"][3], "age"] = None  # one empty cell in a training normal
    frame.to_csv(tmp_path / "holed.csv", sep=";", index=False)
    cfg = RunConfig("holed", method="dpgca", partition="natural", clients=3, k=2, rho=0.5, val_fraction=0.1,
                    threshold="val-quantile", dp_stats_sigma=4.0, data_digest="-")

    def ask(path: Path):
        ctx = Context(run_id=1, node_id=7, node_config={"data-path": str(path), "schema-path": str(root / "schema.json"),
                                                        "client-id": 0}, state=RecordDict(), run_config={})
        msg = Message(RecordDict({CONFIG: config_record(cfg, round=-1)}),
                      metadata=Metadata(run_id=1, message_id="m", src_node_id=1, dst_node_id=7, reply_to_message_id="",
                                        group_id="", created_at=0.0, ttl=60.0, message_type="query.stats"))
        return client_app.stats(msg, ctx)

    with pytest.raises(DataError, match="empty or non-finite numeric cells.*nothing was released") as err:
        ask(tmp_path / "holed.csv")
    assert "age" not in str(err.value)
    released = numpy_dict(ask(site_dir / "admin.csv").content[STATS])
    assert all(np.isfinite(v).all() for v in released.values())
    with pytest.raises(DataError, match="nothing was released"):  # the one function both drivers release through
        released_stats(np.array([[1.0, np.nan], [2.0, 3.0]]), Schema.load(root / "schema.json"), stats_sigma=None,
                       seed=100, site=0)


def test_a_refused_flower_run_writes_nothing(sites, tmp_path, capsys):
    """Issue #50 item 4: `flower simulate` refusing a DP method without --dp-stats-sigma left config.json,
    schema.json, messages.jsonl and rounds.jsonl behind; a non-finite σ_s failed later without naming the option."""
    out = tmp_path / "refused"
    assert main(["flower", "simulate", *_args(sites, "dpgca", out, "--target-epsilon", "8")]) == 2
    assert "--dp-stats-sigma" in capsys.readouterr().err and not out.exists()
    for bad in ("nan", "inf", "-1", "0"):
        for driver in (["run"], ["flower", "simulate"]):
            assert main([*driver, *_args(sites, "dpgca", out, "--dp-stats-sigma", bad)]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("fedgca: error: --dp-stats-sigma must be"), err
            assert not out.exists()
