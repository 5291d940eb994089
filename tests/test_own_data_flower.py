"""Own data on Flower (issue #31): per-site files, the per-site test split, and the two drivers agreeing —
`fedgca flower simulate` equals the simulator's metrics.csv byte for byte, and a loopback deployment
(SuperLink + SuperNodes as processes) over the same files computes the simulator's numbers."""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from fedgca.cli.main import main
from fedgca.data import Schema, infer_schema
from fedgca.sources import bind, open_source

JOBS = ("admin.", "services", "technician")


@pytest.fixture(scope="module")
def sites(tmp_path_factory, data_dir):
    """Three sites' files (bank's rows of three jobs, 2,000 each; the job column left out) and a per-site schema."""
    root = tmp_path_factory.mktemp("sites")
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")
    site_dir = root / "sites"
    site_dir.mkdir()
    for job in JOBS:
        raw[raw["job"] == job].drop(columns=["job"]).head(2000).to_csv(site_dir / f"{job.rstrip('.')}.csv",
                                                                         sep=";", index=False)
    schema, _ = infer_schema(site_dir / "admin.csv", label="y", normal="no")
    schema = schema.with_test("per-site")
    schema.save(root / "schema.json")
    return site_dir, root / "schema.json"


def _args(sites, method: str, out: Path) -> list[str]:
    site_dir, schema = sites
    return ["--data", str(site_dir), "--schema", str(schema), "--partition", "natural", "--method", method,
            "--rounds", "2", "--recon-epochs", "2", "--align-epochs", "1", "--local-epochs", "2", "--out", str(out)]


@pytest.mark.parametrize("method", ["gca", "fedavg"])
def test_flower_simulation_over_site_files_equals_the_simulator(sites, tmp_path, method):
    assert main(["run", "--threads", "1", *_args(sites, method, tmp_path / "sim")]) == 0
    assert main(["flower", "simulate", *_args(sites, method, tmp_path / "flower")]) == 0
    assert (tmp_path / "sim" / "metrics.csv").read_bytes() == (tmp_path / "flower" / "metrics.csv").read_bytes()


def test_per_site_split_draws_each_site_alone(sites):
    """The simulator's per-site test rows are exactly what each node draws from its own file."""
    from fedgca.data.own import site_split
    from fedgca.flower.owndata import read_table

    site_dir, schema_path = sites
    schema = Schema.load(schema_path)
    ds = open_source(site_dir, schema).load(100)
    for i, name in enumerate(sorted(p.stem for p in site_dir.iterdir())):
        t = read_table(site_dir / f"{name}.csv", schema)
        _, test = site_split(t.labels, schema, 100, i, name)
        assert (ds.test_sites == i).sum() == len(test)
        assert ds.test_y[ds.test_sites == i].sum() == (t.labels == "yes").sum()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_loopback_deployment_over_site_files(sites, tmp_path):
    """SuperLink and three SuperNodes on 127.0.0.1, each SuperNode reading one site's file: round 1 ends
    with the simulator's figures to the last digit."""
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, write_app
    from fedgca.flower.simulation import own_data_nodes
    from fedgca.simulation.runner import run

    site_dir, schema = sites
    source = open_source(site_dir, schema)
    cfg, dataset = bind({"method": "gca", "partition": "natural", "rounds": 1, "recon_epochs": 1, "align_epochs": 1},
                        source)
    sim = run(cfg, tmp_path / "sim", data_dir=source, dataset=dataset, progress=False)
    out = tmp_path / "out"
    nodes = list(own_data_nodes(source, tmp_path / "nodes").values())
    app = write_app(tmp_path / "app", to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False))
    with LocalDeployment(tmp_path / "deploy", nodes) as dep:
        assert dep.run(app, timeout=400).returncode == 0, dep.log("flwr-run.log")[-3000:]
    figures = ("accuracy", "auroc", "auprc", "train_error")

    def round_rows(path):
        return [{m: r[m] for m in figures} for r in csv.DictReader(path.open()) if r["phase"] == "round"]

    assert round_rows(out / "metrics.csv") == round_rows(tmp_path / "sim" / "metrics.csv")
    assert sim["clients"] == 3 and dataclasses.asdict(cfg)["data_digest"]
