"""`fedgca sweep`: grid expansion, keys, the ledger, failures, and kill/restart."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedgca.config import RunConfig
from fedgca.experiments import sweep
from fedgca.experiments.executors import LocalPool
from fedgca.flower.deploy import descendants, running

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _events(root: Path) -> list[dict]:
    return sweep.Ledger(root / sweep.LEDGER).events()


def test_grid_expansion_and_canonical_keys():
    spec = sweep.parse_spec({
        "base": {"rounds": 2},
        "grid": [
            {"dataset": ["academic", "magic"], "method": ["gca", "fedavg"], "k": [10, 20], "seed": [100, 200]},
            {"dataset": "academic", "method": "fedavg", "seed": 100, "k": "preset"},  # a duplicate
        ],
    })
    # GCA: 2 datasets × 2 K × 2 seeds; FedAvg ignores K, so it runs once per dataset and seed.
    methods = [c.method for c in spec.configs]
    assert methods.count("gca") == 8 and methods.count("fedavg") == 4
    assert len({c.key() for c in spec.configs}) == len(spec.configs) == 12
    assert all(c.rounds == 2 for c in spec.configs)
    a = sweep.canonical(RunConfig(dataset="magic", method="fedavg", k=40, backend="kmeans", recon_epochs=1))
    b = sweep.canonical(RunConfig(dataset="magic", method="fedavg"))
    assert a.key() == b.key()
    # ... but an option GCA reads changes a GCA key, and alpha matters only under the Dirichlet partition.
    assert sweep.canonical(RunConfig("magic", k=40)).key() != sweep.canonical(RunConfig("magic", k=80)).key()
    assert sweep.canonical(RunConfig("magic", alpha=0.5)).key() == sweep.canonical(RunConfig("magic")).key()
    assert (sweep.canonical(RunConfig("magic", partition="dirichlet", alpha=0.5)).key()
            != sweep.canonical(RunConfig("magic", partition="dirichlet")).key())


def test_ledger_records_finished_once_and_survives_a_torn_line(tmp_path):
    led = sweep.Ledger(tmp_path / "ledger.jsonl")
    assert led.append("started", "a")
    assert led.append("finished", "a", once=True, out="x")
    assert not led.append("finished", "a", once=True, out="x")
    with led.path.open("a") as f:
        f.write('{"event": "fini')  # what a crash in the middle of a write could leave
    assert led.append("finished", "b", once=True)
    assert [e["event"] for e in led.events()] == ["started", "finished", "finished"]
    assert led.finished_keys() == {"a", "b"}


def test_bad_sweep_files(tmp_path):
    with pytest.raises(ValueError, match="unknown RunConfig fields"):
        sweep.parse_spec({"grid": {"dataset": "academic", "colour": ["red"]}})
    with pytest.raises(ValueError, match="no \\[grid\\]"):
        sweep.parse_spec({"base": {"dataset": "academic"}})
    with pytest.raises(ValueError, match="unknown dataset"):
        sweep.parse_spec({"grid": {"dataset": "nope"}})
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        sweep.load_spec(bad)


BANK_VARIANT_EXAMPLES = {"sweep_bank_tail_both": "tail-both", "sweep_bank_temporal": "temporal-500"}


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.toml")))
def test_example_files_parse(name, request, tmp_path, monkeypatch):
    if name in BANK_VARIANT_EXAMPLES:  # its data is written by scripts/bank_variants.py, as its README says
        import importlib.util

        script = EXAMPLES.parent / "scripts" / "bank_variants.py"
        mod_spec = importlib.util.spec_from_file_location("bank_variants", script)
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        monkeypatch.chdir(tmp_path)
        mod.main(["--data-dir", str(request.getfixturevalue("data_dir")), "--out", "results/bank_variants",
                  "--only", BANK_VARIANT_EXAMPLES[name]])
    if '"../shared/data/' in (EXAMPLES / f"{name}.toml").read_text():  # own data, relative to the working directory
        shared = tmp_path / "work" / "shared"
        shared.mkdir(parents=True)
        (shared / "data").symlink_to(request.getfixturevalue("data_dir").resolve())
        (tmp_path / "work" / "repo").mkdir()
        (tmp_path / "work" / "repo" / "examples").symlink_to(EXAMPLES.resolve())  # a schema file beside the sweep's
        monkeypatch.chdir(tmp_path / "work" / "repo")
    spec = sweep.load_spec(EXAMPLES / f"{name}.toml")
    assert spec.configs
    if name == "sweep_k":
        assert len(spec.configs) == 3 * 4 * 3
        assert {c.k for c in spec.configs} == {10, 20, 40, 80}
        assert {c.rounds for c in spec.configs} == {100}
        assert [c.dataset for c in spec.configs][:12] == ["adult"] * 12  # the missing dataset first
        assert {c.dataset for c in spec.configs} == {"academic", "magic", "adult"}
        assert {c.seed for c in spec.configs} == {100, 200, 300}
    if name == "sweep_noniid":
        assert {c.partition for c in spec.configs} == {"dirichlet"}
        assert {c.dataset for c in spec.configs} == {"academic", "magic", "adult", "bank"}
    if name == "sweep_weights_align":
        assert {(c.eval_align_epochs, c.eval_align_clients) for c in spec.configs} == {(True, "client0")}
    if name.startswith("sweep_dp_frontier_"):
        eps = {None, 8.0, 32.0} if name.endswith("campaign") else {None, 1.0, 2.0, 4.0, 8.0, 32.0}
        assert {c.clients for c in spec.configs} == {2, 10, 30} and {c.target_epsilon for c in spec.configs} == eps
        assert len(spec.configs) == 3 * (2 * (len(eps) - 1) + 2) * len({c.seed for c in spec.configs})
    if name.startswith("sweep_dp_levers_"):  # DP-GCA at ε = 8 on shorter schedules, GCA on the shortest
        assert {(c.method, c.target_epsilon) for c in spec.configs} == {("dpgca", 8.0), ("gca", None)}
        assert len(spec.configs) == (6 + 2) * 3 * 3 and {c.rounds for c in spec.configs} == {5, 20}
    if name == "sweep_dp_stats_bank":  # the per-site statistics' σ_s, each run on the 12 jobs' sites
        assert {c.dp_stats_sigma for c in spec.configs if c.method.startswith("dp")} == {4.0, 8.0, 16.0}
        assert {c.clients for c in spec.configs} == {12} and len(spec.configs) == 8
    if name == "sweep_fashion":
        assert {(c.dataset, c.rounds) for c in spec.configs} == {("fashion_mnist", 2)} and len(spec.configs) == 21


def test_failure_is_recorded_and_does_not_stop_the_sweep(tmp_path, data_dir):
    ok = sweep.canonical(RunConfig("academic", rounds=1, recon_epochs=1, align_epochs=1))
    bad = sweep.canonical(RunConfig("academic", method="single", rounds=1, local_epochs=1, clients=100_000))
    root = tmp_path / "sw"
    res = sweep.run_sweep([bad, ok], root, executor=LocalPool(0), data_dir=data_dir)  # in-process: fast
    assert res["finished"] == 1 and len(res["failed"]) == 1
    assert (sweep.run_dir(root, ok) / "summary.json").exists()
    assert not (sweep.run_dir(root, bad) / "summary.json").exists()
    failed = [e for e in _events(root) if e["event"] == "failed"]
    assert len(failed) == 1 and failed[0]["key"] == bad.key()
    assert "num_clients" in failed[0]["error"] and failed[0]["config"]["clients"] == 100_000
    assert sweep.status(root, [ok, bad]) == {ok.key(): "finished", bad.key(): "failed"}
    # Again: the finished run is skipped; with retries off, the failed one is left alone.
    res = sweep.run_sweep([bad, ok], root, executor=LocalPool(1), data_dir=data_dir, retry_failed=False)
    assert res == {"total": 2, "skipped": 2, "finished": 0, "failed": []}
    assert [e["event"] for e in _events(root)].count("finished") == 1


def test_a_stopping_pools_manager_thread_cannot_print_a_traceback(monkeypatch):
    """Stopping a sweep forgets the pool's pending work items; CPython's manager thread may then trip over one
    (KeyError) — the stopped sweep must still end with its one line. Other threads' errors are still reported."""
    import threading

    reported = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.thread.name))  # restored after

    def fail():
        raise KeyError(28)

    manager, other = threading.Thread(target=fail, name="manager"), threading.Thread(target=fail, name="other")
    from fedgca.experiments.pool import _silence

    _silence(manager)
    for t in (manager, other):
        t.start()
        t.join()
    assert reported == ["other"]


