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

Runs execute in worker processes (``--workers N``, one fresh process per run,
each with one torch thread and single-threaded BLAS, like ``fedgca run``). A sweep killed at any moment
resumes with nothing lost or duplicated: each run holds an exclusive lock on
its directory while it runs (so an orphaned worker and a restarted sweep never
write the same run), and a ``finished`` event is written exactly once per key
(a summary written just before a kill is recorded on the next start).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import json
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
import tomllib
import traceback
from pathlib import Path

from fedgca import methods
from fedgca.config import ADDED_LATER, RunConfig
from fedgca.experiments import cost
from fedgca.experiments.pool import _stop_workers, _worker_init, bare_main
from fedgca.protocol.fedprox import effective_coefficient
from fedgca.rundir import CHECKPOINT, SUMMARY

log = logging.getLogger("fedgca")

LEDGER = "ledger.jsonl"
RUNS = "runs"
LOCK = ".lock"

# Which options each method reads (``MethodSpec.options``). Anything else is
# reset to its default by ``canonical``, so that runs differing only in options
# a method ignores share one key (e.g. a baseline in a grid over K).


def canonical(cfg: RunConfig) -> RunConfig:
    """The resolved config with every option its method does not read reset to its default.

    (``alpha`` only matters for the Dirichlet partition and is reset under IID.)
    """
    cfg = cfg.resolved()
    defaults = RunConfig(dataset=cfg.dataset, method=cfg.method)
    keep = set(methods.get(cfg.method).options) | {"device"}  # where it computes: every method
    if cfg.partition != "dirichlet":
        keep.discard("alpha")
    if cfg.partition != "natural":
        keep.discard("small_sites")
    if cfg.data_digest is not None:  # own data: its binding stays; K, which it has no preset for, a fixed value
        from fedgca.data.own import DEFAULT_K

        keep |= {"data_digest", "clients", "rho", "partition", "small_sites"}
        defaults = dataclasses.replace(defaults, k=DEFAULT_K)
    values = {f.name: getattr(cfg if f.name in keep else defaults, f.name) for f in dataclasses.fields(RunConfig)}
    if cfg.method == "fedprox" and cfg.fedprox_coef == effective_coefficient(cfg.fedprox_mu, cfg.batch_size):
        values["fedprox_coef"] = None  # the derived default, not an override
    return RunConfig(**values).resolved()


# --------------------------------------------------------------------------- sweep files


@dataclasses.dataclass
class SweepSpec:
    configs: list[RunConfig]  # canonical, deduplicated, in grid order
    out: str | None = None
    data_dir: str | None = None
    name: str = ""
    source: object = None  # own data's fedgca.data.DataSource (the file's `data`), else None

    @property
    def data(self):
        """What runs read: own data's source, else the built-in datasets' directory."""
        return self.source if self.source is not None else self.data_dir


def load_spec(path) -> SweepSpec:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None
    return parse_spec(doc, name=path.stem)


OWN_DATA_KEYS = ("data", "schema", "test_file", "test_split", "data_name")


