"""The Ray executor of sweep/compare on a local multi-node Ray cluster bound to 127.0.0.1: the same run
directories as the local pool, byte for byte; a killed worker process or node costs only that run's
progress (Ray retries it from its checkpoint; the run ends with the local executor's bytes); the scratch path
for nodes that do not share the driver's filesystem. One cluster serves the module (starting one costs
seconds of CPU on 2 cores); the test that removes a node comes last."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
from pathlib import Path

import pytest
from ray_helpers import (
    _cfg,
    _finished_once,
    _kill_when_checkpointed,
    _reference,
    _same_runs,
    _started,
)

from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.experiments import ray_executor, sweep
from fedgca.experiments.executors import executor
from fedgca.ray_local import LOOPBACK, node_addresses

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs fedgca[ray] (Flower's simulation extra)")


def test_every_node_of_the_test_cluster_is_on_loopback(cluster):
    addresses = node_addresses()
    assert len(addresses) == 3 and set(addresses) == {LOOPBACK}


def test_ray_sweep_writes_the_local_sweeps_runs(cluster, tmp_path, data_dir):
    # five runs on two reused workers, two datasets: nothing a run leaves in its worker changes the next
    configs = [_cfg(method=m, seed=s) for m in ("gca", "fedavg") for s in (1, 2)] + [_cfg(dataset="magic", seed=3)]
    res = sweep.run_sweep(configs, tmp_path / "ray", data_dir=data_dir, executor=executor("ray", workers=2))
    assert res["finished"] == 5 and not res["failed"]
    assert len({e["worker_pid"] for e in sweep.Ledger(tmp_path / "ray" / sweep.LEDGER).events()
                if e["event"] == "finished"}) < 5
    _same_runs(tmp_path / "ray", _reference(tmp_path, configs, data_dir), configs)
    _finished_once(tmp_path / "ray", configs)
    again = sweep.run_sweep(configs, tmp_path / "ray", data_dir=data_dir, executor=executor("ray", workers=2))
    assert again["skipped"] == 5 and again["finished"] == 0  # resume works unchanged


def test_a_node_without_the_drivers_files_returns_the_run_directory(tmp_path, data_dir):
    """The task's scratch path (a node that does not see the sweep directory), run here without Ray: the
    returned files written by the driver equal the in-place run's, and an unfinished run resumes from the
    files shipped with the task."""
    cfg = _cfg(method="gca", seed=5)
    ref = _reference(tmp_path, [cfg], data_dir)
    res = ray_executor._task(sweep.execute, cfg.to_dict(), "/nonexistent/run", "/nonexistent",
                             DataSource.builtin(cfg.dataset, str(data_dir)),
                             token="not-this-driver", bundle=None)
    assert res["status"] == "finished" and res["in_place"] is False
    out = tmp_path / "driver" / cfg.key()
    ray_executor.unpack(res.pop("files"), out)
    assert (out / "metrics.csv").read_bytes() == (sweep.run_dir(ref, cfg) / "metrics.csv").read_bytes()
    assert (out / "summary.json").exists() and not list(out.glob(".*.part"))
    (out / "summary.json").unlink()  # unfinished, with its checkpoint: what a retried or resumed run ships
    shipped = ray_executor.bundle(out)
    assert "checkpoint.pt" in shipped
    res = ray_executor._task(sweep.execute, cfg.to_dict(), "/nonexistent/run", "/nonexistent",
                             DataSource.builtin(cfg.dataset, str(data_dir)),
                             token="not-this-driver", bundle=shipped)
    assert res["status"] == "finished" and res["resumed"] is True
    ray_executor.unpack(res.pop("files"), out)
    assert (out / "metrics.csv").read_bytes() == (sweep.run_dir(ref, cfg) / "metrics.csv").read_bytes()


def test_executor_options_are_checked_before_anything_runs(tmp_path, capsys):
    with pytest.raises(ValueError, match="--address and --gpus-per-run are the Ray executor's"):
        executor("local", address="auto")
    with pytest.raises(ValueError, match="--executor 'dask'"):
        executor("dask")
    with pytest.raises(ValueError, match=r"--gpus-per-run must be in \[0, 8\]"):
        executor("ray", gpus_per_run=9)
    spec = tmp_path / "s.toml"
    spec.write_text("[grid]\ndataset = \"academic\"\nmethod = \"single\"\nseed = [1]\n")
    from fedgca.cli.main import main

    assert main(["sweep", str(spec), "--out", str(tmp_path / "s"), "--address", "auto"]) == 2
    assert "--address and --gpus-per-run are the Ray executor's" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_compare_on_a_local_ray_instance_bound_to_loopback(tmp_path, data_dir):
    """`fedgca compare --executor ray` starts its own Ray instance (one CPU per worker), on 127.0.0.1 only,
    and its runs are the local executor's."""
    import subprocess
    import sys

    out = tmp_path / "cmp"
    args = ["compare", "--dataset", "academic", "--methods", "gca,single", "--seeds", "1", "--rounds", "1",
            "--data-dir", str(data_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # as a user's shell has it
    done = subprocess.run([sys.executable, "-m", "fedgca.cli.main", *args, "--out", str(out), "--executor", "ray",
                           "--workers", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"nodes at {LOOPBACK}" in done.stderr
    configs = [sweep.canonical(RunConfig("academic", method=m, seed=1, rounds=1)) for m in ("gca", "single")]
    _same_runs(out, _reference(tmp_path, configs, data_dir), configs)


def test_a_killed_worker_process_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    cfg = _cfg(method="gca", seed=7, rounds=4, recon_epochs=2, align_epochs=2)
    root = tmp_path / "ray"
    killer = _kill_when_checkpointed(root, cfg, lambda pid: os.kill(pid, signal.SIGKILL))
    res = sweep.run_sweep([cfg], root, data_dir=data_dir, executor=executor("ray", workers=1))
    killer.join(5)
    assert "killed" in killer.done, "the run finished before it could be killed"
    assert res["finished"] == 1 and not res["failed"]
    starts = [e for e in _started(root) if e["key"] == cfg.key()]
    assert len(starts) == 2 and starts[1]["resume"] is True  # Ray retried it, from the last checkpoint
    _same_runs(root, _reference(tmp_path, [cfg], data_dir), [cfg])
    _finished_once(root, [cfg])


def test_a_killed_node_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    c, workers, node = cluster
    configs = [_cfg(method="gca", seed=s, rounds=4, recon_epochs=2, align_epochs=2) for s in (11, 12)]
    root = tmp_path / "ray"

    def kill_node(pid: int) -> None:  # the worker node whose raylet started this worker process
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        victim = next(n for n in workers if n.all_processes["raylet"][0].process.pid == ppid)
        # frozen first: on a fast machine the run would otherwise finish in the second the node takes to go
        os.kill(pid, signal.SIGSTOP)
        try:
            c.remove_node(victim, allow_graceful=False)  # its run is retried on the other node
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # the frozen worker, if the node's end left it behind
        workers.remove(victim)

    killer = _kill_when_checkpointed(root, configs[0], kill_node)
    res = sweep.run_sweep(configs, root, data_dir=data_dir, executor=executor("ray", workers=2))
    killer.join(5)
    assert "killed" in killer.done, "the run finished before its node could be killed"
    assert res["finished"] == 2 and not res["failed"]
    assert len([e for e in _started(root) if e["key"] == configs[0].key()]) == 2
    _same_runs(root, _reference(tmp_path, configs, data_dir), configs)
    _finished_once(root, configs)
    assert set(node_addresses()) == {LOOPBACK}
