"""Own data on Flower (issue #31): per-site files, the per-site test split, and the two drivers agreeing —
`fedgca flower simulate` equals the simulator's metrics.csv byte for byte, and a loopback deployment
(SuperLink + SuperNodes as processes) over the same files computes the simulator's numbers (that deployment is
test_flower_deploy.py's: one deployment serves all its checks)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from site_files import site_files

from fedgca.cli.main import main
from fedgca.data import Schema, infer_schema
from fedgca.data.source import open_source


@pytest.fixture(scope="module")
def sites(tmp_path_factory, data_dir):
    """Three sites' files (bank's rows of three jobs, 2,000 each; the job column left out) and a per-site schema."""
    return site_files(tmp_path_factory.mktemp("sites"), data_dir)


def _args(sites, method: str, out: Path) -> list[str]:
    site_dir, schema = sites
    return ["--data", str(site_dir), "--schema", str(schema), "--partition", "natural", "--method", method,
            "--rounds", "2", "--recon-epochs", "2", "--align-epochs", "1", "--local-epochs", "2", "--out", str(out)]


@pytest.mark.parametrize("method", ["gca", "fedavg", "secagg-fedavg"])
def test_flower_simulation_over_site_files_equals_the_simulator(sites, tmp_path, method):
    assert main(["run", "--threads", "1", *_args(sites, method, tmp_path / "sim")]) == 0
    assert main(["flower", "simulate", *_args(sites, method, tmp_path / "flower")]) == 0
    assert (tmp_path / "sim" / "metrics.csv").read_bytes() == (tmp_path / "flower" / "metrics.csv").read_bytes()
    # each node wrote the detector the simulator saved for its site: it reads raw rows alike and scores them alike
    from fedgca.detector import load_client_detector

    raw = pd.read_csv(sites[0] / "services.csv", sep=";").head(50)
    for i in range(3):
        node, saved = load_client_detector(tmp_path / "flower", i), load_client_detector(tmp_path / "sim", i)
        assert node.meta["round"] == saved.meta["round"] and node.threshold_ == saved.threshold_
        assert (node.decision_function(raw) == saved.decision_function(raw)).all()


def test_per_site_split_draws_each_site_alone(sites):
    """The simulator's per-site test rows are exactly what each node draws from its own file."""
    from fedgca.data.prepare import site_split
    from fedgca.flower.owndata import read_table

    site_dir, schema_path = sites
    schema = Schema.load(schema_path)
    ds = open_source(site_dir, schema).load(100)
    for i, name in enumerate(sorted(p.stem for p in site_dir.iterdir())):
        t = read_table(site_dir / f"{name}.csv", schema)
        _, test = site_split(t.labels, schema, 100, i, name)
        assert (ds.test_sites == i).sum() == len(test)
        assert ds.test_y[ds.test_sites == i].sum() == (t.labels == "yes").sum()


def _with_tiny_site(sites, root: Path) -> Path:
    """The three sites plus a fourth of 7 normal rows and no anomaly (adult's 'Never-worked' by workclass)."""
    import shutil

    site_dir, _ = sites
    out = root / "sites4"
    shutil.copytree(site_dir, out)
    admin = pd.read_csv(site_dir / "admin.csv", sep=";")
    admin[admin["y"] == "no"].head(7).to_csv(out / "tiny.csv", sep=";", index=False)
    return out


def test_small_sites_drop_drops_before_the_per_site_checks(sites, tmp_path, capsys):
    """Issue #40 item 6(a): --small-sites drop with the per-site split leaves the tiny site out (its rows, its test
    set) instead of stopping on its missing anomalies; without drop the run still refuses, naming the site."""
    site_dir, schema = sites
    four = _with_tiny_site(sites, tmp_path)
    args = ["--data", str(four), "--schema", str(schema), "--partition", "natural", "--method", "gca",
            "--rounds", "1", "--recon-epochs", "1", "--align-epochs", "1"]
    assert main(["run", *args, "--out", str(tmp_path / "refused")]) == 2
    assert "site 'tiny'" in capsys.readouterr().err
    assert main(["run", *args, "--small-sites", "drop", "--out", str(tmp_path / "dropped")]) == 0
    import json

    summary = json.loads((tmp_path / "dropped" / "summary.json").read_text())
    assert summary["clients"] == 3 and summary["data"]["dropped_sites"] == ["tiny"]
    # the three kept sites train and are evaluated exactly as without the tiny one
    assert main(["run", *args[:1], str(site_dir), *args[2:], "--small-sites", "drop", "--out", str(tmp_path / "three")]) == 0
    assert (tmp_path / "three" / "metrics.csv").read_bytes() == (tmp_path / "dropped" / "metrics.csv").read_bytes()


