"""``fedgca bench``: federated anomaly detection over a suite of files — every method × file × seed × partition
as one resumable sweep, with centralized PyOD peers on the same splits (the federated ADBench).

A bench directory holds ``bench.json`` (the plan: files, methods, seeds, partitions, peers and each file's
figures or the one line that says why it was skipped), ``runs/<key>/`` and ``ledger.jsonl`` (a sweep's: finished
runs are skipped, killed ones resume) and ``peers/<file>/<partition>-seed<seed>-<peer>.json``. The report
(:mod:`fedgca.reporting.bench`) reads only these files.

Files: ADBench ``.npz`` and ODDS ``.mat`` (X, y with 1 = anomaly), given one by one or as directories. Each
file is own data without a preset, so every run takes fedgca's own-data defaults (``fedgca.data.defaults``) unless
the bench's options set them.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.data import DataError

log = logging.getLogger("fedgca")

DEFAULT_METHODS = ("centralized", "single", "fedavg", "fedprox", "gca")
PARTITIONS = ("iid", "dirichlet")
FILE_TYPES = (".npz", ".mat")
PLAN = "bench.json"
PEER_DIR = "peers"


@dataclass
class BenchPlan:
    configs: list[RunConfig] = field(default_factory=list)
    sources: dict = field(default_factory=dict)  # dataset name → DataSource
    files: list[dict] = field(default_factory=list)  # one record per file: its figures, or "error"
    peer_jobs: list[tuple] = field(default_factory=list)  # (name, partition, seed, peer, config)
    methods: tuple = DEFAULT_METHODS
    seeds: tuple = (100,)
    partitions: tuple = ("iid",)
    peers: tuple = ()
    options: dict = field(default_factory=dict)
    corr_threshold: float | None = None


def _natural_key(p: Path):
    """ADBench's numbered names in their numeric order (2_annthyroid before 12_fault)."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", p.name)]


def discover(paths) -> tuple[list[Path], list[dict]]:
    """The bench's files (directories expanded, in natural order) and a record for each path that is none."""
    files, bad = [], []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted((f for f in p.iterdir() if f.is_file() and f.suffix.lower() in FILE_TYPES), key=_natural_key)
            if not found:
                bad.append({"name": p.name, "file": p.name, "error": f"{p}: no {'/'.join(FILE_TYPES)} files"})
            files += found
        elif p.suffix.lower() in FILE_TYPES:
            files.append(p)
        else:
            bad.append({"name": p.stem or p.name, "file": p.name,
                        "error": f"{p}: not a {' or '.join(FILE_TYPES)} file or a directory of them"})
    seen, out = set(), []
    for f in files:
        if f.stem in seen:
            bad.append({"name": f.stem, "file": f.name, "error": f"{f}: a second file named {f.stem!r} (names must differ)"})
            continue
        seen.add(f.stem)
        out.append(f)
    return out, bad


