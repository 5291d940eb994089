"""``fedgca sweep``: a resumable grid of runs (datasets × methods × backends × K × weights × partitions × seeds).

A sweep file (TOML) holds an optional ``[base]`` table of :class:`RunConfig`
fields shared by every run, and one ``[grid]`` table or several ``[[grid]]``
tables; each grid maps RunConfig fields to a value or a list of values, and
its runs are the Cartesian product (merged over ``[base]``)::

    out = "results/sweep_k"          # optional; --out wins
    [base]
    rounds = 100
    [[grid]]
    dataset = ["academic", "magic"]
    method = "gca"
    k = [10, 20, 40, 80]
    seed = [100, 200, 300]

Every run is named by the key of its *canonical* config (:func:`canonical`:
options a method does not read are reset to their defaults, so a grid over K
runs each baseline once) and lives in ``DIR/runs/<key>/``. A run is finished
when its ``summary.json`` exists; finished runs are skipped, unfinished ones
with a checkpoint resume from their last completed round. ``DIR/ledger.jsonl``
is an append-only, fsync'd log of ``started`` / ``finished`` / ``failed``
events (with the config and, for failures, the error text). A failed run does
not stop the sweep; the next invocation retries it.

Runs execute where the sweep's executor puts them (``experiments/executors.py``; by default worker processes,
``--workers N``, one process per run forked warm, each with one torch thread and single-threaded BLAS, like
``fedgca run``). A sweep killed at any moment
resumes with nothing lost or duplicated: each run holds an exclusive lock on
its directory while it runs (so an orphaned worker and a restarted sweep never
write the same run), and a ``finished`` event is written exactly once per key
(a summary written just before a kill is recorded on the next start).
"""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading
import time
import traceback
from pathlib import Path

from fedgca.config import ADDED_LATER, RunConfig
from fedgca.data.source import source_for
from fedgca.experiments import cost
from fedgca.experiments.executors import KINDS, Executor, LocalPool, Runs
from fedgca.experiments.ledger import Ledger, lock
from fedgca.experiments.pool import stop_server
from fedgca.experiments.sweep_spec import (
    OWN_DATA_KEYS,
    SweepSpec,
    canonical,
    load_spec,
    parse_spec,
)
from fedgca.rundir import CHECKPOINT, SUMMARY

log = logging.getLogger("fedgca")

LEDGER = "ledger.jsonl"
RUNS = "runs"
LOCK = ".lock"


# --------------------------------------------------------------------------- running


def run_dir(root: Path, cfg: RunConfig) -> Path:
    return Path(root) / RUNS / cfg.key()


def status(root: Path, configs: list[RunConfig]) -> dict[str, str]:
    """key → "finished" | "partial" (has a checkpoint) | "failed" (last attempt) | "pending"."""
    failed = {}
    for e in Ledger(Path(root) / LEDGER).events():
        if e.get("event") in ("failed", "finished", "started"):
            failed[e["key"]] = e["event"] == "failed"
    out = {}
    for cfg in configs:
        d = run_dir(root, cfg)
        key = cfg.key()
        if (d / SUMMARY).exists():
            out[key] = "finished"
        elif failed.get(key):
            out[key] = "failed"
        elif (d / CHECKPOINT).exists():
            out[key] = "partial"
        else:
            out[key] = "pending"
    return out


class SweepStopped(KeyboardInterrupt):
    """SIGTERM or Ctrl-C: the workers were stopped; running the same sweep again resumes it."""


def _stop_on_sigterm(signum, frame):
    raise SweepStopped("SIGTERM")


def execute(cfg_dict: dict, out: str, root: str, source, broker=None) -> dict:
    """One run, in a worker process (or a thread of the batched engine, whose ``broker`` it leaves when it
    ends, however it ends). Never raises: returns {"status": ..., ...}."""
    try:
        return _execute(cfg_dict, out, root, source, broker)
    finally:
        if broker is not None:
            broker.leave()


