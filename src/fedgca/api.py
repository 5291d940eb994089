"""The Python API: load data, run one federation, compare methods — what the CLI is built on.

    >>> import fedgca
    >>> data = fedgca.load_data("bank-full.csv", label="y", normal="no", site="job")
    >>> result = fedgca.run(data, method="gca", partition="natural", rounds=20, seed=1)
    >>> result.metrics.tail()                       # metrics.csv as a DataFrame
    >>> result.detectors[3].predict(new_rows)       # client 3's detector on raw records (a DataFrame)
    >>> table = fedgca.compare(data, methods=["single", "fedavg", "gca"], rounds=20)

``data`` is a built-in dataset's name, a path (CSV/TSV/Parquet with a schema, ``.mat``/``.npz``,
a directory of per-site files), a pandas DataFrame, ``(X, y)`` arrays, or a
:class:`~fedgca.data.DataSource` from :func:`load_data`. Every other keyword is a run option
(:class:`~fedgca.config.RunConfig`'s fields, the CLI's ``--options`` with ``_`` for ``-``).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from fedgca.config import SEEDS, RunConfig
from fedgca.data import DATASETS, DataSource, Schema, infer_schema
from fedgca.data.errors import DataError


def load_data(data, schema=None, *, label: str | None = None, normal=None, anomaly=None, site: str | None = None,
              test_file=None, test_split: str | None = None, name: str | None = None) -> DataSource:
    """Own data as a :class:`~fedgca.data.DataSource`.

    ``data``: a file path (CSV/TSV/Parquet, ``.mat``, ``.npz``), a directory of per-site files, a pandas
    DataFrame, or ``(X, y)`` / ``(X, y, sites)`` arrays (y: 1 = anomaly). ``schema``: a Schema or a schema
    file; without one, a table's schema is inferred from ``label``/``normal`` (and ``anomaly``, ``site``),
    as ``fedgca schema infer`` does. ``test_file`` / ``test_split`` choose the test set.
    """
    if isinstance(data, DataSource):
        return data
    if isinstance(schema, (str, Path)):
        schema = Schema.load(schema)
    if isinstance(data, tuple):
        if schema is None and site is None:
            schema = None  # X/y arrays: numeric features x0.., label y
        src = DataSource(schema=schema, name=name or "arrays", arrays=data)
    elif hasattr(data, "columns") and hasattr(data, "iloc"):
        if schema is None:
            schema, _ = infer_schema(data, label=_need(label, "label"), normal=_need(normal, "normal"),
                                     anomaly=anomaly, site=site)
        src = DataSource(schema=schema, name=name or "frame", frame=data)
    else:
        path = Path(data)
        if schema is None and label is not None:
            if path.is_dir():
                from fedgca.data.readers import site_files

                schema, _ = infer_schema(site_files(path)[0], label=label, normal=_need(normal, "normal"), anomaly=anomaly)
            else:
                schema, _ = infer_schema(path, label=label, normal=_need(normal, "normal"), anomaly=anomaly, site=site)
        from fedgca.data.source import open_source

        return open_source(path, schema, test_file=test_file, test_split=test_split, name=name)
    return src.with_test(test_split, test_file)


def _need(value, what: str):
    if value is None:
        raise DataError(f"inferring a schema needs {what}= (or pass schema=)")
    return value


def _source(data, data_dir=None) -> DataSource:
    """``data`` as the run's source: a built-in dataset's name, or own data (:func:`load_data`)."""
    if isinstance(data, str) and data in DATASETS:
        return DataSource.builtin(data, data_dir)
    return load_data(data)


def _config(source: DataSource, options: dict) -> tuple[RunConfig, object]:
    """The run's resolved config on ``source`` (own data: bound to it, fedgca.binding), and the dataset if loaded."""
    from fedgca.binding import resolve

    return resolve(options, source)