def plan(paths, methods=DEFAULT_METHODS, seeds=(100,), partitions=("iid",), peers=(), options=None,
         corr_threshold: float | None = None) -> BenchPlan:
    """Every run of the bench, bound to its file (C, K, ρ, epochs ... from the data unless ``options`` set them).
    ``corr_threshold``: the schema's correlation filter for every file (default: own data's, off).

    A file that cannot be benchmarked (unreadable, too few normals for C clients, ...) is one record with its
    error; the rest go on.
    """
    from fedgca import methods as registry
    from fedgca.binding import bind
    from fedgca.data.source import open_source
    from fedgca.experiments.sweep_spec import canonical

    for m in methods:
        registry.get(m)
    bad = [p for p in partitions if p not in PARTITIONS]
    if bad:
        raise ValueError(f"--partitions: {', '.join(bad)}; a bench partitions any file with {', '.join(PARTITIONS)}")
    options = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = set(options) - {f.name for f in dataclasses.fields(RunConfig)} | ({"dataset", "method", "seed",
                                                                                   "partition"} & set(options))
    if unknown:
        raise ValueError(f"bench options: {', '.join(sorted(unknown))} cannot be set here")
    files, failed = discover(paths)
    out = BenchPlan(methods=tuple(methods), seeds=tuple(seeds), partitions=tuple(partitions), peers=tuple(peers),
                    options=dict(options), files=list(failed), corr_threshold=corr_threshold)
    for path in files:
        name = path.stem
        try:
            source = open_source(path, _schema(path, corr_threshold), name=name)
            configs, jobs, record, loaded = [], [], None, {}
            for partition in partitions:
                for seed in seeds:
                    cfg, loaded[seed] = bind({**options, "partition": partition, "seed": seed}, source,
                                             dataset=loaded.get(seed))
                    configs += [canonical(dataclasses.replace(cfg, method=m)) for m in methods]
                    jobs += [(name, partition, seed, p, cfg) for p in peers]
                    if record is None:
                        record = file_record(name, path.name, loaded[seed], cfg)
        except (DataError, ValueError, OSError) as err:  # one line in the report, named by the file alone
            out.files.append({"name": name, "file": path.name,
                              "error": " ".join(str(err).replace(str(path), path.name).split())})
            log.warning("bench: skipping %s: %s", path.name, err)
            continue
        out.sources[name] = source
        out.configs += configs
        out.peer_jobs += jobs
        out.files.append(record)
    return out


def _schema(path: Path, corr_threshold: float | None):
    """None (the file's own X/y schema), or that schema with another correlation filter."""
    if corr_threshold is None:
        return None
    from fedgca.data.readers import read_array_file

    return dataclasses.replace(read_array_file(path).schema, corr_threshold=float(corr_threshold))


def file_record(name: str, file: str, ds, cfg: RunConfig) -> dict:
    """What a file is: rows, features, anomaly share, and the federation its defaults give."""
    info = ds.info
    n_train, n_test, n_anom = int(info["n_train"]), int(info["n_test"]), int(info["n_anomalies"])
    rows = n_train + n_test
    return {"name": name, "file": file, "rows": rows, "features": len(info.get("raw_columns", [])),
            "input_dim": int(ds.train.shape[1]), "anomalies": n_anom, "anomaly_share": n_anom / rows,
            "n_train": n_train, "n_test": n_test, "clients": cfg.clients,
            "rows_per_client": n_train / cfg.clients * (1 - cfg.val_fraction), "batch_size": cfg.batch_size,
            "rounds": cfg.rounds, "local_epochs": cfg.local_epochs,
            "dropped_columns": len(info.get("dropped_columns", [])), "defaulted": sorted(info.get("defaulted", {})),
            "imputed_cells": sum(info.get("imputed_training_cells", {}).values()) + info.get("imputed_test_cells", 0),
            "imputed_columns": sorted(info.get("imputed_training_cells", {}))}


def peer_path(root: Path, name: str, partition: str, seed: int, peer: str) -> Path:
    return Path(root) / PEER_DIR / name / f"{partition}-seed{seed}-{peer}.json"


def write_plan(root: Path, p: BenchPlan) -> None:
    from fedgca.rundir import atomic_write_text

    root.mkdir(parents=True, exist_ok=True)
    doc = {"methods": list(p.methods), "seeds": list(p.seeds), "partitions": list(p.partitions),
           "peers": list(p.peers), "options": p.options, "corr_threshold": p.corr_threshold, "files": p.files,
           "runs": [{"key": c.key(), "dataset": c.dataset, "method": c.method, "seed": c.seed,
                     "partition": c.partition} for c in p.configs]}
    atomic_write_text(root / PLAN, json.dumps(doc, indent=1))


