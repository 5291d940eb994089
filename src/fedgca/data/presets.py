"""The built-in tabular datasets (SPEC §4) as presets: a schema and file names each.

A preset is nothing but own data that fedgca knows how to find: ``--dataset bank`` reads
``<data_dir>/bank/bank-full.csv`` with the registry's schema for bank (:mod:`fedgca.data.registry`) through the same
reader, split
and encoding as ``--data bank-full.csv --schema bank.json`` (``fedgca schema show bank`` writes
that file), so the two give bit-identical arrays.
"""
from __future__ import annotations

from pathlib import Path

from . import registry
from .download import ensure_files, locate, resolve_data_dir
from .errors import DataError
from .schema import Schema


def schema(name: str) -> Schema:
    spec = registry.REGISTRY.get(name)
    if spec is None or spec.schema is None:
        raise DataError(f"unknown tabular dataset {name!r}; known: {', '.join(registry.names('tabular'))}")
    return spec.schema


def preset_file(dataset_dir: Path, name: str, file_name: str) -> Path:
    rf = next(r for r in registry.get(name).files if r.name == file_name)
    path = locate(dataset_dir, rf)
    if path is None:
        raise DataError(f"{dataset_dir}: missing {file_name}")
    return path


def preset_source(name: str, data_dir=None, *, download: bool = True):
    """The :class:`~fedgca.data.source.DataSource` of built-in tabular dataset ``name``."""
    from .source import DataSource

    sch = schema(name)
    dataset_dir = resolve_data_dir(data_dir) / name
    ensure_files(dataset_dir, registry.get(name).files, download=download)
    train = preset_file(dataset_dir, name, registry.get(name).train_file)
    test = preset_file(dataset_dir, name, sch.test_file) if sch.test_file else None
    return DataSource(str(train), sch, name=name, test_path=None if test is None else str(test))


def load_tabular(name: str, data_dir=None, download: bool = True, *, seed: int = 100):
    """Load a built-in tabular dataset as SPEC §4 defines it (files, split, encoding)."""
    return preset_source(name, data_dir, download=download).load(seed)


def read_raw(name: str, path, *, require_label: bool = True):
    """One file in built-in dataset ``name``'s format: (features frame, label strings or None)."""
    from .readers import read_file

    t = read_file(Path(path), schema(name), require_label=require_label)
    return t.features, t.labels
