"""Communication accounting (SPEC §7): `fedgca comm` measured from the built payloads."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import pytest

from fedgca.cli.main import main
from fedgca.experiments import comm

# Real files when present (the same default as conftest's data_dir); documented sizes otherwise.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
KEYS = {"dataset", "k", "C", "U", "D_z", "P", "gca_up_mib", "gca_down_mib", "gca_total_mib", "fl_total_mib",
        "reduction"}

# Issue 7 acceptance: per round in MiB at K = 10, GCA total / FL total.
EXPECTED_K10 = {
    "academic": (0.030, 3.567),
    "adult": (0.163, 6.508),
    "magic": (0.093, 2.902),
    "credit": (1.763, 19.207),
    "fashion_mnist": (2.393, 51.057),
    "cifar10": (2.735, 51.761),
}
EXPECTED_K80 = {"fashion_mnist": 6.586, "cifar10": 8.209}
EXPECTED_U = {"academic": 390, "adult": 2460, "magic": 1410, "credit": 28350, "cifar10": 500,
              "fashion_mnist": 600, "bank": 3460}


@pytest.fixture(scope="module")
def rows_json():
    """`fedgca comm --format json` for every dataset (data dir from the environment or shared/data)."""
    data = os.environ.get("FEDGCA_DATA_DIR", str(DEFAULT_DATA_DIR))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["comm", "--format", "json", "--data-dir", data])
    assert rc == 0
    return json.loads(buf.getvalue())


def _row(rows, dataset, k):
    (r,) = [r for r in rows if r["dataset"] == dataset and r["k"] == k]
    return r


def test_json_rows_and_keys(rows_json):
    assert {r["dataset"] for r in rows_json} == set(comm.KNOWN_TRAIN)
    assert len(rows_json) == 7 * 4  # one row per dataset and K ∈ {10, 20, 40, 80}
    for r in rows_json:
        assert set(r) == KEYS


@pytest.mark.parametrize("dataset", sorted(EXPECTED_K10))
def test_acceptance_k10(rows_json, dataset):
    r = _row(rows_json, dataset, 10)
    gca, fl = EXPECTED_K10[dataset]
    assert round(r["gca_total_mib"], 3) == gca
    assert round(r["fl_total_mib"], 3) == fl
    assert r["U"] == EXPECTED_U[dataset]


def test_acceptance_k80(rows_json):
    for dataset, gca in EXPECTED_K80.items():
        assert round(_row(rows_json, dataset, 80)["gca_total_mib"], 3) == gca


def test_bank_from_its_own_u(rows_json):
    r = _row(rows_json, "bank", 10)
    assert r["U"] == 3460 and r["D_z"] == 16 and r["C"] == 20
    expected = (4 * r["U"] * r["D_z"] + 4 * r["C"] * 10 * (r["D_z"] + 1)) / 2**20
    assert r["gca_total_mib"] == pytest.approx(expected, rel=1e-12)
    assert round(r["fl_total_mib"], 3) == 6.587


def test_formulas_and_reduction(rows_json):
    for r in rows_json:
        assert r["gca_up_mib"] * 2**20 == 4 * r["U"] * r["D_z"]
        assert r["gca_down_mib"] * 2**20 == 4 * r["C"] * r["k"] * (r["D_z"] + 1)
        assert r["fl_total_mib"] * 2**20 == 2 * 4 * r["C"] * r["P"]
        assert r["reduction"] == pytest.approx(1 - r["gca_total_mib"] / r["fl_total_mib"])
    assert _row(rows_json, "cifar10", 10)["P"] == 339_219
    assert _row(rows_json, "fashion_mnist", 10)["P"] == 334_609
    assert _row(rows_json, "cifar10", 10)["D_z"] == 1024
    assert _row(rows_json, "fashion_mnist", 10)["D_z"] == 784


def test_measured_payloads_for_other_inputs():
    """A non-preset federation: the built payloads still equal the formulas (measure asserts it too)."""
    inp = comm.Inputs("magic", clients=3, rho=0.3, input_shape=(5,), client_sizes=[101, 57, 9], source="test")
    rows = comm.measure(inp, ks=(7,))
    (r,) = rows
    assert r["U"] == 30 + 17 + 2
    assert r["gca_up_mib"] * 2**20 == 4 * r["U"] * 16
    assert r["gca_down_mib"] * 2**20 == 4 * 3 * 7 * 17
    assert r["P"] == 513 * 5 + 35_472


def test_documented_sizes_match_loader(data_dir):
    """KNOWN_TRAIN (used when files are absent) agrees with the real loader on the files we have."""
    for name in ("academic", "adult", "bank", "magic", "fashion_mnist"):
        loaded = comm.dataset_inputs(name, data_dir)
        assert loaded.source == "loaded"
        documented = comm.dataset_inputs(name, data_dir, use_loader=False)
        assert loaded.client_sizes == documented.client_sizes
        assert tuple(loaded.input_shape) == tuple(documented.input_shape)


def test_md_and_csv_formats(capsys, data_dir):
    assert main(["comm", "--dataset", "academic,magic", "--format", "md", "--data-dir", str(data_dir)]) == 0
    md = capsys.readouterr().out
    assert "| academic | 10 | 0.024 | 0.006 | 0.030 | 3.567 |" in md
    assert "U" in md and "D_z" in md
    assert main(["comm", "--dataset", "credit", "--k", "10,80", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["k"]) for r in rows] == [10, 80]
    assert round(float(rows[0]["gca_total_mib"]), 3) == 1.763


def test_unknown_dataset_is_a_one_line_error(capsys):
    assert main(["comm", "--dataset", "nope"]) == 2
    assert "unknown dataset" in capsys.readouterr().err