def parse_spec(doc: dict, name: str = "sweep") -> SweepSpec:
    """A sweep file's runs. Own data: top-level ``data`` (a file or per-site directory), ``schema``,
    optionally ``test_file``, ``test_split`` and ``data_name``; grids then need no ``dataset``, and C,
    K and ρ left unset come from the data (fedgca.sources.bind). Paths are relative to the working
    directory, as ``out`` and ``data_dir`` are."""
    unknown = set(doc) - {"base", "grid", "out", "data_dir", "name", "description", *OWN_DATA_KEYS}
    if unknown:
        raise ValueError(f"sweep file: unknown top-level keys {', '.join(sorted(unknown))} "
                         f"(expected [base], [grid] or [[grid]], out, data_dir, {', '.join(OWN_DATA_KEYS)})")
    source = None
    if doc.get("data"):
        from fedgca.sources import open_source

        source = open_source(doc["data"], doc.get("schema"), test_file=doc.get("test_file"),
                             test_split=doc.get("test_split"), name=doc.get("data_name"))
    elif any(doc.get(k) for k in OWN_DATA_KEYS):
        raise ValueError("sweep file: schema/test_file/test_split/data_name describe own data: add `data`")
    base = dict(doc.get("base", {}))
    grids = doc.get("grid")
    if grids is None:
        raise ValueError("sweep file: no [grid] table")
    if isinstance(grids, dict):
        grids = [grids]
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    configs, seen, loaded = [], set(), {}
    for i, grid in enumerate(grids):
        bad = (set(grid) | set(base)) - fields
        if bad:
            raise ValueError(f"sweep file: grid {i + 1}: unknown RunConfig fields {', '.join(sorted(bad))}")
        axes = {**{k: [v] for k, v in base.items()}, **{k: v if isinstance(v, list) else [v] for k, v in grid.items()}}
        if source is not None:
            if "dataset" in axes:
                raise ValueError(f"sweep file: grid {i + 1} names a dataset, and the file gives own data (`data`)")
            axes["dataset"] = [source.label]
        if "dataset" not in axes:
            raise ValueError(f"sweep file: grid {i + 1} names no dataset")
        names = list(axes)
        for combo in itertools.product(*(axes[n] for n in names)):
            values = dict(zip(names, combo))
            for opt in ("k", "clients", "rho"):  # "preset" means the dataset's preset value
                if values.get(opt) == "preset":
                    values[opt] = None
            cfg = canonical(_bind(values, source, loaded) if source is not None else RunConfig(**values))
            key = cfg.key()
            if key not in seen:
                seen.add(key)
                configs.append(cfg)
    return SweepSpec(configs, doc.get("out"), doc.get("data_dir"), doc.get("name", name), source)


def _bind(values: dict, source, loaded: dict) -> RunConfig:
    """Own data's config for these options (the data read once per seed: its test split depends on it)."""
    from fedgca.sources import bind

    seed = values.get("seed", RunConfig.__dataclass_fields__["seed"].default)
    cfg, loaded[seed] = bind({k: v for k, v in values.items() if k != "dataset"}, source, dataset=loaded.get(seed))
    return cfg


# --------------------------------------------------------------------------- ledger


class Ledger:
    """Append-only JSON-lines log; every append is locked, flushed and fsync'd."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, event: str, key: str, *, once: bool = False, **fields) -> bool:
        """Append one event; with ``once``, only if ``key`` has no such event yet (checked under the lock,
        so that two sweeps sharing a directory never record a run twice). Returns whether it wrote."""
        line = json.dumps({"event": event, "key": key, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "pid": os.getpid(), **fields}, sort_keys=False) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock(fd)
            if once and any(e.get("event") == event and e.get("key") == key for e in self.events()):
                return False
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line (crash mid-write): end it
                line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
            return True
        finally:
            os.close(fd)  # closing releases the lock

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line from a crash mid-write: ignore it
                continue
        return out

    def finished_keys(self) -> set[str]:
        return {e["key"] for e in self.events() if e.get("event") == "finished"}


def _lock(fd: int) -> None:
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
    except ImportError:  # not POSIX: appends of one short line are still atomic in practice
        pass


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


def execute(cfg_dict: dict, out: str, root: str, data_dir, broker=None) -> dict:
    """One run, in a worker process (or a thread of the batched engine, whose ``broker`` it leaves when it
    ends, however it ends). Never raises: returns {"status": ..., ...}."""
    try:
        return _execute(cfg_dict, out, root, data_dir, broker)
    finally:
        if broker is not None:
            broker.leave()


def _execute(cfg_dict: dict, out: str, root: str, data_dir, broker) -> dict:
    from fedgca.simulation.runner import run

    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    key = RunConfig.from_dict(cfg_dict).key()
    fd = os.open(out_p / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd)  # waits for an orphaned worker of a killed sweep to finish this same run
        if (out_p / SUMMARY).exists():
            return {"status": "finished", "resumed": False, "already": True}
        resume = (out_p / CHECKPOINT).exists()
        Ledger(Path(root) / LEDGER).append("started", key, resume=resume, config=cfg_dict)
        t0 = time.perf_counter()
        try:
            summary = run(RunConfig.from_dict(cfg_dict), out_p, data_dir=data_dir, resume=resume, progress=False,
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


def predicted_flops(configs: list[RunConfig], data_dir=None) -> dict[str, float] | None:
    """Each run's protocol FLOPs by key; None when a dataset cannot be read here (the ETA then counts runs)."""
    try:
        return {c.key(): cost.run_flops(c, cost.sizes(c, _data_arg(data_dir, c))) for c in configs}
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


