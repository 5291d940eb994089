"""Tiny real federations through the runner and the CLI (real files from ../shared/data)."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sklearn
import torch

from fedgca import provenance
from fedgca.cli.main import main as cli_main
from fedgca.config import RunConfig
from fedgca.simulation.runner import run

SUMMARY_KEYS = {"dataset", "method", "seed", "rounds", "clients", "input_dim", "param_count", "uploads_per_round",
                "bytes_up_per_round", "bytes_down_per_round", "wall_seconds", "code", "final", "peak", "selected"}


def tiny(dataset="academic", **kw):
    base = dict(dataset=dataset, rounds=2, recon_epochs=1, align_epochs=1, local_epochs=2, seed=100)
    base.update(kw)
    return RunConfig(**base)


def test_gca_run_writes_every_output(tmp_path, data_dir):
    s = run(tiny("magic"), tmp_path, data_dir=data_dir, progress=False)
    assert SUMMARY_KEYS <= set(s)
    for p in ("final", "peak", "selected"):
        assert {"accuracy", "auroc", "auprc"} <= set(s[p]) and 0 <= s[p]["accuracy"] <= 1
    assert s["input_dim"] == 5 and s["param_count"] == 38_037 and s["uploads_per_round"] == 1_410
    assert s["bytes_up_per_round"] == 4 * 1_410 * 16  # β·U·D_z, measured from the uploaded arrays
    assert s["bytes_down_per_round"] <= 4 * 10 * 80 * 17  # β·C·K·(D_z+1); fewer if components were empty
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [r["phase"] for r in rows] == ["recon", "round"] * 2
    assert json.loads((tmp_path / "config.json").read_text())["k"] == 80
    assert len(list((tmp_path / "clients").iterdir())) == 10
    assert s["selected"]["rule"].startswith("final round")
    assert s["code"]["torch"] == torch.__version__ and s["code"]["fedgca"]
    assert s["code"]["cpu"] == torch.backends.cpu.get_cpu_capability()  # the kernels' float order
    assert s["code"]["numpy"] == np.__version__ and s["code"]["scikit-learn"] == sklearn.__version__


def test_code_version_names_the_commit_of_a_checkout():
    git = provenance.code_version()["git"]
    head = subprocess.run(["git", "-C", str(Path(provenance.__file__).parent), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        assert git is None  # an installed wheel, or no git: nothing to name
    else:
        assert git.removesuffix("-dirty") == head.stdout.strip()


def test_code_version_is_the_commit_read_when_fedgca_was_loaded(monkeypatch):
    """A long run's summary names the code its process loaded, not what the checkout holds when it ends: git is
    not asked again."""
    def no_git(*args):
        raise AssertionError("git read after load")

    monkeypatch.setattr(provenance, "_git", no_git)
    provenance.code_version.cache_clear()
    try:
        assert provenance.code_version()["git"] == provenance._GIT_AT_LOAD
    finally:
        provenance.code_version.cache_clear()


def test_same_seed_same_numbers(tmp_path, data_dir):
    a = run(tiny(), tmp_path / "a", data_dir=data_dir, progress=False)
    b = run(tiny(), tmp_path / "b", data_dir=data_dir, progress=False)
    assert (tmp_path / "a" / "metrics.csv").read_text() == (tmp_path / "b" / "metrics.csv").read_text()
    assert a["final"] == b["final"]


def test_validation_selected_round(tmp_path, data_dir):
    s = run(tiny(val_fraction=0.2, rounds=3), tmp_path, data_dir=data_dir, progress=False)
    assert s["selected"]["rule"].startswith("round with the lowest")
    assert 1 <= s["selected"]["round"] <= 3


def test_partial_participation_records_participants(tmp_path, data_dir):
    run(tiny(participation=0.5), tmp_path, data_dir=data_dir, progress=False)
    comm = json.loads((tmp_path / "comm.json").read_text())
    assert all(len(c["participants"]) == 5 for c in comm)
    assert comm[0]["participants"] != comm[1]["participants"]  # resampled every round (for this seed)


def test_score_cli_on_raw_rows(tmp_path, data_dir, capsys):
    run(tiny("magic", rounds=1), tmp_path / "run", data_dir=data_dir, progress=False)
    raw = (Path(data_dir) / "magic" / "magic04.data").read_text().splitlines()
    new = tmp_path / "new.data"
    new.write_text("\n".join(raw[:20] + raw[-20:]) + "\n")
    out = tmp_path / "scores.csv"
    assert cli_main(["score", "--run", str(tmp_path / "run"), "--client", "3", "--input", str(new),
                     "--output", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 40 and {r["anomaly"] for r in rows} <= {"0", "1"}
    # the detector flags hadrons (last rows: 'h') more often than gammas ('g')
    flags = np.array([int(r["anomaly"]) for r in rows])
    assert flags[20:].mean() >= flags[:20].mean()


def test_score_cli_rejects_malformed_file(tmp_path, data_dir, capsys):
    run(tiny("magic", rounds=1), tmp_path / "run", data_dir=data_dir, progress=False)
    bad = tmp_path / "bad.data"
    bad.write_text("1;2;3\n")
    assert cli_main(["score", "--run", str(tmp_path / "run"), "--client", "0", "--input", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.data" in err and len(err.strip().splitlines()) == 1


def test_refuses_to_overwrite_a_different_run(tmp_path, data_dir):
    run(tiny(rounds=1), tmp_path, data_dir=data_dir, progress=False)
    with pytest.raises(RuntimeError, match="different config"):
        run(tiny(rounds=1, seed=200), tmp_path, data_dir=data_dir, resume=True, progress=False)


def _cli(out, data_dir, *extra):
    return [sys.executable, "-m", "fedgca.cli.main", "run", "--dataset", "academic", "--rounds", "5",
            "--recon-epochs", "2", "--align-epochs", "2", "--data-dir", str(data_dir), "--out", str(out), *extra]


def test_resume_after_kill_matches_uninterrupted_run(tmp_path, data_dir):
    from fedgca.cli.main import main

    full, killed = tmp_path / "full", tmp_path / "killed"
    assert main(_cli(full, data_dir)[3:]) == 0  # the uninterrupted reference: the same command, in this process
    proc = subprocess.Popen(_cli(killed, data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until some, not all, rounds are checkpointed
            m = killed / "metrics.csv"
            if m.exists() and m.read_text().count(",round,") >= 2:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (killed / "summary.json").exists(), "the run finished before it could be killed"
    assert main(_cli(killed, data_dir, "--resume")[3:]) == 0  # resumed by the same command, in this process
    a = json.loads((full / "summary.json").read_text())
    b = json.loads((killed / "summary.json").read_text())
    a.pop("wall_seconds"), b.pop("wall_seconds")
    assert a == b
    assert (full / "metrics.csv").read_text() == (killed / "metrics.csv").read_text()