def test_longest_first_starts_the_largest_predicted_run_first(tmp_path, data_dir):
    short = sweep.canonical(RunConfig("academic", method="single", rounds=1, local_epochs=1))
    long = sweep.canonical(RunConfig("academic", method="single", rounds=2, local_epochs=1))
    flops = sweep.predicted_flops([short, long], data_dir)
    assert flops[long.key()] > flops[short.key()]
    for order, first in (("grid", short), ("longest-first", long)):
        root = tmp_path / order
        assert sweep.run_sweep([short, long], root, executor=LocalPool(0), data_dir=data_dir, order=order)["finished"] == 2
        started = [e["key"] for e in _events(root) if e["event"] == "started"]
        assert started[0] == first.key() and sorted(started) == sorted([short.key(), long.key()])
    with pytest.raises(ValueError, match="--order"):
        sweep.run_sweep([short], tmp_path / "x", executor=LocalPool(0), data_dir=data_dir, order="shortest")


@pytest.mark.slow
def test_sigterm_after_the_last_run_leaves_no_worker_and_no_traceback(tmp_path, data_dir):
    """The pool replaces each worker after its run, so when the last run finishes replacements are still
    starting. A SIGTERM then used to orphan them: each died later with a SemLock traceback."""
    spec = tmp_path / "end.toml"
    spec.write_text("[base]\nrounds = 1\n[grid]\ndataset = \"academic\"\nmethod = \"single\"\nseed = [1, 2]\n")
    root = tmp_path / "sweep"
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "fedgca.cli.main", "sweep", str(spec), "--out", str(root),
                                 "--data-dir", str(data_dir), "--workers", "2"],
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        deadline = time.monotonic() + 120
        while not ((root / sweep.LEDGER).exists()
                   and [e["event"] for e in _events(root)].count("finished") == 2):
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.02)
        children = descendants([proc.pid])
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(3)  # an orphaned replacement worker needs a moment to fail
    err = err_path.read_text()
    assert "Traceback" not in err, err
    # 143: stopped with its one line; 0: the signal came after the sweep was done; -15: after run_sweep had
    # returned and restored the default SIGTERM action (its closing line already printed)
    assert proc.returncode in (0, 143) or (proc.returncode == -signal.SIGTERM and "2 finished now" in err), err
    assert not [p for p in children if running(p)], "workers left running"


