"""Files a user is handed never execute code; bad files and options get one clear line and leave nothing behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedgca import rundir
from fedgca.cli.main import main as cli_main
from fedgca.config import RunConfig
from fedgca.experiments.executors import LocalPool
from fedgca.simulation.runner import run

TINY = dict(dataset="academic", rounds=1, recon_epochs=1, align_epochs=1, seed=100)


class _Payload:
    """A pickle whose loading runs a command (what a crafted checkpoint.pt or model.pt would hold)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def _plant(path: Path, marker: Path) -> None:
    torch.save({"clients": _Payload(marker), "method": {}, "rows": [], "comm": [], "round": 0, "wall": 0.0}, path)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_dir) -> Path:
    out = tmp_path_factory.mktemp("runs") / "academic-gca"
    run(RunConfig(**TINY), out, data_dir=data_dir, progress=False)
    return out


@pytest.fixture()
def run_copy(finished_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst)
    return dst


def _cli(capsys, *argv) -> tuple[int, str]:
    code = cli_main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return code, err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("fedgca: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------- crafted pickles


def test_no_unsafe_loading_in_the_source():
    src = Path(__file__).resolve().parents[1] / "src" / "fedgca"
    for path in src.rglob("*.py"):
        text = path.read_text()
        assert "weights_only=False" not in text, path
        if path.name != "vision.py":  # the restricted CIFAR unpickler is the one pickle reader
            assert "pickle.load" not in text and "pickle.loads" not in text, path


def test_malicious_checkpoint_is_refused_on_resume(run_copy, tmp_path, capsys, data_dir):
    marker = tmp_path / "pwned"
    _plant(run_copy / rundir.CHECKPOINT, marker)
    (run_copy / rundir.MANIFEST).unlink()  # an attacker would drop the manifest too: safety must not rely on it
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", run_copy, "--resume")
    assert code == 2 and "refused" in _one_line(err) and "checkpoint.pt" in err
    assert not marker.exists()


def test_malicious_checkpoint_is_refused_by_attack(run_copy, tmp_path, capsys, data_dir):
    marker = tmp_path / "pwned"
    _plant(run_copy / rundir.CHECKPOINT, marker)
    (run_copy / rundir.MANIFEST).unlink()
    code, err = _cli(capsys, "attack", "--run", run_copy, "--data-dir", data_dir)
    assert code == 2 and "refused" in _one_line(err)
    assert not marker.exists()


def test_malicious_model_is_refused_by_score(run_copy, tmp_path, capsys, data_dir):
    marker = tmp_path / "pwned"
    model = run_copy / "clients" / "client_000" / "model.pt"
    torch.save({"w": _Payload(marker)}, model)
    (run_copy / rundir.MANIFEST).unlink()
    rows = sorted((data_dir / "academic").glob("*"))[0]
    code, err = _cli(capsys, "score", "--run", run_copy, "--client", 0, "--input", rows)
    assert code == 2 and "refused" in _one_line(err) and "model.pt" in err
    assert not marker.exists()


def test_malicious_checkpoint_in_a_sweep_fails_that_run_only(tmp_path, data_dir):
    from fedgca.experiments.sweep import canonical, run_sweep

    cfg = canonical(RunConfig(**TINY))
    run_dir = tmp_path / "sweep" / "runs" / cfg.key()
    run_dir.mkdir(parents=True)
    (run_dir / rundir.CONFIG).write_text(json.dumps(cfg.to_dict()))
    marker = tmp_path / "pwned"
    _plant(run_dir / rundir.CHECKPOINT, marker)
    result = run_sweep([cfg], tmp_path / "sweep", data_dir=data_dir, executor=LocalPool(0))
    assert not marker.exists()
    assert len(result["failed"]) == 1
    ledger = (tmp_path / "sweep" / "ledger.jsonl").read_text()
    assert "refused" in ledger


# ---------------------------------------------------------------------------- integrity


def test_truncated_checkpoint_names_the_file(run_copy, capsys, data_dir):
    ckpt = run_copy / rundir.CHECKPOINT
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", run_copy, "--resume")
    line = _one_line(err)
    assert code == 2 and "checkpoint.pt" in line and "truncated" in line


def test_truncated_checkpoint_without_manifest_is_one_line(run_copy, capsys, data_dir):
    ckpt = run_copy / rundir.CHECKPOINT
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    (run_copy / rundir.MANIFEST).unlink()
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", run_copy, "--resume")
    line = _one_line(err)
    assert code == 2 and "checkpoint.pt" in line and "truncated or corrupted" in line


def test_modified_detector_is_reported_by_score(run_copy, capsys, data_dir):
    doc = run_copy / "clients" / "client_001" / "detector.json"
    d = json.loads(doc.read_text())
    d["threshold"] = 0.0
    doc.write_text(json.dumps(d, indent=2))
    rows = sorted((data_dir / "academic").glob("*"))[0]
    code, err = _cli(capsys, "score", "--run", run_copy, "--client", 1, "--input", rows)
    line = _one_line(err)
    assert code == 2 and "detector.json" in line and ("modified" in line or "truncated" in line)


def test_foreign_checkpoint_is_one_line(run_copy, capsys, data_dir):
    torch.save({"weights": torch.zeros(3)}, run_copy / rundir.CHECKPOINT)
    (run_copy / rundir.MANIFEST).unlink()
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", run_copy, "--resume")
    assert code == 2 and "not a fedgca file" in _one_line(err)
    torch.save({"clients": 1, "method": {}, "rows": [], "comm": [], "round": 0, "wall": 0.0},
               run_copy / rundir.CHECKPOINT)
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", run_copy, "--resume")
    assert code == 2 and "does not belong" in _one_line(err)


def test_manifest_survives_a_kill_between_checkpoint_steps(tmp_path):
    """The pending entry lets either the old or the new checkpoint verify, whichever the kill left."""
    rundir.save_checkpoint(tmp_path, {"round": 0})
    old = (tmp_path / rundir.CHECKPOINT).read_bytes()
    files = json.loads((tmp_path / rundir.MANIFEST).read_text())["files"]
    files["checkpoint.pt"]["pending"] = {"sha256": "0" * 64, "bytes": 1}
    (tmp_path / rundir.MANIFEST).write_text(json.dumps({"files": files}))
    assert rundir.verify(tmp_path, rundir.CHECKPOINT).read_bytes() == old
    rundir.save_checkpoint(tmp_path, {"round": 1})
    assert rundir.load_tensors(rundir.verify(tmp_path, rundir.CHECKPOINT))["round"] == 1
    assert not list(tmp_path.glob("*.tmp"))
    assert "pending" not in json.loads((tmp_path / rundir.MANIFEST).read_text())["files"]["checkpoint.pt"]


def test_checkpoints_written_in_the_background_are_snapshots_in_order(tmp_path):
    """``CheckpointWriter``: each save is the state at the moment of the call (the run changes its tensors in
    place and appends metric rows while the write goes on), the last one is on disk and verifies after ``wait``,
    and a failed write is raised in the run's thread, at the next save or at ``wait``."""
    weights, steps, rows = torch.zeros(1000), torch.zeros(3, dtype=torch.long), []
    writer = rundir.CheckpointWriter(tmp_path)
    for r in range(3):
        weights += 2
        steps += 1
        rows.append({"round": r})
        writer.save({"round": r, "weights": weights, "optim": {"step": steps}, "rows": rows})
        weights.mul_(-1)  # the next round's work, while the write may still be under way
        steps.zero_()
        rows.append({"round": "next"})
    writer.wait()
    saved = rundir.load_tensors(rundir.verify(tmp_path, rundir.CHECKPOINT))
    assert saved["round"] == 2 and torch.equal(saved["weights"], torch.full((1000,), 2.0))  # 2, −2 + 2 = 0, 2
    assert torch.equal(saved["optim"]["step"], torch.ones(3, dtype=torch.long))
    assert [row["round"] for row in saved["rows"]] == [0, "next", 1, "next", 2]
    assert not list(tmp_path.glob("*.tmp"))
    assert "pending" not in json.loads((tmp_path / rundir.MANIFEST).read_text())["files"]["checkpoint.pt"]
    gone = rundir.CheckpointWriter(tmp_path / "removed")  # its directory does not exist: the write fails
    gone.save({"round": 0})
    with pytest.raises(FileNotFoundError):
        gone.wait()
    gone.wait()  # raised once


_SLOW_SECOND_CHECKPOINT = """
import sys, time
from fedgca import rundir
run_dir = sys.argv[1]
w = rundir.CheckpointWriter(run_dir)
w.save({"round": 0})
w.wait()
write = rundir._HashingWriter.write
def slow(self, b):
    print("writing", flush=True)
    time.sleep(60)
    return write(self, b)
rundir._HashingWriter.write = slow
w.save({"round": 1})
time.sleep(60)
"""


def test_a_kill_during_a_background_checkpoint_write_leaves_the_previous_one(tmp_path):
    """A process killed while its background thread writes round 1's checkpoint: round 0's is still there and
    verifies (the resume recomputes round 1 to the same numbers); the half-written file is only a .tmp, which
    the next run of the directory deletes."""
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_SECOND_CHECKPOINT, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(Path(rundir.__file__).parents[1])})
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        proc.kill()
        proc.wait(30)
    assert rundir.load_tensors(rundir.verify(tmp_path, rundir.CHECKPOINT)) == {"round": 0}


