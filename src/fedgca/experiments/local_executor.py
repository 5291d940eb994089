"""The local executor: a sweep's runs in a pool of worker processes on this machine, one fresh process per run
(one torch thread, single-threaded BLAS, as ``fedgca run``), forked warm (``pool.worker_context``), robust to a
worker that dies."""
from __future__ import annotations

import concurrent.futures as cf
import functools
from pathlib import Path

from fedgca.experiments.ledger import Ledger
from fedgca.experiments.pool import _worker_init, finish, worker_context
from fedgca.rundir import SUMMARY

DIED = "worker process died (killed, out of memory, or could not start)"


def run_all(jobs: list[tuple], execute, on_result, *, workers: int, verbose: bool, ledger: Ledger) -> None:
    """``jobs``: (cfg, run directory, ``execute``'s arguments) per run; ``on_result(cfg, result)`` here, in the
    sweep's process, as each run ends. ``workers`` ≤ 0: one after another in this process (no isolation)."""
    if int(workers) <= 0:
        for cfg, _, args in jobs:
            on_result(cfg, execute(*args))
        return
    run_units([[job] for job in jobs], functools.partial(_each, execute), on_result, workers=workers,
              verbose=verbose, ledger=ledger)


def _each(execute, jobs: list[tuple]) -> list[dict]:
    """A unit of single runs, in the worker: each run's result."""
    return [execute(*args) for _, _, args in jobs]


def run_units(units: list[list[tuple]], call, on_result, *, workers: int, verbose: bool, ledger: Ledger) -> None:
    """Units of runs in a pool of ``workers`` processes, one fresh process per unit: ``units`` are lists of jobs
    (cfg, run directory, arguments), ``call(unit)`` (picklable) computes one in a worker and returns its runs'
    results in order; ``on_result(cfg, result)`` here as each unit ends. A unit is one run (``run_all``) or a
    stack of the batched engine (``batched_executor.run_in_processes``)."""
    workers = max(1, min(int(workers), len(units)))
    # One thread per run, as `fedgca run` uses: a second thread bought ~6 % alone, and a sweep that took
    # cores // workers threads beside other load (another sweep) ran ~5× slower.
    threads = 1
    ctx = worker_context()
    pending, suspects = list(units), []
    while pending or suspects:
        # A worker that dies (killed, out of memory) breaks the whole pool. Runs that had not started are
        # submitted again; runs that were in flight are re-run one unit at a time in a pool of their own, and
        # only a run that breaks its own pool is recorded as failed.
        if pending:
            batch, n, isolated = pending, workers, False
        else:
            batch, n, isolated = [suspects.pop(0)], 1, True
        events_before = len(ledger.events())
        broken: list[list[tuple]] = []
        pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, max_tasks_per_child=1,
                                      initializer=_worker_init, initargs=(threads, verbose))
        completed = False
        try:
            futures = {pool.submit(call, unit): unit for unit in batch}
            for fut in cf.as_completed(futures):
                unit = futures[fut]
                try:
                    results = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(unit)
                    continue
                for job, res in zip(unit, results):
                    on_result(job[0], res)
            completed = not broken
        finally:
            # The pool replaces each worker after its unit. Forked warm, the replacements are up at once and exit
            # cleanly; fresh interpreters would still be importing torch, and a SIGTERM while waiting for them left
            # them orphaned (each printed a SemLock traceback): those, and every pool that stops early, are stopped.
            finish(pool, completed, slow_replacements=ctx.get_start_method() != "forkserver")
        started = {e["key"] for e in ledger.events()[events_before:] if e.get("event") == "started"}
        if broken and not started:  # the pool broke before any run started: do not loop forever
            started = {job[0].key() for unit in broken for job in unit}
        pending = []
        for unit in broken:
            left = []
            for job in unit:
                if (Path(job[1]) / SUMMARY).exists():
                    on_result(job[0], {"status": "finished", "recovered": True})
                else:
                    left.append(job)
            if not left:
                continue
            if not any(job[0].key() in started for job in left):
                pending.append(left)
            elif not isolated:
                suspects.append(left)
            else:
                for job in left:
                    on_result(job[0], {"status": "failed", "error": DIED})


__all__ = ["DIED", "run_all", "run_units"]