@pytest.mark.slow
def test_killed_sweep_resumes_with_each_run_exactly_once(tmp_path, data_dir, capsys):
    """SIGTERM a real `fedgca sweep` after its first run finishes (one clear line, workers stopped, nothing
    leaked), SIGKILL the restart after its next; a third start completes every run once."""
    spec = tmp_path / "kill.toml"
    # runs of different lengths: two workers never finish theirs at the same moment (with workers forked warm,
    # runs of equal length did, and the first signal then found two finished)
    spec.write_text(
        "[base]\nseed = 100\nrecon_epochs = 1\nalign_epochs = 1\n"
        "[grid]\ndataset = \"academic\"\nmethod = \"gca\"\nk = 10\nrounds = [1, 3, 5]\n"
    )
    root = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "fedgca.cli.main", "sweep", str(spec), "--out", str(root), "--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def start_and_kill(sig, finished_before: int):
        # stderr to a file, not a pipe: a SIGKILLed sweep's workers hold a pipe open until they notice
        err_path = tmp_path / f"stderr-{sig}.txt"
        with err_path.open("w") as err_file:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err_file)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if (root / sweep.LEDGER).exists() and \
                        [e["event"] for e in _events(root)].count("finished") > finished_before:
                    break
                if proc.poll() is not None:
                    pytest.fail("the sweep ended before it could be killed")
                time.sleep(0.1)
            else:
                pytest.fail("no run finished in time")
            workers = descendants([proc.pid])
            proc.send_signal(sig)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        return proc.returncode, err_path.read_text(), workers

    rc, err, workers = start_and_kill(signal.SIGTERM, 0)
    # "after N of 3": the runs this invocation recorded (a signal may land between a worker's ledger line and it)
    stopped = re.search(r"stopped \(SIGTERM\) after ([012]) of 3 run\(s\) finished", err)
    assert rc == 143 and stopped, err
    assert "run the same command again to resume" in err and "leaked" not in err and "Traceback" not in err, err
    time.sleep(0.5)
    assert not [p for p in workers if running(p)], "workers left running"
    # on a loaded machine the 1- and 3-round runs can finish within one poll of each other: one or two recorded
    finished = [e["event"] for e in _events(root)].count("finished")
    assert finished in (1, 2) and int(stopped.group(1)) <= finished
    start_and_kill(signal.SIGKILL, 1)  # after the second run (at once if it finished already): the third unfinished
    assert [e["event"] for e in _events(root)].count("finished") == 2

    from fedgca.cli.main import main

    assert main(cmd[3:]) == 0  # the same command again (in this process): it finishes the rest
    keys = {sweep.canonical(RunConfig("academic", seed=100, rounds=r, recon_epochs=1, align_epochs=1, k=10)).key()
            for r in (1, 3, 5)}
    runs = sorted(p.name for p in (root / "runs").iterdir())
    assert set(runs) == keys
    summaries = list(root.rglob("summary.json"))
    assert sorted(p.parent.name for p in summaries) == sorted(keys)  # each run present exactly once
    for p in summaries:
        s = json.loads(p.read_text())
        rounds = [line.split(",")[0] for line in (p.parent / "metrics.csv").read_text().splitlines()[1:]
                  if ",round," in line]
        assert rounds == [str(r + 1) for r in range(s["rounds"])]  # nothing lost or duplicated by the resume
    finished = [e["key"] for e in _events(root) if e["event"] == "finished"]
    assert sorted(finished) == sorted(keys)  # exactly one "finished" per key
    # A third invocation has nothing to do.
    capsys.readouterr()
    assert main(cmd[3:]) == 0 and "3 already done" in capsys.readouterr().err


def test_the_keys_of_committed_runs_do_not_change():
    """A run's key names its directory, so a changed key orphans every committed run: each run directory committed
    under docs/results is still named by the key its config gives (60 runs, the paper's presets among them), and
    an option added later (`_later` on its field) leaves the keys of runs without it as they were."""
    import dataclasses
    from pathlib import Path

    from fedgca.config import ADDED_LATER

    root = Path(__file__).resolve().parents[1] / "docs" / "results"
    runs = sorted(root.glob("**/runs/*/config.json"))
    assert len(runs) >= 60
    for path in runs:
        cfg = RunConfig.from_dict(json.loads(path.read_text()))
        assert sweep.canonical(cfg).key() == path.parent.name, path
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert ADDED_LATER and all(defaults[k] == v for k, v in ADDED_LATER.items())
    assert RunConfig("magic", method="gca", seed=100).key() == RunConfig("magic", method="gca", seed=100,
                                                                         small_sites="error").key()
