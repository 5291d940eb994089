"""Where a sweep's runs execute, as small objects: a local process pool, Ray tasks, or the batched engine.

Each is made once from what the user chose (``executor(kind, ...)``: the CLI's ``--executor --workers --address
--gpus-per-run --stack`` and the API's keywords), which is where every cross-check of those options lives, and is
handed down as it is: ``compare.run_grid`` → ``bench.run_bench`` / ``sweep.run_sweep`` → its ``run``. A run's files,
ledger entries and numbers are the same whichever runs it (tests/test_ray.py, tests/test_lockstep.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

KINDS = ("local", "ray", "batched")


@dataclass
class Runs:
    """What an executor is handed: the runs to do and the sweep's callbacks (``execute`` is the worker's entry,
    ``on_result(cfg, result)`` records an outcome in the sweep's process)."""

    todo: list
    root: Path
    ledger: object
    execute: Callable
    on_result: Callable
    run_dir: Callable  # cfg → its run directory
    source: Callable  # cfg → its DataSource

    def args(self, cfg) -> tuple:
        """``execute``'s arguments for one run."""
        return cfg.to_dict(), str(self.run_dir(cfg)), str(self.root), self.source(cfg)


@dataclass(frozen=True)
class LocalPool:
    """A pool of ``workers`` processes on this machine, forked warm, one per run (``workers`` ≤ 0: in this
    process, one run after another)."""

    workers: int = 1
    verbose: bool = False

    def describe(self) -> str:
        return f"{self.workers} worker(s)"

    def require(self) -> None:
        pass

    def run(self, runs: Runs) -> None:
        from fedgca.experiments import local_executor
        from fedgca.experiments.pool import bare_main

        jobs = [(c, runs.run_dir(c), runs.args(c)) for c in runs.todo]
        with bare_main():  # the pool's workers, and their replacements, never re-run the caller's script
            local_executor.run_all(jobs, runs.execute, runs.on_result, workers=self.workers, verbose=self.verbose,
                                   ledger=runs.ledger)


@dataclass(frozen=True)
class RayTasks:
    """One Ray task per run, on the cluster at ``address`` or on a local Ray instance of ``workers`` CPUs
    (docs/cluster.md); ``gpus_per_run``: the GPU share each task asks for."""

    workers: int = 1
    address: str | None = None
    gpus_per_run: float = 0.0
    verbose: bool = False

    def describe(self) -> str:
        return f"Ray ({self.address})" if self.address else f"{self.workers} worker(s) of Ray"

    def require(self) -> None:
        from fedgca.experiments import ray_executor

        ray_executor.require()  # before anything is written

    def run(self, runs: Runs) -> None:
        from fedgca.experiments import ray_executor

        def on_result(cfg, res: dict) -> None:
            if res.get("in_place") is False:  # it ran in a scratch directory of another node: the driver notes it
                runs.ledger.append("started", cfg.key(), executor="ray", node=res.get("node"), config=cfg.to_dict())
            runs.on_result(cfg, res)

        jobs = [(cfg, cfg.to_dict(), runs.run_dir(cfg), runs.source(cfg)) for cfg in runs.todo]
        ray_executor.run_all(jobs, runs.execute, on_result, root=runs.root,
                             workers=max(1, min(int(self.workers), len(runs.todo))), address=self.address,
                             verbose=self.verbose, gpus_per_run=self.gpus_per_run)


@dataclass(frozen=True)
class Batched:
    """The runs of one dataset, ``stack`` at a time, in this process, their local epochs computed together
    (``experiments/batched_executor.py``; for a GPU); ``workers`` stacks at once."""

    stack: int | None = None
    workers: int = 1
    processes: bool = False  # each of the ``workers`` stacks at once in a worker process of its own
    verbose: bool = False

    def __post_init__(self):
        if self.stack is not None and self.stack < 1:
            raise ValueError(f"--stack must be at least 1, got {self.stack}")

    def describe(self) -> str:
        return "the batched engine" + (f" ({self.workers} processes)" if self.processes else "")

    def require(self) -> None:
        pass

    def run(self, runs: Runs) -> None:
        from fedgca.experiments import batched_executor
        from fedgca.experiments.pool import bare_main

        stack = self.stack or batched_executor.DEFAULT_STACK
        if self.processes:
            jobs = [(c, runs.run_dir(c), runs.args(c)) for c in runs.todo]
            with bare_main():  # as the local pool's workers: they never re-run the caller's script
                batched_executor.run_in_processes(jobs, runs.execute, runs.on_result, stack=stack,
                                                  workers=max(1, self.workers), verbose=self.verbose,
                                                  ledger=runs.ledger)
            return
        jobs = [(c, runs.args(c)) for c in runs.todo]
        batched_executor.run_all(jobs, runs.execute, runs.on_result, stack=stack, concurrent=max(1, self.workers))


Executor = LocalPool | RayTasks | Batched


def executor(kind: str = "local", *, workers: int = 1, address: str | None = None, gpus_per_run: float = 0.0,
             stack: int | None = None, processes: bool = False, verbose: bool = False) -> Executor:
    """The executor the options name; every option another executor reads is refused in one line."""
    if kind not in KINDS:
        raise ValueError(f"--executor {kind!r}: choose one of {', '.join(KINDS)}")
    if (address or gpus_per_run) and kind != "ray":
        raise ValueError("--address and --gpus-per-run are the Ray executor's: add --executor ray")
    if (stack is not None or processes) and kind != "batched":
        raise ValueError("--stack and --processes are the batched executor's: add --executor batched")
    if processes and workers < 1:
        raise ValueError(f"--processes computes --workers stacks at once, one per process: --workers must be at "
                         f"least 1, got {workers}")
    if not 0 <= gpus_per_run <= 8:
        raise ValueError(f"--gpus-per-run must be in [0, 8], got {gpus_per_run!r}")
    if kind == "ray":
        return RayTasks(workers=workers, address=address, gpus_per_run=gpus_per_run, verbose=verbose)
    if kind == "batched":
        return Batched(stack=stack, workers=workers, processes=processes, verbose=verbose)
    return LocalPool(workers=workers, verbose=verbose)


__all__ = ["KINDS", "Batched", "Executor", "LocalPool", "RayTasks", "Runs", "executor"]
