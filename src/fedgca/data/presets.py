"""The built-in tabular datasets (SPEC §4) as presets: a schema and file names each.

A preset is nothing but own data that fedgca knows how to find: ``--dataset bank`` reads
``<data_dir>/bank/bank-full.csv`` with the registry's schema for bank (:mod:`fedgca.data.registry`) through the same
reader, split
and encoding as ``--data bank-full.csv --schema bank.json`` (``fedgca schema show bank`` writes
that file), so the two give bit-identical arrays.
"""
from __future__ import annotations

from pathlib import Path

from .registry import tabular_schema as schema  # noqa: F401 — a built-in's schema, as callers import it
from .source import tabular_preset


def load_tabular(name: str, data_dir=None, download: bool = True, *, seed: int = 100):
    """Load a built-in tabular dataset as SPEC §4 defines it (files, split, encoding)."""
    return tabular_preset(name, data_dir, download=download).load(seed)


def read_raw(name: str, path, *, require_label: bool = True):
    """One file in built-in dataset ``name``'s format: (features frame, label strings or None)."""
    from .readers import read_file

    t = read_file(Path(path), schema(name), require_label=require_label)
    return t.features, t.labels
