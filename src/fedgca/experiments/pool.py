"""The local executor's process pool: workers that start warm, worker set-up, stopping every worker now, and
workers that never re-run the caller's script. ``fedgca.experiments.sweep`` runs a sweep's runs in it; ``bench``
its peer fits.

Workers start warm: a run's process is forked from multiprocessing's fork server, a process started once per sweep
that has already imported torch, pandas and fedgca (``PRELOAD``), instead of a fresh interpreter that imports them
again (1.4–1.5 s a run, docs/performance.md). Each run still gets a process of its own, a fork of the same pristine
server (the same state for every run: the same numbers), so a run that dies takes no other with it. The server
itself never computes: torch's OpenMP pool is never started in it, and each worker limits torch and BLAS to one
thread (``_worker_init``), as a spawned worker did. ``FEDGCA_WORKER_START=spawn`` brings
back fresh interpreters (the benchmark compares the two)."""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

from fedgca.threads import limit_threads

# What a run's process would import on its way (measured: torch 1.5 s, scikit-learn's clustering 1.3 s, pandas
# 0.5 s): imported once, by the fork server. PyOD's detectors (another 1 s) only where a peer fit will run
# (``worker_context(peers=True)``). A module that is not installed (PyOD without fedgca[peers]) is skipped there.
PRELOAD = ("numpy", "pandas", "torch", "scipy.stats", "sklearn.cluster", "sklearn.mixture", "sklearn.metrics",
           "fedgca.simulation.runner", "fedgca.experiments.sweep", "fedgca.protocol.clustering.fit",
           "fedgca.protocol.clustering.gmm", "fedgca.detector")
PEER_PRELOAD = ("fedgca.experiments.peers", "pyod.models.iforest", "pyod.models.ecod", "pyod.models.auto_encoder",
                "pyod.models.knn", "pyod.models.lof", "fedgca.experiments.peers_jit")
START_METHODS = ("forkserver", "spawn")
START_ENV = "FEDGCA_WORKER_START"
_peers_wanted = False  # once a process asked for peers, its fork server (started once) preloads them


def worker_context(peers: bool = False):
    """The multiprocessing context of the local pools: the warm fork server where the platform has one (Linux,
    macOS), else fresh interpreters ("spawn"); ``$FEDGCA_WORKER_START`` chooses. ``peers``: this process will fit
    PyOD peers (the bench asks before its first pool, since the server reads its preload list once)."""
    global _peers_wanted
    _peers_wanted = _peers_wanted or peers
    method = os.environ.get(START_ENV) or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                          else "spawn")
    if method not in START_METHODS:
        raise ValueError(f"${START_ENV} must be one of {', '.join(START_METHODS)}, got {method!r}")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":  # read when the server starts: once per sweep process
        ctx.set_forkserver_preload(list(PRELOAD + (PEER_PRELOAD if _peers_wanted else ())))
    return ctx


