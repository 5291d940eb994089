"""Damaged and foreign array files (issue #50 item 1): every reader answers with one DataError naming the file, every
command with one line, exit 2 and nothing written, and `fedgca bench` reports the file and runs the others."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from fedgca.cli.main import main
from fedgca.data import DataError, infer_schema
from fedgca.data.readers import read_array_file, read_file, read_training_file
from fedgca.data.source import open_source

CASES = ("truncated.npz", "flipped.npz", "flipped.mat", "random.npz", "random.mat", "truncated.mat", "pickled.npz")


@pytest.fixture(scope="module")
def files(tmp_path_factory, data_dir):
    """WBC's X, y saved as a compressed .npz and .mat, and each damaged the way a download or a disk damages it."""
    root = tmp_path_factory.mktemp("damaged")
    with np.load(data_dir / "adbench" / "42_WBC.npz") as f:
        X, y = f["X"], f["y"]
    np.savez_compressed(root / "good.npz", X=X, y=y)
    sio.savemat(root / "good.mat", {"X": X, "y": y.reshape(-1, 1)}, do_compression=True)
    npz, mat = (root / "good.npz").read_bytes(), (root / "good.mat").read_bytes()

    def flipped(b: bytes, at: int) -> bytes:
        out = bytearray(b)
        out[at] ^= 0xFF
        return bytes(out)

    noise = np.random.default_rng(0).bytes(5000)
    (root / "truncated.npz").write_bytes(npz[: len(npz) // 2])
    (root / "flipped.npz").write_bytes(flipped(npz, len(npz) // 3))  # inside X's deflate stream
    (root / "flipped.mat").write_bytes(flipped(mat, len(mat) // 2))
    (root / "truncated.mat").write_bytes(mat[: len(mat) // 2])
    (root / "random.npz").write_bytes(noise)
    (root / "random.mat").write_bytes(noise)
    np.savez(root / "pickled.npz", X=np.array([object()], dtype=object), y=np.array([1]))
    return root


@pytest.mark.parametrize("case", CASES)
def test_every_reader_names_the_file_in_one_data_error(files, case):
    path = files / case
    readers = (lambda: read_array_file(path), lambda: read_file(path, None), lambda: read_training_file(path, None),
               lambda: infer_schema(path, label="y", normal="0"), lambda: open_source(path).load(100))
    for read in readers:
        with pytest.raises(DataError) as err:
            read()
        msg = str(err.value)
        assert case in msg and "\n" not in msg and "allow_pickle" not in msg, msg


@pytest.mark.parametrize("good", ["good.npz", "good.mat"])
def test_no_truncation_or_flipped_bit_lets_another_exception_escape(files, tmp_path, good):
    """300 random truncations and single-bit flips of a good file: each is read or is a DataError, nothing else."""
    data, rng = (files / good).read_bytes(), random.Random(good)
    target = tmp_path / good
    outcomes = {"read": 0, "refused": 0}
    for trial in range(300):
        if trial % 2:
            damaged = data[: rng.randrange(len(data))]
        else:
            b = bytearray(data)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            damaged = bytes(b)
        target.write_bytes(damaged)
        try:
            read_array_file(target)
            outcomes["read"] += 1
        except DataError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 200, outcomes  # compressed: nearly every damage shows


def _one_line(capsys, name: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and name in err and err.startswith("fedgca: error:"), err
    return err


@pytest.mark.parametrize("case", ["truncated.npz", "flipped.npz", "flipped.mat", "random.npz"])
def test_commands_refuse_a_damaged_file_in_one_line_and_write_nothing(files, tmp_path, capsys, case):
    path = str(files / case)
    out = tmp_path / "run"
    assert main(["run", "--data", path, "--method", "single", "--rounds", "1", "--out", str(out)]) == 2
    _one_line(capsys, case)
    assert not out.exists()
    assert main(["schema", "infer", path, "--label", "y", "--normal", "0", "--out", str(tmp_path / "s.json")]) == 2
    _one_line(capsys, case)
    assert not (tmp_path / "s.json").exists()


def test_score_refuses_a_damaged_input_in_one_line(files, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "--data", str(files / "good.npz"), "--method", "single", "--rounds", "1",
                 "--out", str(run)]) == 0
    capsys.readouterr()
    for case in ("truncated.npz", "flipped.mat", "random.npz"):
        scores = tmp_path / f"{case}.csv"
        assert main(["score", "--run", str(run), "--client", "0", "--input", str(files / case),
                     "--output", str(scores)]) == 2
        _one_line(capsys, case)
        assert not scores.exists()


def test_bench_reports_a_damaged_file_in_one_line_and_runs_the_others(files, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("good.npz", "truncated.npz", "flipped.mat", "random.npz", "pickled.npz"):
        (suite / name).write_bytes((files / name).read_bytes())
    out = tmp_path / "bench"
    assert main(["bench", str(suite), "--methods", "single", "--seeds", "100", "--rounds", "1", "--peers", "none",
                 "--workers", "0", "--out", str(out)]) == 0
    plan = json.loads((out / "bench.json").read_text())
    errors = {f["file"]: f["error"] for f in plan["files"] if "error" in f}
    assert set(errors) == {"truncated.npz", "flipped.mat", "random.npz", "pickled.npz"}
    assert all(str(tmp_path) not in e and name in e for name, e in errors.items())  # the file's name, no path
    assert len(plan["runs"]) == 1 and (out / "runs" / plan["runs"][0]["key"] / "summary.json").exists()
    report = (out / "report" / "report.md").read_text()
    for name in errors:
        assert sum(name in line and "skipped" in line for line in report.splitlines()) == 1


def test_bench_report_names_imputed_cells(data_dir, tmp_path):
    """Issue #50 item 5: a file whose empty cells were imputed says so in the bench's file table and files.csv."""
    with np.load(data_dir / "adbench" / "42_WBC.npz") as f:
        X, y = f["X"].astype(np.float64), f["y"]
    X[[3, 5, 9], 0] = np.nan
    X[7, 2] = np.nan
    suite = tmp_path / "suite"
    suite.mkdir()
    np.savez(suite / "holes.npz", X=X, y=y)
    out = tmp_path / "bench"
    assert main(["bench", str(suite), "--methods", "single", "--rounds", "1", "--peers", "none", "--workers", "0",
                 "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text())["files"][0]
    summary = json.loads(next((out / "runs").glob("*/summary.json")).read_text())["data"]
    cells = sum(summary.get("imputed_training_cells", {}).values()) + summary.get("imputed_test_cells", 0)
    assert record["imputed_cells"] == cells == 4
    row = next(line for line in (out / "report" / "report.md").read_text().splitlines() if line.startswith("| holes"))
    assert "4 empty cell(s) imputed in" in row
    assert "imputed_cells" in (out / "report" / "files.csv").read_text().splitlines()[0]


def test_infer_schema_of_an_array_file_is_its_own(files):
    schema, notes = infer_schema(Path(files / "good.npz"), label="y", normal="0")
    assert schema.label == "y" and len(schema.features) == 9 and "numeric features" in notes[0]
    with pytest.raises(DataError, match="label is its array 'y'"):
        infer_schema(files / "good.mat", label="class", normal="0")


def test_every_float_option_is_checked_before_own_data_is_read(files, tmp_path, capsys):
    """Issue #50 item 4: `--dp-stats-sigma nan` used to pass validation and fail later in the data's words; every
    float option of own data's run is now refused first, by name, with nothing written."""
    import dataclasses

    from fedgca.config import RunConfig, option_name

    floats = [f.name for f in dataclasses.fields(RunConfig) if "float" in str(f.type) and not f.metadata.get("derived")]
    assert {"rho", "lr", "alpha", "quantile", "dp_stats_sigma", "target_epsilon"} <= set(floats)
    out = tmp_path / "run"
    for name in floats:
        for bad in ("nan", "inf"):
            assert main(["run", "--data", str(files / "good.npz"), option_name(name), bad, "--out", str(out)]) == 2
            err = capsys.readouterr().err.strip()
            assert err == f"fedgca: error: {option_name(name)} must be a finite number, got {bad}", err
            assert not out.exists()
