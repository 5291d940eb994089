"""The Ray executor of ``fedgca sweep`` and ``compare`` (``--executor ray``): each run is one Ray task
with one CPU and one torch thread. Ray reuses its worker processes from run to run (a run's numbers
depend on its config alone: seeded generators, no global state — the equivalence test runs several runs
per worker); that saves the interpreter and torch start-up that the local pool pays per run
(``benchmarks/bench_ray.py``).

The driver (this process) keeps everything the local pool keeps — the run directories, the ledger, the
progress lines — so resume, ``--dry-run``, the ETA and ``report`` are the same for both executors.

**Files.** The driver writes a token into the sweep directory. A task that finds the same token at the
same path (a local Ray instance, or a cluster whose nodes share the filesystem) runs in place, exactly
as a local worker does: the run directory's lock, a checkpoint every round, the ledger's ``started``
line. A task on a node that does not see it runs in a scratch directory of its node, starting from the
driver's copy of the run directory (the checkpoint of an earlier attempt travels with the task), and
returns the finished directory's files; the driver writes them into ``runs/<key>/``, ``summary.json``
last, so that a run counts as finished only when whole. There, a run killed mid-way loses what it did
since the task started.

**Data.** A run reads its dataset (``--data-dir``, ``$FEDGCA_DATA_DIR``, or own data's files) by path
on the node that runs it: each node needs the files at the same path, as Flower's SuperNodes do.

**Faults.** A task whose worker process or node dies is retried by Ray (``RETRIES`` times); in place it
resumes from the run's last checkpoint, so the retried run writes the same ``metrics.csv``. The ledger
gets one ``finished`` line per run whatever happened (``sweep.Ledger.append(once=True)``).

**Loopback.** A local instance started here binds to 127.0.0.1 only (:mod:`fedgca.ray_local`); to use a
cluster, start it with ``ray start --node-ip-address`` on its private network (docs/cluster.md) and pass its
address (``--address``; ``auto`` finds a cluster started on this machine).
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from fedgca import rundir
from fedgca.ray_local import node_addresses, pin_loopback

log = logging.getLogger("fedgca")

TOKEN = ".ray-driver-token"
RETRIES = 3  # attempts after the first, when a worker process or its node dies
# A local instance's shared-memory object store: the largest object it holds is one run directory
# (a few MiB; its checkpoint) — Ray's default of 30 % of RAM would reserve gigabytes for nothing.
LOCAL_OBJECT_STORE = 256 * 2**20
_LAST = "summary.json"  # written last: its presence marks a finished run (fedgca.rundir.SUMMARY)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def require() -> None:
    if not available():
        raise RuntimeError("the Ray executor needs Ray: pip install 'fedgca[ray]' (Flower's simulation extra)")


def connect(address: str | None, workers: int, verbose: bool = False) -> bool:
    """Connect to a cluster at ``address`` (``auto``: one started on this machine), or start a local instance
    of ``workers`` CPUs bound to the loopback interface. Returns whether this call started Ray (and so stops it)."""
    require()
    import ray

    if ray.is_initialized():  # the caller's own connection (e.g. a test cluster): use it as it is
        return False
    common = dict(log_to_driver=verbose, logging_level=logging.INFO if verbose else logging.WARNING,
                  namespace="fedgca")
    if address:
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        ray.init(address=address, **common)
    else:
        ray.init(num_cpus=max(1, int(workers)), object_store_memory=LOCAL_OBJECT_STORE, **pin_loopback(), **common)
    return True


# --------------------------------------------------------------------------- the task (on a worker)

_THREADS_SET = False


def _task(execute: Callable, cfg_dict: dict, out: str, root: str, data, token: str, bundle: dict | None) -> dict:
    """One run on a Ray worker: ``execute(cfg_dict, out, root, data)`` in place when this node sees the driver's
    sweep directory, else in a scratch directory whose files are returned (``res["files"]``)."""
    global _THREADS_SET
    if not _THREADS_SET:  # one torch thread and one BLAS thread, as a local worker computes
        from fedgca.threads import limit_threads

        limit_threads(1)
        _THREADS_SET = True
    where = {"node": socket.gethostname(), "worker_pid": os.getpid()}
    try:
        shared = (Path(root) / TOKEN).read_text() == token
    except OSError:
        shared = False
    if shared:
        return {**execute(cfg_dict, out, root, data), **where, "in_place": True}
    with tempfile.TemporaryDirectory(prefix="fedgca-run-") as scratch:
        run = Path(scratch) / "run"
        run.mkdir()
        for rel, blob in (bundle or {}).items():
            (run / rel).parent.mkdir(parents=True, exist_ok=True)
            (run / rel).write_bytes(blob)
        res = execute(cfg_dict, str(run), scratch, data)
        if res.get("status") == "finished":
            res["files"] = {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
                            if p.is_file() and not p.name.startswith(".")}
        return {**res, **where, "in_place": False}


# --------------------------------------------------------------------------- the driver


def bundle(out: Path) -> dict | None:
    """The files of an unfinished run directory that has a checkpoint (what a scratch run resumes from)."""
    out = Path(out)
    if not (out / "checkpoint.pt").exists():
        return None
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def unpack(files: dict[str, bytes], out: Path) -> None:
    """Write a run's returned files into ``out``, each atomically and durably (``rundir``'s rule), ``summary.json``
    last."""
    out = Path(out)
    for rel in sorted(files, key=lambda r: r == _LAST):
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rundir.atomic_write_bytes(path, files[rel])


def run_all(jobs: list[tuple], execute: Callable, on_result: Callable, *, root: Path, workers: int,
            address: str | None = None, verbose: bool = False, gpus_per_run: float = 0.0) -> None:
    """Run ``jobs`` — ``(job, cfg_dict, out, data)`` each — as Ray tasks; ``on_result(job, res)`` as each ends.

    ``res`` is ``execute``'s dict (its ``files`` already written into ``out``), or a failure after Ray's
    retries. ``gpus_per_run``: the GPU share each task asks Ray for (runs with ``--device cuda``; 0.25 packs
    four runs on a GPU); Ray then gives each task its GPU(s) in ``CUDA_VISIBLE_DEVICES``. A KeyboardInterrupt (Ctrl-C, or the sweep's SIGTERM) cancels the tasks and stops a local instance.
    """
    import ray

    started = connect(address, workers, verbose)
    root = Path(root)
    token = secrets.token_hex(16)
    (root / TOKEN).write_text(token)
    pending: dict = {}
    try:
        log.info("ray: %d CPU(s) in the cluster, nodes at %s", int(ray.cluster_resources().get("CPU", 0)),
                 ", ".join(sorted(set(node_addresses()))))
        task = ray.remote(num_cpus=1, num_gpus=gpus_per_run, max_retries=RETRIES,
                          retry_exceptions=False)(_task)
        for job, cfg_dict, out, data in jobs:
            ref = task.remote(execute, cfg_dict, str(out), str(root), data, token, bundle(Path(out)))
            pending[ref] = (job, Path(out))
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            job, out = pending.pop(done[0])
            try:
                res = ray.get(done[0])
            except ray.exceptions.RayError as err:  # the worker or node died RETRIES + 1 times
                res = {"status": "failed", "error": f"Ray task failed after {RETRIES + 1} attempts: "
                                                    f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
            files = res.pop("files", None)
            if files:
                unpack(files, out)
            on_result(job, res)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
        (root / TOKEN).unlink(missing_ok=True)