def test_resume_of_a_finished_run_verifies_and_reproduces_it(run_copy, data_dir):
    before = (run_copy / "metrics.csv").read_text()
    summary = run(RunConfig(**TINY), run_copy, data_dir=data_dir, resume=True, progress=False)
    assert (run_copy / "metrics.csv").read_text() == before and summary["rounds"] == 1
    for name in json.loads((run_copy / rundir.MANIFEST).read_text())["files"]:
        rundir.verify(run_copy, name)


def test_a_run_that_does_not_keep_its_checkpoint(finished_run, tmp_path, capsys, data_dir):
    """--no-keep-checkpoint: the same results, no checkpoint.pt and no manifest entry for it (every listed file
    verifies); a resume, a re-run into the same directory and an attack are each refused with one line, and the
    run's files are left as they were."""
    out = tmp_path / "run"
    run(RunConfig(**TINY, keep_checkpoint=False), out, data_dir=data_dir, progress=False)
    assert not (out / rundir.CHECKPOINT).exists()
    files = json.loads((out / rundir.MANIFEST).read_text())["files"]
    assert rundir.CHECKPOINT not in files and "summary.json" in files
    for name in files:
        rundir.verify(out, name)
    assert (out / "metrics.csv").read_text() == (finished_run / "metrics.csv").read_text()
    assert RunConfig(**TINY, keep_checkpoint=False).key() == RunConfig(**TINY).key()  # the same run
    from fedgca.experiments.sweep_spec import (
        canonical,  # a sweep's or bench's --set keeps it for every method
    )

    assert canonical(RunConfig(**TINY, keep_checkpoint=False)).keep_checkpoint is False
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for extra in (["--resume"], []):
        code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", out, *extra)
        assert code == 2 and ("checkpoint was not kept" if extra else "already holds a run") in _one_line(err)
    code, err = _cli(capsys, "attack", "--run", out, "--data-dir", data_dir)
    assert code == 2 and "checkpoint.pt: missing" in _one_line(err)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


