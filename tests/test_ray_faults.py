"""The Ray executor under faults, on a local multi-node Ray cluster bound to 127.0.0.1: a killed worker process or
node costs only that run's progress (Ray retries it from its checkpoint; the run ends with the local executor's
bytes). A module of its own so that pytest-xdist runs it beside test_ray.py."""
from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest
import ray_helpers as h

from fedgca.experiments import sweep
from fedgca.experiments.executors import executor
from fedgca.ray_local import LOOPBACK, node_addresses

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs fedgca[ray] (Flower's simulation extra)")


def test_a_killed_worker_process_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    cfg = h._cfg(method="gca", seed=7, rounds=8, recon_epochs=5, align_epochs=5)
    root = tmp_path / "ray"
    killer = h._kill_when_checkpointed(root, cfg, lambda pid: os.kill(pid, signal.SIGKILL))
    res = sweep.run_sweep([cfg], root, data_dir=data_dir, executor=executor("ray", workers=1))
    killer.join(5)
    assert "killed" in killer.done, "the run finished before it could be killed"
    assert res["finished"] == 1 and not res["failed"]
    starts = [e for e in h._started(root) if e["key"] == cfg.key()]
    assert len(starts) == 2 and starts[1]["resume"] is True  # Ray retried it, from the last checkpoint
    h._same_runs(root, h._reference(tmp_path, [cfg], data_dir), [cfg])
    h._finished_once(root, [cfg])


def test_a_killed_node_costs_only_its_runs_progress(cluster, tmp_path, data_dir):
    c, workers, node = cluster
    configs = [h._cfg(method="gca", seed=s, rounds=8, recon_epochs=5, align_epochs=5) for s in (11, 12)]
    root = tmp_path / "ray"

    def kill_node(pid: int) -> None:  # the worker node whose raylet started this worker process
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        victim = next(n for n in workers if n.all_processes["raylet"][0].process.pid == ppid)
        c.remove_node(victim, allow_graceful=False)  # its run is retried on the other node
        workers.remove(victim)

    killer = h._kill_when_checkpointed(root, configs[0], kill_node)
    res = sweep.run_sweep(configs, root, data_dir=data_dir, executor=executor("ray", workers=2))
    killer.join(5)
    assert "killed" in killer.done, "the run finished before its node could be killed"
    assert res["finished"] == 2 and not res["failed"]
    assert len([e for e in h._started(root) if e["key"] == configs[0].key()]) == 2
    h._same_runs(root, h._reference(tmp_path, configs, data_dir), configs)
    h._finished_once(root, configs)
    assert set(node_addresses()) == {LOOPBACK}
