"""The batched engine as a sweep executor: many runs in one process, their local epochs computed together.

The sweep's runs are grouped by dataset and device (runs of one dataset share the model's shapes) into stacks
of at most ``stack`` runs. A stack's runs each run in a thread of their own — the same ``sweep.execute`` as a
worker process runs: lock, ledger entry, ``runner.run``, run directory, checkpoints, resume — and train under one
``training.lockstep.EpochBroker``, which computes the local epochs they reach together as one stacked epoch.
Each run's numbers are the ones it gives alone on the same device (tests/test_lockstep.py). A stopped sweep
resumes like any other: each run from its last checkpoint.

Stacks of different datasets (or of one dataset's runs beyond ``stack``) compute ``--workers`` at a time, each with
its own threads and, on a GPU, its own CUDA stream — in this process, or with ``--processes`` each in a worker
process of its own (``run_in_processes``), so that the stacks' host work does not share one interpreter lock. Meant
for a GPU, where one run leaves the card launch-bound; on CPU cores the process pool is as fast.
"""
from __future__ import annotations

import contextlib
import functools
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
            max_clients: int | None = None, concurrent: int = 1) -> None:
    """``jobs``: (cfg, execute's positional arguments) per run; ``on_result(cfg, result)`` in this thread as
    each run ends. ``concurrent`` stacks compute at once (``--workers``): each on a thread of its own for each of
    its runs and its own broker, and on a GPU its own CUDA stream, so that one stack's host work (clustering,
    evaluation, checkpoints) overlaps another's kernels; on CPU cores one stack per core. A stack's numbers do not
    depend on the others (tests/test_lockstep.py)."""
    from fedgca.threads import DEFAULT_TORCH_THREADS, limit_threads

    limit_threads(DEFAULT_TORCH_THREADS)  # what a worker of the local pool computes with: the same numbers
    by_key = {cfg.key(): (cfg, args) for cfg, args in jobs}
    groups = stacks([cfg for cfg, _ in jobs], stack)
    done: queue.Queue = queue.Queue()
    left: dict[int, int] = {}
    waiting = list(enumerate(groups))[::-1]  # popped from the end: in order

    def start_next() -> None:
        gi, group = waiting.pop()
        left[gi] = len(group)
        _start_group(gi, group, by_key, execute, done, max_clients)

    for _ in range(min(max(1, concurrent), len(waiting))):
        start_next()
    while left:
        gi, cfg, res = done.get()
        on_result(cfg, res)
        left[gi] -= 1
        if not left[gi]:
            del left[gi]
            if waiting:
                start_next()


def _start_group(gi: int, group: list, by_key: dict, execute, done: queue.Queue, max_clients: int | None) -> None:
    """A stack's runs, each on a thread of its own, training under one broker (on its own CUDA stream on a GPU)."""
    import torch

    from fedgca import devices
    from fedgca.threads import DEFAULT_TORCH_THREADS
    from fedgca.training.lockstep import EpochBroker

    broker = EpochBroker(len(group), max_clients=max_clients)
    device = devices.resolve(group[0].device)
    stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None

    def one(cfg, args):
        torch.set_num_threads(DEFAULT_TORCH_THREADS)  # OpenMP's thread count is per thread: a new one has all
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                res = execute(*args, broker=broker)
        except BaseException as err:  # noqa: BLE001 — execute never raises but for an interrupt
            res = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
        done.put((gi, cfg, res))

    # daemon threads: an interrupted sweep exits at once, and each run resumes from its last checkpoint
    for cfg in group:
        threading.Thread(target=one, args=by_key[cfg.key()], daemon=True, name=f"run-{cfg.key()}").start()


def run_in_processes(jobs: list[tuple], execute, on_result, *, stack: int, workers: int, verbose: bool,
                     ledger) -> None:
    """The stacks in worker processes, ``workers`` at once, one stack per process (``--processes``): forked warm
    and recovered from a worker's death as the local pool's runs are (``local_executor.run_units``). ``jobs``:
    (cfg, run directory, ``execute``'s arguments) per run; ``on_result`` here as each stack ends.

    Why: in one process every run's host work (its round's Python, the server's code, checkpoints) holds that
    process's one interpreter lock, which bounds a GPU fed by many small runs (docs/performance.md); here each
    stack has a lock of its own. A stack's numbers are the same in any process (tests/test_lockstep.py)."""
    from fedgca.experiments import local_executor

    by_key = {job[0].key(): job for job in jobs}
    units = [[by_key[cfg.key()] for cfg in group] for group in stacks([job[0] for job in jobs], stack)]
    local_executor.run_units(units, functools.partial(run_stack, execute), on_result, workers=workers,
                             verbose=verbose, ledger=ledger)


def run_stack(execute, jobs: list[tuple]) -> list[dict]:
    """One stack in this (worker) process: its runs' results in order."""
    results: dict = {}
    run_all([(cfg, args) for cfg, _, args in jobs], execute, lambda cfg, res: results.__setitem__(cfg.key(), res),
            stack=len(jobs))
    return [results[cfg.key()] for cfg, _, _ in jobs]


__all__ = ["DEFAULT_STACK", "run_all", "run_in_processes", "run_stack", "stacks"]