@dataclass
class RunResult:
    """A finished run: its directory and what is in it, as Python objects."""

    out: Path

    @cached_property
    def summary(self) -> dict:
        from fedgca import rundir

        return rundir.load_json(rundir.verify(self.out, rundir.SUMMARY))

    @cached_property
    def config(self) -> RunConfig:
        from fedgca import rundir

        return RunConfig.from_dict(rundir.load_json(rundir.verify(self.out, rundir.CONFIG)))

    @cached_property
    def metrics(self):
        """metrics.csv: one row per evaluation (round, phase, epoch, accuracy, AUROC, AUPRC, ...)."""
        import pandas as pd

        from fedgca import rundir

        return pd.read_csv(rundir.verify(self.out, rundir.METRICS))

    @cached_property
    def detectors(self) -> list:
        """Each client's :class:`~fedgca.detector.AnomalyDetector` (PyOD-style: decision_function, predict)."""
        from fedgca.detector import load_client_detector

        return [load_client_detector(self.out, i) for i in range(int(self.summary["clients"]))]

    def __repr__(self) -> str:
        s = self.summary
        return (f"RunResult({s['method']} on {s['dataset']}, seed {s['seed']}, {s['rounds']} rounds: final accuracy "
                f"{s['final']['accuracy']:.4f}, AUROC {s['final']['auroc']:.4f}; {self.out})")


def run(data, method: str = "gca", *, out=None, data_dir=None, resume: bool = False, progress: bool = False,
        **options) -> RunResult:
    """Run one federation of ``method`` on ``data`` and return its :class:`RunResult`.

    ``out``: the run directory (default: a new temporary directory). ``data_dir``: where built-in
    datasets are. Other keywords are run options (``rounds=20, seed=1, partition="natural", ...``).
    """
    from fedgca.simulation.runner import run as run_simulation

    source = _source(data, data_dir)
    cfg, dataset = _config(source, {"method": method, **options})
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix=f"fedgca-{cfg.dataset}-{cfg.method}-"))
    run_simulation(cfg, out, source=source, resume=resume, progress=progress, dataset=dataset)
    return RunResult(out)


def compare(data, methods=None, seeds=SEEDS, *, out=None, workers: int = 1, data_dir=None, executor: str = "local",
            address: str | None = None, gpus_per_run: float = 0.0, stack: int | None = None,
            processes: bool = False, **options):
    """Run ``methods`` × ``seeds`` on ``data`` (a resumable sweep in ``out``) and return the comparison table:
    a DataFrame with one row per method — mean and sample std over seeds of the final, peak (the paper's,
    chosen with test labels) and selected accuracy, AUROC and AUPRC. ``out`` also gets comparison.md/.csv
    and runs.csv, as ``fedgca compare`` writes them. ``executor="ray"`` runs each run as a Ray task, on the
    cluster at ``address`` or on a local Ray instance of ``workers`` CPUs (``pip install 'fedgca[ray]'``);
    ``executor="batched"`` computes the runs' local epochs together in this process (for a GPU: ``device="cuda"``),
    at most ``stack`` runs at once (``processes=True``: each of the ``workers`` stacks at once in a worker process
    of its own); ``gpus_per_run``: the GPU share each Ray task asks for."""
    import pandas as pd

    from fedgca.experiments import compare as grid
    from fedgca.experiments import executors
    from fedgca.reporting import comparison
    from fedgca.reporting.tables import mean_std

    methods = list(methods or grid.DEFAULT_METHODS)
    source = _source(data, data_dir)
    name = source.label
    base = RunConfig(dataset=name, **options)
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix=f"fedgca-compare-{name}-"))
    # one worker: in this process (no process to start); more: worker processes that never re-run the caller's
    # script (experiments.pool.bare_main), so a plain script, `python -` and a notebook all work without a __main__ guard
    workers = 0 if executor == "local" and workers == 1 else workers
    where = executors.executor(executor, workers=workers, address=address, gpus_per_run=gpus_per_run, stack=stack,
                               processes=processes)
    configs = grid.grid(base, [name], methods, list(seeds), source if not source.is_builtin else None, options)
    summaries = grid.run_grid(configs, out, data_dir=data_dir, sources={name: source}, executor=where)
    comparison.write_outputs(out, summaries, methods)
    rows = []
    for m in methods:
        runs = [s for s in summaries if s["method"] == m]
        row = {"method": m, "seeds": len(runs)}
        for protocol in ("final", "peak", "selected"):
            for metric in ("accuracy", "auroc", "auprc"):
                mean, std, _ = mean_std([s[protocol][metric] for s in runs])
                row[f"{protocol}_{metric}"], row[f"{protocol}_{metric}_std"] = mean, std
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["RunResult", "compare", "load_data", "run"]
