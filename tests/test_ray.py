"""The Ray executor of sweep/compare on a local multi-node Ray cluster bound to 127.0.0.1: the same run
directories as the local pool, byte for byte; a killed worker process or node costs only that run's
progress; the scratch path for nodes that do not share the driver's filesystem."""
from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from fedgca.config import RunConfig
from fedgca.experiments import ray_executor, sweep
from fedgca.ray_local import LOOPBACK, node_addresses, pin_loopback

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs fedgca[ray] (Flower's simulation extra)")


def _cfg(**kw) -> RunConfig:
    return sweep.canonical(RunConfig(**{"dataset": "academic", "rounds": 2, "recon_epochs": 1, "align_epochs": 1,
                                        "local_epochs": 1, "k": 10, **kw}))


def _reference(tmp_path: Path, configs, data_dir) -> Path:
    """The same runs through the local executor (in this process, one torch thread, as a worker computes)."""
    root = tmp_path / "local"
    res = sweep.run_sweep(configs, root, workers=0, data_dir=data_dir)
    assert res["finished"] == len(configs) and not res["failed"]
    return root


def _same_runs(a: Path, b: Path, configs) -> None:
    for cfg in configs:
        assert (sweep.run_dir(a, cfg) / "metrics.csv").read_bytes() == \
            (sweep.run_dir(b, cfg) / "metrics.csv").read_bytes(), sweep.describe(cfg)


def _finished_once(root: Path, configs) -> None:
    finished = [e["key"] for e in sweep.Ledger(root / sweep.LEDGER).events() if e["event"] == "finished"]
    assert sorted(finished) == sorted(c.key() for c in configs)


@pytest.fixture(scope="module")
def cluster():
    """A head node without CPUs (the driver's) and two worker nodes of one CPU each, all on 127.0.0.1."""
    import ray
    from ray.cluster_utils import Cluster

    pin_loopback()
    node = {"node_ip_address": LOOPBACK, "include_dashboard": False, "object_store_memory": 80 * 2**20}
    c = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 0})
    workers = [c.add_node(**node, num_cpus=1) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    yield c, workers, node
    ray.shutdown()
    c.shutdown()


def test_every_node_of_the_test_cluster_is_on_loopback(cluster):
    addresses = node_addresses()
    assert len(addresses) == 3 and set(addresses) == {LOOPBACK}


def test_ray_sweep_writes_the_local_sweeps_runs(cluster, tmp_path, data_dir):
    # five runs on two reused workers, two datasets: nothing a run leaves in its worker changes the next
    configs = [_cfg(method=m, seed=s) for m in ("gca", "fedavg") for s in (1, 2)] + [_cfg(dataset="magic", seed=3)]
    res = sweep.run_sweep(configs, tmp_path / "ray", workers=2, data_dir=data_dir, executor="ray")
    assert res["finished"] == 5 and not res["failed"]
    assert len({e["worker_pid"] for e in sweep.Ledger(tmp_path / "ray" / sweep.LEDGER).events()
                if e["event"] == "finished"}) < 5
    _same_runs(tmp_path / "ray", _reference(tmp_path, configs, data_dir), configs)
    _finished_once(tmp_path / "ray", configs)
    again = sweep.run_sweep(configs, tmp_path / "ray", workers=2, data_dir=data_dir, executor="ray")
    assert again["skipped"] == 5 and again["finished"] == 0  # resume works unchanged


def _started(root: Path) -> list[dict]:
    path = root / sweep.LEDGER
    return [e for e in sweep.Ledger(path).events() if e["event"] == "started"] if path.exists() else []


def _kill_when_checkpointed(root: Path, cfg: RunConfig, kill, timeout: float = 120) -> threading.Thread:
    """In the background: once ``cfg``'s run has written its first checkpoint, call ``kill(worker_pid)``."""
    done = {}

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            starts = [e for e in _started(root) if e["key"] == cfg.key()]
            if starts and (sweep.run_dir(root, cfg) / "checkpoint.pt").exists():
                kill(starts[0]["pid"])
                done["killed"] = starts[0]["pid"]
                return
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    t.done = done
    return t


def test_a_killed_worker_process_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    cfg = _cfg(method="gca", seed=7, rounds=8, recon_epochs=5, align_epochs=5)
    root = tmp_path / "ray"
    killer = _kill_when_checkpointed(root, cfg, lambda pid: os.kill(pid, signal.SIGKILL))
    res = sweep.run_sweep([cfg], root, workers=1, data_dir=data_dir, executor="ray")
    killer.join(5)
    assert "killed" in killer.done, "the run finished before it could be killed"
    assert res["finished"] == 1 and not res["failed"]
    starts = [e for e in _started(root) if e["key"] == cfg.key()]
    assert len(starts) == 2 and starts[1]["resume"] is True  # Ray retried it, from the last checkpoint
    _same_runs(root, _reference(tmp_path, [cfg], data_dir), [cfg])
    _finished_once(root, [cfg])


def test_a_killed_node_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    c, workers, node = cluster
    configs = [_cfg(method="gca", seed=s, rounds=8, recon_epochs=5, align_epochs=5) for s in (11, 12)]
    root = tmp_path / "ray"

    def kill_node(pid: int) -> None:  # the worker node whose raylet started this worker process
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        victim = next(n for n in workers if n.all_processes["raylet"][0].process.pid == ppid)
        c.remove_node(victim, allow_graceful=False)  # its run is retried on the other node
        workers.remove(victim)

    killer = _kill_when_checkpointed(root, configs[0], kill_node)
    res = sweep.run_sweep(configs, root, workers=2, data_dir=data_dir, executor="ray")
    killer.join(5)
    assert "killed" in killer.done, "the run finished before its node could be killed"
    assert res["finished"] == 2 and not res["failed"]
    assert len([e for e in _started(root) if e["key"] == configs[0].key()]) == 2
    _same_runs(root, _reference(tmp_path, configs, data_dir), configs)
    _finished_once(root, configs)
    assert set(node_addresses()) == {LOOPBACK}


def test_a_node_without_the_drivers_files_returns_the_run_directory(tmp_path, data_dir):
    """The task's scratch path (a node that does not see the sweep directory), run here without Ray: the
    returned files written by the driver equal the in-place run's, and an unfinished run resumes from the
    files shipped with the task."""
    cfg = _cfg(method="gca", seed=5)
    ref = _reference(tmp_path, [cfg], data_dir)
    res = ray_executor._task(sweep.execute, cfg.to_dict(), "/nonexistent/run", "/nonexistent", str(data_dir),
                             token="not-this-driver", bundle=None)
    assert res["status"] == "finished" and res["in_place"] is False
    out = tmp_path / "driver" / cfg.key()
    ray_executor.unpack(res.pop("files"), out)
    assert (out / "metrics.csv").read_bytes() == (sweep.run_dir(ref, cfg) / "metrics.csv").read_bytes()
    assert (out / "summary.json").exists() and not list(out.glob(".*.part"))
    (out / "summary.json").unlink()  # unfinished, with its checkpoint: what a retried or resumed run ships
    shipped = ray_executor.bundle(out)
    assert "checkpoint.pt" in shipped
    res = ray_executor._task(sweep.execute, cfg.to_dict(), "/nonexistent/run", "/nonexistent", str(data_dir),
                             token="not-this-driver", bundle=shipped)
    assert res["status"] == "finished" and res["resumed"] is True
    ray_executor.unpack(res.pop("files"), out)
    assert (out / "metrics.csv").read_bytes() == (sweep.run_dir(ref, cfg) / "metrics.csv").read_bytes()


def test_executor_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--address and --gpus-per-run are the Ray executor's"):
        sweep.run_sweep([_cfg()], tmp_path / "s", address="auto")
    with pytest.raises(ValueError, match="--executor 'dask'"):
        sweep.run_sweep([_cfg()], tmp_path / "s", executor="dask")
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
    local = subprocess.run([sys.executable, "-m", "fedgca.cli.main", *args, "--out", str(tmp_path / "loc"),
                            "--workers", "0"], capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    configs = [sweep.canonical(RunConfig("academic", method=m, seed=1, rounds=1)) for m in ("gca", "single")]
    _same_runs(out, tmp_path / "loc", configs)
