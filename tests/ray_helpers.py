"""What the Ray executor's test modules share: configs, the local-executor reference, checks, a local multi-node
Ray cluster bound to 127.0.0.1 (the `cluster` fixture is in conftest.py) and a run killer."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.experiments import sweep
from fedgca.experiments.executors import LocalPool


def _cfg(**kw) -> RunConfig:
    return sweep.canonical(RunConfig(**{"dataset": "academic", "rounds": 2, "recon_epochs": 1, "align_epochs": 1,
                                        "local_epochs": 1, "k": 10, **kw}))


def _reference(tmp_path: Path, configs, data_dir) -> Path:
    """The same runs through the local executor (in this process, one torch thread, as a worker computes)."""
    root = tmp_path / "local"
    res = sweep.run_sweep(configs, root, executor=LocalPool(0), data_dir=data_dir)
    assert res["finished"] == len(configs) and not res["failed"]
    return root


def _same_runs(a: Path, b: Path, configs) -> None:
    for cfg in configs:
        assert (sweep.run_dir(a, cfg) / "metrics.csv").read_bytes() == \
            (sweep.run_dir(b, cfg) / "metrics.csv").read_bytes(), sweep.describe(cfg)


def _finished_once(root: Path, configs) -> None:
    finished = [e["key"] for e in sweep.Ledger(root / sweep.LEDGER).events() if e["event"] == "finished"]
    assert sorted(finished) == sorted(c.key() for c in configs)


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