def run_bench(p: BenchPlan, root, executor=None, *, peer_workers: int | None = None) -> dict:
    """Run the plan's runs (a resumable sweep on ``executor``, ``experiments/executors.py``) and its peers (each
    result a file: done ones are skipped) on ``peer_workers`` local processes (default: the executor's workers)."""
    from fedgca.experiments import sweep
    from fedgca.experiments.executors import LocalPool

    root = Path(root)
    executor = executor if executor is not None else LocalPool()
    if p.peers:
        from fedgca.experiments import peers
        from fedgca.experiments.pool import worker_context

        peers.require()
        worker_context(peers=True)  # before the runs' pool starts the fork server: its workers fit peers too
    write_plan(root, p)
    result = sweep.run_sweep(p.configs, root, executor=executor, sources=p.sources, order="longest-first") \
        if p.configs else {"total": 0, "skipped": 0, "finished": 0, "failed": []}
    result["peers"] = run_peers(p, root, peer_workers if peer_workers is not None else getattr(executor, "workers", 1))
    return result


def _peer_job(source: dict, cfg: dict, peer: str, out: str) -> dict:
    """One peer on one split, in a worker process (one torch thread); writes its JSON and returns it."""
    from fedgca.data import DataSource
    from fedgca.experiments.peers import score, split_for
    from fedgca.rundir import atomic_write_text

    config = RunConfig.from_dict(cfg)
    ds = DataSource.from_dict(source).load(config.seed)
    x_train, x_test, y_test = split_for(peer, config, ds)
    rec = {"dataset": config.dataset, "partition": config.partition, "seed": config.seed,
           **score(peer, x_train, x_test, y_test, config.seed)}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out), json.dumps(rec, indent=1))
    return rec


def run_peers(p: BenchPlan, root: Path, workers: int) -> dict:
    """Every peer job without its result file; a failing one is logged and recorded, the rest go on."""
    from fedgca.experiments.pool import (
        _worker_init,
        bare_main,
        finish,
        stop_server,
        worker_context,
    )

    todo = [(name, part, seed, peer, cfg) for name, part, seed, peer, cfg in p.peer_jobs
            if not peer_path(root, name, part, seed, peer).exists()]
    done, failed = len(p.peer_jobs) - len(todo), []
    (Path(root) / PEER_DIR / "failed.json").unlink(missing_ok=True)  # this invocation retries and records anew
    if not todo:
        return {"done": done, "failed": failed}
    log.info("bench %s: %d peer fit(s) to run", root, len(todo))
    args = [(p.sources[name].to_dict(), cfg.to_dict(), peer, str(peer_path(root, name, part, seed, peer)))
            for name, part, seed, peer, cfg in todo]
    if workers <= 0:
        outcomes = []
        for a in args:
            try:
                outcomes.append(_peer_job(*a))
            except Exception as err:  # noqa: BLE001 — a peer that fails is one line in the report
                outcomes.append(err)
    else:
        pool = cf.ProcessPoolExecutor(max_workers=max(1, min(workers, len(args))),
                                      mp_context=worker_context(peers=True),
                                      initializer=_worker_init, initargs=(1, False))
        completed = False
        try:
            with bare_main():
                futures = [pool.submit(_peer_job, *a) for a in args]
                outcomes = []
                for f in futures:
                    try:
                        outcomes.append(f.result())
                    except Exception as err:  # noqa: BLE001
                        outcomes.append(err)
            completed = True
        finally:
            finish(pool, completed)
            if not completed:  # stopped: the fork server goes too (pool.stop_server)
                stop_server()
    for job, res in zip(todo, outcomes):
        if isinstance(res, Exception):
            failed.append({"file": job[0], "partition": job[1], "seed": job[2], "peer": job[3],
                           "error": f"{type(res).__name__}: {' '.join(str(res).split())[:300]}"})
            log.error("peer %s on %s (%s, seed %d) failed: %s", job[3], job[0], job[1], job[2], res)
        else:
            done += 1
    if failed:
        from fedgca.rundir import atomic_write_text

        atomic_write_text(Path(root) / PEER_DIR / "failed.json", json.dumps(failed, indent=1))
    return {"done": done, "failed": failed}


__all__ = ["DEFAULT_METHODS", "PARTITIONS", "BenchPlan", "discover", "plan", "run_bench", "run_peers"]