def remaining(root, configs: list[RunConfig] | None = None, data_dir=None) -> dict | None:
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
    flops = predicted_flops(configs, data_dir) or {}
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
    if methods.is_gca(cfg.method):
        parts += [f"backend={cfg.backend}", f"K={cfg.k}", f"weights={cfg.weights}"]
    # the options added after the paper's runs (protocol variants, DP), where a run departs from their default
    parts += [f"{name}={getattr(cfg, name)}" for name, default in ADDED_LATER.items()
              if name in methods.get(cfg.method).options and getattr(cfg, name) != default]
    return " ".join(parts)


ORDERS = ("grid", "longest-first")
EXECUTORS = ("local", "ray", "batched")


def run_sweep(configs: list[RunConfig], root, *, workers: int = 1, data_dir=None, verbose: bool = False,
              retry_failed: bool = True, order: str = "grid", executor: str = "local",
              address: str | None = None, gpus_per_run: float = 0.0, stack: int | None = None) -> dict:
    """Run every config not finished in ``root``; returns counts and the failures.

    ``executor``: "local", a pool of ``workers`` processes on this machine, or "ray", one Ray task per run
    (:mod:`fedgca.experiments.ray_executor`) on the cluster at ``address``, or on a local Ray instance of
    ``workers`` CPUs; or "batched", the runs of one dataset ``stack`` at a time in this process with their
    local epochs computed together (:mod:`fedgca.experiments.batched_executor`, for a GPU). All write the same
    run directories and ledger.

    ``order``: "grid" starts the runs in the file's order (its first cells finish first, for a partial
    report); "longest-first" by predicted FLOPs, largest first, so that the last runs to start are the
    short ones and no worker idles for long at the end (longest-processing-time scheduling).
    """
    if order not in ORDERS:
        raise ValueError(f"--order {order!r}: choose one of {', '.join(ORDERS)}")
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: choose one of {', '.join(EXECUTORS)}")
    if (address or gpus_per_run) and executor != "ray":
        raise ValueError("--address and --gpus-per-run are the Ray executor's: add --executor ray")
    if stack is not None and executor != "batched":
        raise ValueError("--stack is the batched executor's: add --executor batched")
    if not 0 <= gpus_per_run <= 8:
        raise ValueError(f"--gpus-per-run must be in [0, 8], got {gpus_per_run!r}")
    if executor == "ray":
        from fedgca.experiments import ray_executor

        ray_executor.require()  # before anything is written
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
             len(todo), f"Ray ({address})" if address else "the batched engine" if executor == "batched" else
             f"{workers} worker(s)" + (" of Ray" if executor == "ray" else ""))
    if not todo:
        return result
    flops = predicted_flops(todo, data_dir)
    if flops:
        result.update(flops=flops, flops_total=sum(flops.values()), flops_done=0.0)
        log.info("sweep %s: %.1f TFLOP of protocol work to run (experiments/cost.py)", root, result["flops_total"] / 1e12)
        if order == "longest-first":
            todo.sort(key=lambda c: -flops[c.key()])  # stable: equal costs keep the grid's order
    elif order == "longest-first":
        log.warning("sweep %s: no FLOP predictions, so the runs start in the grid's order", root)
    result["t0"] = time.monotonic()  # for the ETA in the progress lines; removed before returning
    in_main = threading.current_thread() is threading.main_thread()  # only there can a signal handler go
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if in_main else None
    try:
        if executor == "ray":
            _run_on_ray(todo, result, ledger, finished, root, workers, data_dir, verbose, address, gpus_per_run)
        elif executor == "batched":
            from fedgca.experiments import batched_executor

            jobs = [(c, (c.to_dict(), str(run_dir(root, c)), str(root), _data_arg(data_dir, c))) for c in todo]
            batched_executor.run_all(jobs, execute, lambda c, res: _record(ledger, finished, result, c, root,
                                                                           len(todo), res),
                                     stack=stack or batched_executor.DEFAULT_STACK)
        else:
            with bare_main():  # the pool's workers, and their replacements, never re-run the caller's script
                _run_todo(todo, result, ledger, finished, root, workers, data_dir, verbose)
    except KeyboardInterrupt as stop:
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