# ---------------------------------------------------------------------------- options


def _tiny_args():
    return ["--dataset", "academic", "--rounds", "1", "--recon-epochs", "1", "--align-epochs", "1"]


@pytest.mark.parametrize("option,value,expect", [
    ("--rho", "0", "--rho must be in (0, 1]"),
    ("--rho", "1.5", "--rho must be in (0, 1]"),
    ("--recon-epochs", "-1", "--recon-epochs must be ≥ 1"),
    ("--align-epochs", "-1", "--align-epochs must be ≥ 0"),
    ("--k", "0", "--k must be ≥ 1"),
    ("--batch-size", "0", "--batch-size must be ≥ 1"),
    ("--lr", "0", "--lr must be > 0"),
    ("--lr", "nan", "--lr must be a finite number"),
    ("--quantile", "1", "--quantile must be in (0, 1)"),
    ("--participation", "0", "--participation must be in (0, 1]"),
    ("--clients", "0", "--clients must be ≥ 1"),
    ("--rounds", "0", "--rounds must be ≥ 1"),
    ("--alpha", "0", "--alpha must be > 0"),
    ("--val-fraction", "1", "--val-fraction must be in [0, 1)"),
    ("--method", "fedsgd", "--method: unknown method 'fedsgd'"),
    ("--threads", "0", "--threads must be ≥ 1"),
])
def test_bad_option_is_one_line_naming_it_and_leaves_nothing(tmp_path, capsys, data_dir, option, value, expect):
    out = tmp_path / "never"
    args = [a for a in _tiny_args()]
    if option in args:
        i = args.index(option)
        del args[i:i + 2]
    code, err = _cli(capsys, "run", *args, option, value, "--data-dir", data_dir, "--out", out)
    assert code == 2 and expect in _one_line(err)
    assert not out.exists()


