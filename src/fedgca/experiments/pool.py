"""The local executor's process pool: worker set-up, stopping every worker now, and workers that never re-run
the caller's script. ``fedgca.experiments.sweep`` runs a sweep's runs in it; ``bench`` its peer fits."""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time

from fedgca.threads import limit_threads


def _worker_init(threads: int, verbose: bool) -> None:
    """Runs in each fresh worker process: thread budget, logging, and exit when the sweep dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the sweep stops us
    limit_threads(threads)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s [run %(process)d] %(message)s")
    parent = os.getppid()

    def watchdog():  # a killed sweep must not leave runs going on behind the restarted one
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
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
    _silence(manager)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace
    while True:
        for proc in [*(getattr(pool, "_processes", None) or {}).values(), *multiprocessing.active_children()]:
            if proc.is_alive():
                proc.terminate()
        # The manager thread ends once no work is pending; the runs we stopped never reply, so forget them
        # (their futures are abandoned with the pool).
        getattr(pool, "_pending_work_items", {}).clear()
        if wakeup is not None:
            try:
                wakeup.wakeup()
            except (OSError, ValueError):
                pass
        if manager is None or not manager.is_alive() or time.monotonic() > deadline:
            return
        manager.join(0.2)


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
