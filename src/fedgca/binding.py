"""Binding own data to a run: a :class:`~fedgca.data.source.DataSource` + options → a complete RunConfig.

Built-in datasets carry their SPEC §8 presets; own data does not, so its C, K and ρ come from
the data (:func:`fedgca.data.defaults.own_defaults`), the data's content digest is recorded in the
config (never its path), and the values that were defaulted are logged and written to
``summary.json`` (``data.defaulted``). The CLI, sweeps, ``compare`` and the Python API all bind
through :func:`bind`.
"""
from __future__ import annotations

import dataclasses
import logging

from fedgca import privacy
from fedgca.config import RunConfig, option_name
from fedgca.data import DataError, DataSource, FederatedDataset
from fedgca.data.defaults import (
    MIN_TRAIN_ROWS,
    client_train_rows,
    max_clients,
    own_defaults,
    sites_below,
)
from fedgca.data.partition import NO_SITES

log = logging.getLogger("fedgca")


_SAID: set[str] = set()


def resolve(options: dict, source: DataSource) -> tuple[RunConfig, FederatedDataset | None]:
    """The one path from a run's options and its data to a resolved RunConfig — the CLI (``run``, ``flower``), the
    Python API and sweeps come through here: a built-in dataset's config from its presets (its dataset loaded later,
    by the driver), own data's bound to the data (:func:`bind`, which loads it). Unknown options are refused."""
    unknown = set(options) - {f.name for f in dataclasses.fields(RunConfig)}
    if unknown:
        raise TypeError(f"unknown run option(s) {', '.join(sorted(unknown))}")
    if source.is_builtin:
        return RunConfig(**{**options, "dataset": source.label}).resolved(), None
    return bind(options, source)


def load_for(cfg: RunConfig, source: DataSource) -> FederatedDataset:
    """The dataset a run of ``cfg`` trains on: its seed's test split, small sites dropped when the options drop
    them, the preprocessing statistics released privately when they ask for it (the simulator and binding)."""
    return source.load(cfg.seed, drop_sites_below=sites_below(cfg), stats_sigma=privacy.stats_noise(cfg))


def bind(options: dict, source: DataSource, *, dataset: FederatedDataset | None = None) \
        -> tuple[RunConfig, FederatedDataset]:
    """The resolved RunConfig of ``options`` on own data ``source``, and the loaded dataset.

    Options left unset that own data has no preset for (clients, k, rho) are filled from the
    data; ``dataset.info["defaulted"]`` names them.
    """
    values = {k: v for k, v in options.items() if v is not None}
    values["dataset"] = source.label
    given = RunConfig(**values)  # what the user set; C, K, ρ ... still open: the data fills them below
    given.check_fields(presets_open=True)  # a bad option is named before the data is read
    ds = dataset or load_for(given, source)
    n_sites = None
    if given.partition == "natural":
        if ds.sites is None:
            raise DataError(f"{source.label}: {NO_SITES}")
        parts, _ = ds.natural(given.batch_size, given.small_sites)  # carried: the federation trains on these
        n_sites = len(parts)
    defaulted = own_defaults(len(ds.train), n_sites, given.partition, given=values)
    values.update(defaulted)
    _check_client_rows(source, ds, values)
    values["data_digest"] = ds.info.get("digest") or source.digest()
    cfg = RunConfig(**values).resolved()
    if defaulted:
        ds.info["defaulted"] = dict(defaulted)
        said = f"{source.label} has no preset: " + ", ".join(f"{option_name(k)} {v}" for k, v in defaulted.items())
        if said not in _SAID:  # once per process: compare and sweep bind the same data once per run
            _SAID.add(said)
            log.info("%s (from the data; set them to override)", said)
    return cfg, ds


def _check_client_rows(source: DataSource, ds: FederatedDataset, values: dict) -> None:
    """One line naming the file and the largest C it supports when a client would train on almost nothing."""
    if values.get("partition", "iid") == "natural":
        return  # sites too small for a batch: natural_partition's --small-sites rule says what to do
    n, c, val = len(ds.train), int(values["clients"]), float(values.get("val_fraction", 0.0))
    rows = client_train_rows(n, c, val)
    if rows < MIN_TRAIN_ROWS:
        raise DataError(f"{source.label}: {n} training normals are too few for {c} clients (each would train on "
                        f"{rows} rows, fewer than {MIN_TRAIN_ROWS}); the largest C it supports is "
                        f"{max_clients(n, val, MIN_TRAIN_ROWS)} (--clients)")


def config_values(cfg: RunConfig) -> dict:
    """A config's fields as options (for re-binding it on other data or another seed)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
