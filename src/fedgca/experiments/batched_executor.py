"""The batched engine as a sweep executor: many runs in one process, their local epochs computed together.

The sweep's runs are grouped by dataset and device (runs of one dataset share the model's shapes) into stacks
of at most ``stack`` runs. A stack's runs each run in a thread of their own — the same ``sweep.execute`` as a
worker process runs: lock, ledger entry, ``runner.run``, run directory, checkpoints, resume — and train under one
``training.lockstep.EpochBroker``, which computes the local epochs they reach together as one stacked epoch.
Each run's numbers are the ones it gives alone on the same device (tests/test_lockstep.py). A stopped sweep
resumes like any other: each run from its last checkpoint.

Meant for a GPU, where one run leaves the card launch-bound; on CPU cores the process pool is as fast.
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict

DEFAULT_STACK = 64


def stacks(todo: list, stack: int) -> list[list]:
    """The runs in groups that can share a stack: one dataset and device each, at most ``stack`` runs, in the
    order given (``stack`` ≥ 1: ``executors.Batched`` checks it)."""
    groups: OrderedDict = OrderedDict()
    for cfg in todo:
        groups.setdefault((cfg.dataset, cfg.device), []).append(cfg)
    return [g[i:i + stack] for g in groups.values() for i in range(0, len(g), stack)]


def run_all(jobs: list[tuple], execute, on_result, *, stack: int = DEFAULT_STACK,
            max_clients: int | None = None) -> None:
    """``jobs``: (cfg, execute's positional arguments) per run; ``on_result(cfg, result)`` in this thread as
    each run ends."""
    import torch

    from fedgca.threads import DEFAULT_TORCH_THREADS, limit_threads
    from fedgca.training.lockstep import EpochBroker

    limit_threads(DEFAULT_TORCH_THREADS)  # what a worker of the local pool computes with: the same numbers
    by_key = {cfg.key(): (cfg, args) for cfg, args in jobs}
    for group in stacks([cfg for cfg, _ in jobs], stack):
        broker = EpochBroker(len(group), max_clients=max_clients)
        done: queue.Queue = queue.Queue()

        def one(cfg, args, broker=broker, done=done):
            torch.set_num_threads(DEFAULT_TORCH_THREADS)  # OpenMP's thread count is per thread: a new one has all
            try:
                res = execute(*args, broker=broker)
            except BaseException as err:  # noqa: BLE001 — execute never raises but for an interrupt
                res = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
            done.put((cfg, res))

        # daemon threads: an interrupted sweep exits at once, and each run resumes from its last checkpoint
        threads = [threading.Thread(target=one, args=by_key[cfg.key()], daemon=True, name=f"run-{cfg.key()}")
                   for cfg in group]
        for t in threads:
            t.start()
        for _ in group:
            cfg, res = done.get()
            on_result(cfg, res)


__all__ = ["DEFAULT_STACK", "run_all", "stacks"]