def _data_arg(data_dir, cfg: RunConfig | None = None):
    """What a worker is told about a run's data: the built-in datasets' directory, or own data's source (a
    bench over many files passes a mapping of dataset name → source: each run gets its own file's)."""
    from fedgca.data import DataSource

    if isinstance(data_dir, dict):
        return data_dir[cfg.dataset]
    if data_dir is None or isinstance(data_dir, DataSource):
        return data_dir
    return str(data_dir)


def _run_on_ray(todo, result, ledger, finished, root, workers, data_dir, verbose, address, gpus_per_run) -> None:
    from fedgca.experiments import ray_executor

    def on_result(cfg: RunConfig, res: dict) -> None:
        if res.get("in_place") is False:  # it ran in a scratch directory of another node: the driver notes it
            ledger.append("started", cfg.key(), executor="ray", node=res.get("node"), config=cfg.to_dict())
        _record(ledger, finished, result, cfg, root, len(todo), res)

    jobs = [(cfg, cfg.to_dict(), run_dir(root, cfg), _data_arg(data_dir, cfg)) for cfg in todo]
    ray_executor.run_all(jobs, execute, on_result, root=root, workers=max(1, min(int(workers), len(todo))),
                         address=address, verbose=verbose, gpus_per_run=gpus_per_run)


def _run_todo(todo, result, ledger, finished, root, workers, data_dir, verbose) -> None:
    if int(workers) <= 0:  # in this process, one run after another (debugging; no isolation)
        for cfg in todo:
            _record(ledger, finished, result, cfg, root, len(todo),
                    execute(cfg.to_dict(), str(run_dir(root, cfg)), str(root), _data_arg(data_dir, cfg)))
        return

    workers = max(1, min(int(workers), len(todo)))
    # One thread per run, as `fedgca run` uses: a second thread bought ~6 % alone, and a sweep that took
    # cores // workers threads beside other load (another sweep) ran ~5× slower.
    threads = 1
    ctx = multiprocessing.get_context("spawn")
    pending, suspects = list(todo), []
    while pending or suspects:
        # A worker that dies (killed, out of memory) breaks the whole pool. Runs that had not started are
        # submitted again; runs that were in flight are re-run one at a time in a pool of their own, and
        # only a run that breaks its own pool is recorded as failed.
        if pending:
            batch, n, isolated = pending, workers, False
        else:
            batch, n, isolated = [suspects.pop(0)], 1, True
        events_before = len(ledger.events())
        broken: list[RunConfig] = []
        pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, max_tasks_per_child=1,
                                      initializer=_worker_init, initargs=(threads, verbose))
        try:
            futures = {pool.submit(execute, c.to_dict(), str(run_dir(root, c)), str(root), _data_arg(data_dir, c)): c
                       for c in batch}
            for fut in cf.as_completed(futures):
                cfg = futures[fut]
                try:
                    res = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(cfg)
                    continue
                _record(ledger, finished, result, cfg, root, len(todo), res)
        finally:
            # Also when every run is done: the pool replaces each worker after its run, so replacements are
            # still importing torch here. `shutdown(wait=True)` waited seconds for them, and a SIGTERM during
            # that wait left them orphaned (each printed a SemLock traceback); stopping them now does neither.
            _stop_workers(pool)
        started = {e["key"] for e in ledger.events()[events_before:] if e.get("event") == "started"}
        if broken and not started:  # the pool broke before any run started: do not loop forever
            started = {c.key() for c in broken}
        pending = []
        for cfg in broken:
            if (run_dir(root, cfg) / SUMMARY).exists():
                _record(ledger, finished, result, cfg, root, len(todo), {"status": "finished", "recovered": True})
            elif cfg.key() not in started:
                pending.append(cfg)
            elif not isolated:
                suspects.append(cfg)
            else:
                _record(ledger, finished, result, cfg, root, len(todo), {
                    "status": "failed", "error": "worker process died (killed, out of memory, or could not start)"})


__all__ = ["EXECUTORS", "ORDERS", "Ledger", "SweepSpec", "SweepStopped", "canonical", "execute", "load_spec", "parse_spec",
           "run_dir", "run_sweep", "status"]