def test_failed_data_load_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", tmp_path / "empty", "--out", out)
    assert code == 2 and _one_line(err)
    assert not out.exists()


def test_k_beyond_the_uploads_is_said_and_recorded(tmp_path, data_dir, caplog):
    s = run(RunConfig(**{**TINY, "k": 100_000}), tmp_path, data_dir=data_dir, progress=False)
    assert "exceeds the" in s["k_note"] and "--k 100000" in s["k_note"]
    assert any("exceeds the" in r.message for r in caplog.records)
    comm = json.loads((tmp_path / "comm.json").read_text())
    assert comm[0]["broadcast_k"] <= comm[0]["uploads"] < 100_000


def test_every_run_option_is_generated_from_runconfig():
    import dataclasses

    from fedgca.cli.main import build_parser

    help_text = subprocess.run([sys.executable, "-m", "fedgca.cli.main", "run", "--help"], capture_output=True,
                               text=True, check=True).stdout
    for f in dataclasses.fields(RunConfig):
        if f.metadata.get("derived"):  # data_digest: set from --data, never typed
            assert "--" + f.name.replace("_", "-") not in help_text, f.name
            continue
        assert "--" + f.name.replace("_", "-") in help_text, f.name
    args = build_parser().parse_args(["run", "--dataset", "magic"])
    from fedgca.cli.options import config_from_args

    assert config_from_args(args) == RunConfig(dataset="magic").resolved()


def test_readme_usage_lists_every_run_option():
    """README's `fedgca run` usage names every option the CLI has, and no option it lacks."""
    import re

    from fedgca.cli.main import build_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    usage = readme.split("## Usage", 1)[1].split("fedgca score", 1)[0]
    listed = set(re.findall(r"--[a-z][a-z0-9-]*", usage))
    run_parser = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    actual = {o for a in run_parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    assert listed == actual, (sorted(actual - listed), sorted(listed - actual))


def test_a_run_too_large_for_memory_is_refused_before_allocating(tmp_path, capsys, data_dir, monkeypatch):
    from fedgca.simulation import federation

    need = federation.memory_estimate(RunConfig(**TINY).resolved(), (5,), [700] * 10, 13_000)
    assert need > 10 * 16 * 38_037  # at least the stacked models: parameters, gradients, two Adam moments
    monkeypatch.setattr(federation, "available_memory", lambda: need // 10)
    out = tmp_path / "never"
    code, err = _cli(capsys, "run", *_tiny_args(), "--data-dir", data_dir, "--out", out)
    assert code == 2 and "GiB of memory" in _one_line(err) and "--clients" in err
    assert not out.exists()


def test_a_kill_during_a_checkpoint_write_leaves_nothing_behind_on_resume(run_copy, data_dir):
    """A kill inside a write leaves `checkpoint.pt.tmp` (possibly 0 bytes): the resume removes it and goes on."""
    (run_copy / "checkpoint.pt.tmp").write_bytes(b"")
    (run_copy / "metrics.csv.tmp").write_bytes(b"round,pha")
    run(RunConfig(**TINY), run_copy, data_dir=data_dir, resume=True, progress=False)
    assert not list(run_copy.glob("*.tmp"))