def _execute(cfg_dict: dict, out: str, root: str, source, broker) -> dict:
    from fedgca.simulation.runner import run

    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    key = RunConfig.from_dict(cfg_dict).key()
    fd = os.open(out_p / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock(fd)  # waits for an orphaned worker of a killed sweep to finish this same run
        if (out_p / SUMMARY).exists():
            return {"status": "finished", "resumed": False, "already": True}
        resume = (out_p / CHECKPOINT).exists()
        Ledger(Path(root) / LEDGER).append("started", key, resume=resume, config=cfg_dict)
        t0 = time.perf_counter()
        try:
            summary = run(RunConfig.from_dict(cfg_dict), out_p, source=source, resume=resume, progress=False,
                          broker=broker)
        except BaseException as err:  # noqa: BLE001 — recorded, the sweep goes on
            if isinstance(err, KeyboardInterrupt):
                raise
            return {"status": "failed", "error": f"{type(err).__name__}: {err}",
                    "traceback": traceback.format_exc()}
        return {"status": "finished", "resumed": resume, "seconds": round(time.perf_counter() - t0, 3),
                "peak_accuracy": summary["peak"]["accuracy"], "final_accuracy": summary["final"]["accuracy"]}
    finally:
        os.close(fd)


def _record(ledger: Ledger, finished: set, result: dict, cfg: RunConfig, root: Path, n_todo: int, res: dict) -> None:
    """The parent's ledger entry for a run's outcome (at most one "finished" per key, ever)."""
    key, d = cfg.key(), run_dir(root, cfg)
    if res["status"] == "finished":
        if key not in finished:
            ledger.append("finished", key, once=True, out=str(d), config=cfg.to_dict(),
                          **{k: v for k, v in res.items() if k != "status"})
            finished.add(key)
        result["finished"] += 1
        result["flops_done"] = result.get("flops_done", 0.0) + result.get("flops", {}).get(key, 0.0)
        done = result["finished"] + len(result["failed"])
        log.info("[%d/%d] finished %s (%s)%s%s", done, n_todo, key, describe(cfg),
                 f" peak acc {res['peak_accuracy']:.4f}" if "peak_accuracy" in res else "", _eta(result, done, n_todo))
    else:
        ledger.append("failed", key, out=str(d), config=cfg.to_dict(), error=res["error"],
                      traceback=res.get("traceback", ""))
        result["failed"].append({"key": key, "run": describe(cfg), "error": res["error"]})
        result["flops_total"] = result.get("flops_total", 0.0) - result.get("flops", {}).get(key, 0.0)
        log.error("run %s (%s) failed: %s", key, describe(cfg), res["error"])


def _eta(result: dict, done: int, n_todo: int) -> str:
    """'; 12m elapsed, ETA 40m' from this invocation's pace (runs finish in parallel: the pace includes it).

    The pace is per protocol FLOP (``experiments.cost``) when every run's could be counted — an adult run
    costs ~6× an academic one, so a count of runs misleads — else per run.
    """
    if "t0" not in result or not done:
        return ""
    elapsed = time.monotonic() - result["t0"]
    total, did = result.get("flops_total"), result.get("flops_done")
    if total and did:
        left = elapsed / did * (total - did)
        return f"; {cost.hours(elapsed)} elapsed, ETA {cost.hours(left)} ({(total - did) / 1e12:.1f} TFLOP left)"
    return f"; {cost.hours(elapsed)} elapsed, ETA {cost.hours(elapsed / done * (n_todo - done))}"


def predicted_flops(configs: list[RunConfig], data_dir=None, sources=None) -> dict[str, float] | None:
    """Each run's protocol FLOPs by key; None when a dataset cannot be read here (the ETA then counts runs)."""
    try:
        return {c.key(): cost.run_flops(c, cost.sizes(c, source_for(c.dataset, data_dir, sources))) for c in configs}
    except Exception as err:  # noqa: BLE001 — an ETA is not worth failing a sweep for
        log.warning("no FLOP prediction for these runs (%s: %s): ETAs count runs", type(err).__name__, err)
        return None


def measured_rate(root: Path, flops: dict[str, float]) -> float | None:
    """Protocol FLOPs per second of the runs this sweep directory finished (the ledger's run times)."""
    did = secs = 0.0
    for e in Ledger(Path(root) / LEDGER).events():
        if e.get("event") == "finished" and e.get("seconds") and e["key"] in flops and not e.get("resumed"):
            did += flops[e["key"]]
            secs += float(e["seconds"])
    return did / secs if secs else None


SPEC_FILE = "sweep.json"  # the sweep's whole grid, written by every start of it


def remaining(root, configs: list[RunConfig] | None = None, data_dir=None, sources=None) -> dict | None:
    """What sweep ``root`` has left: each config's state (``status``), the configs not finished, their predicted
    protocol FLOPs and the pace its finished runs averaged (FLOP/s; None before any finished). ``configs``: the
    sweep's grid, by default the one its last start recorded (``sweep.json``); None when ``root`` holds none."""
    root = Path(root)
    if configs is None:
        try:
            configs = [RunConfig.from_dict(e["config"]) for e in json.loads((root / SPEC_FILE).read_text())]
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as err:  # another version's file, or a damaged one
            raise ValueError(f"{root / SPEC_FILE}: not a sweep's grid ({err})") from None
    states = status(root, configs)
    flops = predicted_flops(configs, data_dir, sources) or {}
    left = [c for c in configs if states[c.key()] != "finished"]
    return {"configs": configs, "states": states, "left": left, "flops": flops,
            "left_flops": math.fsum(flops[c.key()] for c in left) if flops else None,
            "rate": measured_rate(root, flops) if flops else None}


def pace_text(left_flops: float, rate: float | None) -> str:
    """'1322.9 TFLOP of protocol work (experiments/cost.py); ≈ 5h49m of one worker at the 63.2 GFLOP/s ...'."""
    pace = (f"≈ {cost.hours(left_flops / rate)} of one worker at the {rate / 1e9:.1f} GFLOP/s its finished runs "
            "averaged" if rate else "no finished run to measure a pace on yet")
    return f"{left_flops / 1e12:.1f} TFLOP of protocol work (experiments/cost.py); {pace}"


def describe(cfg: RunConfig) -> str:
    parts = [cfg.dataset, cfg.method, f"seed={cfg.seed}", f"partition={cfg.partition}"]
    if cfg.spec.family == "gca":
        parts += [f"backend={cfg.backend}", f"K={cfg.k}", f"weights={cfg.weights}"]
    # the options added after the paper's runs (protocol variants, DP), where a run departs from their default
    parts += [f"{name}={getattr(cfg, name)}" for name, default in ADDED_LATER.items()
              if name in cfg.spec.options and getattr(cfg, name) != default]
    return " ".join(parts)


ORDERS = ("grid", "longest-first")
EXECUTORS = KINDS  # (experiments.executors: the executor objects and their options)


def run_sweep(configs: list[RunConfig], root, *, executor: Executor | None = None, data_dir=None, sources=None,
              retry_failed: bool = True, order: str = "grid") -> dict:
    """Run every config not finished in ``root``; returns counts and the failures. Each run's records:
    ``sources[cfg.dataset]`` (own data's :class:`~fedgca.data.DataSource` by name), else the built-in dataset in
    ``data_dir`` (``fedgca.data.source_for``, once per run, here).

    ``executor`` (:mod:`fedgca.experiments.executors`; default one local worker process): a pool of worker
    processes on this machine, one Ray task per run on a cluster or a local Ray instance, or the batched engine
    (the runs of one dataset in this process, their local epochs computed together; for a GPU). All write the same
    run directories and ledger.

    ``order``: "grid" starts the runs in the file's order (its first cells finish first, for a partial
    report); "longest-first" by predicted FLOPs, largest first, so that the last runs to start are the
    short ones and no worker idles for long at the end (longest-processing-time scheduling).
    """
    executor = executor if executor is not None else LocalPool()
    if order not in ORDERS:
        raise ValueError(f"--order {order!r}: choose one of {', '.join(ORDERS)}")
    executor.require()  # before anything is written
    root = Path(root)
    (root / RUNS).mkdir(parents=True, exist_ok=True)
    ledger = Ledger(root / LEDGER)
    (root / SPEC_FILE).write_text(json.dumps(
        [{"key": c.key(), "config": c.to_dict()} for c in configs], indent=1))

    finished = ledger.finished_keys()
    states = status(root, configs)
    todo = []
    for cfg in configs:
        key, d = cfg.key(), run_dir(root, cfg)
        if states[key] == "finished":
            if key not in finished:  # its summary was written just before a kill
                ledger.append("finished", key, once=True, recovered=True, out=str(d), config=cfg.to_dict())
                finished.add(key)
            continue
        if states[key] == "failed" and not retry_failed:
            continue
        todo.append(cfg)
    result = {"total": len(configs), "skipped": len(configs) - len(todo), "finished": 0, "failed": []}
    log.info("sweep %s: %d runs, %d already done, %d to run on %s", root, len(configs), result["skipped"],
             len(todo), executor.describe())
    if not todo:
        return result
    flops = predicted_flops(todo, data_dir, sources)
    if flops:
        result.update(flops=flops, flops_total=sum(flops.values()), flops_done=0.0)
        log.info("sweep %s: %.1f TFLOP of protocol work to run (experiments/cost.py)", root, result["flops_total"] / 1e12)
        if order == "longest-first":
            todo.sort(key=lambda c: -flops[c.key()])  # stable: equal costs keep the grid's order
    elif order == "longest-first":
        log.warning("sweep %s: no FLOP predictions, so the runs start in the grid's order", root)
    result["t0"] = time.monotonic()  # for the ETA in the progress lines; removed before returning

    def on_result(cfg: RunConfig, res: dict) -> None:
        _record(ledger, finished, result, cfg, root, len(todo), res)

    in_main = threading.current_thread() is threading.main_thread()  # only there can a signal handler go
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if in_main else None
    try:
        executor.run(Runs(todo, root, ledger, execute, on_result, lambda c: run_dir(root, c),
                          lambda c: source_for(c.dataset, data_dir, sources)))
    except KeyboardInterrupt as stop:
        stop_server()
        raise SweepStopped(
            f"sweep {root} stopped ({stop if isinstance(stop, SweepStopped) else 'interrupted'}) after "
            f"{result['finished']} of {len(todo)} run(s) finished; run the same command again to resume "
            "(an unfinished run continues from its last completed round)") from None
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        for k in ("t0", "flops", "flops_total", "flops_done"):
            result.pop(k, None)
    return result


__all__ = ["EXECUTORS", "LEDGER", "OWN_DATA_KEYS", "ORDERS", "Ledger", "SweepSpec", "SweepStopped", "canonical",
           "execute", "load_spec", "parse_spec", "run_dir", "run_sweep", "status"]