def test_flower_simulate_refuses_a_shared_test_split_over_site_files(sites, tmp_path, capsys):
    """Issue #40 item 6(b): a 'balanced' split draws one test set from all sites, which no node holds; Flower ran
    another federation than `fedgca run` without a word. Now: one line saying to use per-site, nothing written."""
    site_dir, schema = sites
    args = ["--data", str(site_dir), "--schema", str(schema), "--test-split", "balanced", "--partition", "natural",
            "--method", "gca", "--rounds", "1", "--out", str(tmp_path / "flower")]
    assert main(["flower", "simulate", *args]) == 2
    err = capsys.readouterr().err
    assert "--test-split per-site" in err and len(err.strip().splitlines()) == 1


ADULT = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation", "relationship",
         "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income"]


@pytest.fixture(scope="module")
def adult_by_workclass(tmp_path_factory, data_dir):
    """Issue #50 item 2's layout: adult split by workclass into 8 site files (the first 400 rows of each). Two sites
    hold no anomaly (Never-worked, Without-pay), one has more anomalies than normals, so no training rows beside its
    own test set (Self-emp-inc); Never-worked sorts before three kept sites, so a site's place among the files is
    not its client id."""
    root = tmp_path_factory.mktemp("adult")
    raw = pd.read_csv(data_dir / "adult" / "adult.data", header=None, names=ADULT, skipinitialspace=True)
    site_dir = root / "sites"
    site_dir.mkdir()
    for work, rows in raw[raw["workclass"] != "?"].groupby("workclass"):
        rows.drop(columns=["workclass"]).head(400).to_csv(site_dir / f"{work}.csv", index=False)
    schema, _ = infer_schema(site_dir / "Private.csv", label="income", normal="<=50K")
    schema.with_test("per-site").save(root / "schema.json")
    return site_dir, root / "schema.json"


def test_flower_over_site_files_drops_the_sites_the_simulator_drops(adult_by_workclass, tmp_path):
    """Issue #50 item 2: with --small-sites drop, `flower simulate` runs the simulator's federation — the same five
    sites as clients, the same metrics.csv byte for byte, the same summary `data` block and test rows."""
    import json

    site_dir, schema = adult_by_workclass
    args = ["--data", str(site_dir), "--schema", str(schema), "--partition", "natural", "--small-sites", "drop",
            "--method", "gca", "--rounds", "2", "--recon-epochs", "1", "--align-epochs", "1"]
    assert main(["run", "--threads", "1", *args, "--out", str(tmp_path / "sim")]) == 0
    assert main(["flower", "simulate", *args, "--out", str(tmp_path / "flower")]) == 0
    sim, fl = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("sim", "flower"))
    assert sim["clients"] == fl["clients"] == 5
    assert sim["data"]["dropped_sites"] == ["Never-worked", "Self-emp-inc", "Without-pay"]
    assert fl["data"] == sim["data"]
    for name in ("metrics.csv", "test_rows.csv"):
        assert (tmp_path / "sim" / name).read_bytes() == (tmp_path / "flower" / name).read_bytes()


def test_flower_over_site_files_refuses_what_no_node_can_hold(adult_by_workclass, tmp_path, capsys):
    """A merged client spans several files and an IID partition pools them: no node holds either, and neither is a
    per-site federation — both drivers refuse in the same line, and nothing is written."""
    site_dir, schema = adult_by_workclass
    merge_dir = tmp_path / "sites"
    merge_dir.mkdir()
    for name, rows in (("Private", 400), ("Local-gov", 400), ("Federal-gov", 90), ("State-gov", 90)):
        pd.read_csv(site_dir / f"{name}.csv").head(rows).to_csv(merge_dir / f"{name}.csv", index=False)
    base = ["--data", str(merge_dir), "--schema", str(schema), "--method", "gca", "--rounds", "1"]
    for extra in (["--partition", "natural", "--small-sites", "merge"], ["--partition", "iid"]):
        said = []
        for driver in (["run"], ["flower", "simulate"]):
            out = tmp_path / f"{driver[-1]}-{extra[-1]}"
            assert main([*driver, *base, *extra, "--out", str(out)]) == 2
            said.append(capsys.readouterr().err.strip().splitlines())
            assert not out.exists()
        assert said[0] == said[1] and len(said[0]) == 1 and "--small-sites drop" in said[0][0], said