def _worker_init(threads: int, verbose: bool) -> None:
    """Runs in each fresh worker process: thread budget, logging, and exit when the sweep dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the sweep stops us
    limit_threads(threads)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s [run %(process)d] %(message)s")
    parent, parent_pid = multiprocessing.parent_process(), os.getppid()

    def watchdog():  # a killed sweep must not leave runs going on behind the restarted one
        while True:
            time.sleep(1.0)
            # the sweep's end of this worker's set-up pipe: closed when the sweep dies, however it dies. (A fork
            # server's worker is not the sweep's child, and it keeps the server alive: the parent pid alone is no
            # sign of the sweep.)
            if (parent is not None and not parent.is_alive()) or os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watchdog, daemon=True).start()


def _silence(thread) -> None:
    """Drop uncaught exceptions of ``thread`` (the stopping pool's manager): it can still be queueing a work
    item whose entry ``_stop_workers`` just forgot (a KeyError in CPython's executor), and a stopped sweep
    must end with its one line, not a traceback. Every other thread's exceptions are reported as before."""
    if thread is None:
        return
    previous = threading.excepthook

    def hook(args):
        if args.thread is not thread:
            previous(args)

    threading.excepthook = hook


def _stop_workers(pool, grace: float = 30.0) -> None:
    """Stop a pool's workers now: on a stop, ``shutdown(wait=True)`` would wait for runs of an hour; at a pool's
    normal end, for replacement workers that have no run to do.

    The pool replaces a worker after each run (``max_tasks_per_child=1``), so a replacement may be
    starting while we stop the others: keep terminating every child until the pool's manager thread
    has ended (otherwise interpreter exit waits on that thread for ever). CPython's pool internals, read
    defensively: ``_processes``, ``_pending_work_items``, ``_executor_manager_thread(_wakeup)``.
    """
    # read before shutdown(), which sets them to None
    manager = getattr(pool, "_executor_manager_thread", None)
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    processes = getattr(pool, "_processes", None) or {}
    _silence(manager)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace

    def terminate_all():  # a fork server's workers are not our children: the pool's list (kept past shutdown) has them
        for proc in [*processes.values(), *multiprocessing.active_children()]:
            if proc.is_alive():
                proc.terminate()

    while True:
        terminate_all()
        # The manager thread ends once no work is pending; the runs we stopped never reply, so forget them
        # (their futures are abandoned with the pool).
        getattr(pool, "_pending_work_items", {}).clear()
        if wakeup is not None:
            try:
                wakeup.wakeup()
            except (OSError, ValueError):
                pass
        if manager is None or not manager.is_alive() or time.monotonic() > deadline:
            terminate_all()  # a replacement the manager started after the last pass
            return
        manager.join(0.2)


def stop_server() -> None:
    """On a stop (SIGTERM, Ctrl-C): end the fork server at once as well. It would end by itself once the sweep and
    its workers are gone, but only after tearing down the torch and scikit-learn it imported (a second or more),
    so a stopped sweep would leave a process running behind it. multiprocessing's internals, read defensively."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)  # it handles SIGCHLD and ignores SIGINT; SIGTERM ends it where it stands
        except OSError:
            pass


def finish(pool, completed: bool, *, slow_replacements: bool = False) -> None:
    """End a pool: when every job of it completed, let its workers exit on their own — a worker stopped by a
    signal never runs its exit handlers, and a semaphore one of its libraries made (PyOD's AutoEncoder makes one)
    is then reported by Python as leaked when the sweep ends; otherwise (a stop, an error) stop them now.
    ``slow_replacements``: the pool starts a fresh interpreter after each job (``max_tasks_per_child`` with
    "spawn"), which would still be importing torch: those are stopped too rather than waited for."""
    if completed and not slow_replacements:
        try:
            pool.shutdown(wait=True)
            return
        except BaseException:  # a stop (SIGTERM, Ctrl-C) while waiting: a replacement may be starting, stop it too
            _stop_workers(pool)
            raise
    _stop_workers(pool)


@contextlib.contextmanager
def bare_main():
    """Worker processes that never re-run the caller's script.

    A spawned worker imports the parent's ``__main__`` file first (multiprocessing's "spawn" does, to find
    functions defined there); from a plain script without an ``if __name__ == "__main__":`` guard that re-runs
    the script's own ``fedgca.compare`` call in every worker, which dies. Every function a worker runs lives in
    fedgca, so while our pools start workers the parent shows them a bare ``__main__`` with no file to import.
    """
    import sys
    import types

    main = sys.modules.get("__main__")
    if main is None or not getattr(main, "__file__", None):  # an interactive session or a notebook: nothing to hide
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def study_jobs(fn, jobs: list[tuple], workers: int) -> None:
    """A study script's jobs, ``fn(*job)`` each on a pool of ``workers`` one-thread processes (``fn``: a function
    of an importable module, returning what the job wrote); one line per job, a failed one named and the others
    going on."""
    import concurrent.futures as cf
    import sys

    pool = cf.ProcessPoolExecutor(workers, mp_context=worker_context(), initializer=_worker_init, initargs=(1, False))
    completed = False
    try:
        with bare_main():
            for fut in cf.as_completed([pool.submit(fn, *j) for j in jobs]):
                try:
                    print(f"measured {Path(fut.result()).name}", file=sys.stderr)
                except Exception as err:  # noqa: BLE001 — one line, the others go on
                    print(f"failed: {type(err).__name__}: {err}", file=sys.stderr)
        completed = True
    finally:
        finish(pool, completed)
