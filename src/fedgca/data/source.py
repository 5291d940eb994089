"""Where a run's records are: the one way data enters fedgca.

A :class:`DataSource` is own data (a file, a directory of per-site files, or a pandas DataFrame / NumPy arrays
in Python, with the :class:`~fedgca.data.schema.Schema` that says what they mean and a content digest that names
runs) or a built-in dataset (``DataSource.builtin(name, data_dir)``: its files in the data directory, its SPEC
presets). ``load(seed)`` → the :class:`~fedgca.data.dataset.FederatedDataset` every driver trains on (read by
:mod:`fedgca.data.readers`, split and encoded by :mod:`fedgca.data.prepare`; a built-in tabular dataset is a
preset source of the same path, :mod:`fedgca.data.presets`). Every entry point — CLI, API, sweep, compare,
bench, attacks — turns what it was given into sources once (:func:`source_for`) and passes those down."""
from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedgca.filehash import file_digest
from fedgca.lazyimport import LazyModule

from .dataset import FederatedDataset
from .errors import DataError
from .prepare import prepare
from .readers import (
    ARRAY_FILES,
    RawTable,
    file_label,
    read_directory,
    read_file,
    read_training_file,
    site_files,
    table_from_arrays,
    table_from_frame,
)
from .schema import Schema

pd = LazyModule("pandas")


@dataclass(frozen=True, eq=False)
class DataSource:
    """Where records are and what they mean; ``load(seed)`` gives the dataset a run trains on.

    ``path``: a data file (CSV/TSV/Parquet/.mat/.npz) or a directory of per-site files; or
    ``frame`` (a DataFrame) / ``arrays`` ((X, y) or (X, y, sites)) from Python. ``schema``: None
    only for .mat/.npz/arrays (numeric X, y with 1 = anomaly). ``test_path``: a test file, for
    ``schema.test_split == "file"`` (default: ``schema.test_file`` next to the data).
    ``preset``: a built-in dataset's name (:meth:`builtin`), found in ``data_dir``.
    """

    path: str | None = None
    schema: Schema | None = None
    name: str | None = None
    test_path: str | None = None
    frame: Any = field(default=None, repr=False)
    arrays: Any = field(default=None, repr=False)
    preset: str | None = None
    data_dir: str | None = None
    download: bool = True

    @classmethod
    def builtin(cls, name: str, data_dir=None, *, download: bool = True) -> "DataSource":
        """Built-in dataset ``name`` (SPEC §8's presets), its files in ``data_dir`` (``$FEDGCA_DATA_DIR`` or the
        cache when None; missing files are downloaded when ``download``)."""
        from . import registry

        registry.get(name)  # an unknown name fails here, in one line
        return cls(preset=name, data_dir=None if data_dir is None else str(data_dir), download=download)

    @property
    def is_builtin(self) -> bool:
        return self.preset is not None

    @property
    def cache_key(self) -> tuple:
        """Equal for sources that load the same rows (a built-in by name and directory, a file by its path and
        schema); an in-memory source is itself."""
        if self.preset is not None:
            return ("builtin", self.preset, self.data_dir)
        if self.path is not None:
            return ("file", self.path, self.schema.digest() if self.schema else None, self.name, self.test_path)
        return ("memory", id(self))

    # ------------------------------------------------------------------ identity
    @property
    def label(self) -> str:
        """The dataset's name in run directories and tables (the file's stem unless given)."""
        if self.preset:
            return self.preset
        if self.name:
            return self.name
        if self.path:
            return file_label(self.path) or "data"
        return "data"

    def with_test(self, test_split: str | None = None, test_file=None) -> "DataSource":
        """This source with the user's test options (``--test-split``, ``--test-file``) applied to its schema."""
        if test_file is not None and self.schema is None:
            raise DataError("--test-file needs a schema (an X/y file's test rows come from its own split)")
        if self.schema is None or (test_file is None and test_split is None):
            return self
        return replace(self, schema=self.schema.with_test(
            test_split, None if test_file is None else Path(test_file).name),
            test_path=None if test_file is None else str(test_file))

    def digest(self) -> str:
        """Content identity (the data's bytes, the schema, the test file): runs record it, resume checks it."""
        if self.preset is not None:
            raise ValueError(f"built-in {self.preset!r} is named by its preset, not by a content digest")
        return _digest(self)

    # ------------------------------------------------------------------ reading
    def read(self) -> tuple[RawTable, RawTable | None]:
        """(the table, the test table or None)."""
        schema = self.schema
        if self.frame is not None:
            if schema is None:
                raise DataError("a DataFrame needs a schema (fedgca.infer_schema(frame, label=..., normal=...))")
            table = table_from_frame(self.frame, schema, files=[self.label])
        elif self.arrays is not None:
            table = table_from_arrays(*self.arrays, where=self.label, files=[self.label], schema=schema)
        else:
            path = Path(self.path)
            if path.is_dir():
                test_name = Path(self.test_path).name if self.test_path and Path(self.test_path).parent == path \
                    else (schema.test_file if schema is not None else None)
                table = read_directory(path, schema, exclude=(test_name,) if test_name else ())
            elif path.exists() or path.suffix.lower() in ARRAY_FILES:
                table = read_training_file(path, schema)
            else:
                raise DataError(f"{path}: no such file or directory")
        schema = table.schema
        test = None
        if schema.test_split == "file":
            tpath = Path(self.test_path) if self.test_path else _beside(self.path, schema.test_file)
            test = read_file(tpath, schema)
        return table, test

    def load(self, seed: int = 100, *, drop_sites_below: int | None = None,
             stats_sigma: float | None = None) -> FederatedDataset:
        """``drop_sites_below``: under the per-site test split, leave out every site that cannot hold a test set
        and this many training normals (``--small-sites drop`` with the natural partition: B). ``stats_sigma``:
        the per-site statistics the encoding is fitted from are their DP release (``--dp-stats-sigma``)."""
        if self.preset is not None:
            return self._load_builtin(seed, stats_sigma)
        files = _files_identity(self)
        key = None if files is None else (files, seed, drop_sites_below, stats_sigma)
        if key in _LOADED:
            _LOADED.move_to_end(key)
            return copy.deepcopy(_LOADED[key])
        # the content digest is hashed in a thread beside the parse (hashlib releases the GIL on large blocks)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            digest = pool.submit(self.digest)
            table, test = self.read()
            ds = prepare(table, test, seed=seed, name=self.label, drop_sites_below=drop_sites_below,
                         stats_sigma=stats_sigma)
            ds.info["digest"] = digest.result()
        if key is not None and ds.train.nbytes + ds.test_x.nbytes <= LOADED_MAX_BYTES:
            _LOADED[key] = copy.deepcopy(ds)
            while len(_LOADED) > LOADED_KEPT:
                _LOADED.popitem(last=False)
        return ds

    def _load_builtin(self, seed: int, stats_sigma: float | None) -> FederatedDataset:
        from . import registry

        if stats_sigma is not None:
            raise DataError(f"--dp-stats-sigma releases per-site statistics of own data; built-in {self.preset!r} is "
                            "encoded from its pooled training rows (ε does not cover that encoding: summary.json's "
                            "dp.not_covered)")
        if registry.get(self.preset).kind == "tabular":
            return tabular_preset(self.preset, self.data_dir, download=self.download).load(seed)
        from .vision import load_vision

        return load_vision(self.preset, self.data_dir, seed=seed, download=self.download)

    # ------------------------------------------------------------------ passing to worker processes
    def to_dict(self) -> dict:
        if self.frame is not None or self.arrays is not None:
            raise ValueError("in-memory data cannot be passed to another process; write it to a file first")
        if self.preset is not None:
            return {"preset": self.preset, "data_dir": self.data_dir, "download": self.download}
        return {"path": self.path, "schema": None if self.schema is None else self.schema.to_dict(),
                "name": self.name, "test_path": self.test_path}

    @classmethod
    def from_dict(cls, d: dict) -> "DataSource":
        if d.get("preset") is not None:
            return cls.builtin(d["preset"], d.get("data_dir"), download=d.get("download", True))
        return cls(path=d["path"], schema=None if d["schema"] is None else Schema.from_dict(d["schema"]),
                   name=d.get("name"), test_path=d.get("test_path"))


def tabular_preset(name: str, data_dir=None, *, download: bool = True) -> DataSource:
    """Built-in tabular dataset ``name`` as the own-data source it is: its files in ``<data_dir>/<name>/`` (fetched
    when missing and allowed) read with the registry's schema (:mod:`fedgca.data.presets`)."""
    from . import registry
    from .download import ensure_files, locate, resolve_data_dir

    spec, schema = registry.get(name), registry.tabular_schema(name)
    dataset_dir = resolve_data_dir(data_dir) / name
    ensure_files(dataset_dir, spec.files, download=download)

    def found(file_name: str) -> Path:
        path = locate(dataset_dir, next(r for r in spec.files if r.name == file_name))
        if path is None:
            raise DataError(f"{dataset_dir}: missing {file_name}")
        return path

    test = found(schema.test_file) if schema.test_file else None
    return DataSource(str(found(spec.train_file)), schema, name=name,
                      test_path=None if test is None else str(test))


def source_for(dataset: str, data_dir=None, sources: Mapping[str, DataSource] | None = None) -> DataSource:
    """The one way in: dataset ``dataset`` of a run — own data's source when ``sources`` has one by that name, else
    the built-in dataset in ``data_dir``."""
    if sources and dataset in sources:
        return sources[dataset]
    return DataSource.builtin(dataset, data_dir)


def by_name(source: DataSource | None) -> dict[str, DataSource] | None:
    """``sources`` for one own-data source (None stays None)."""
    return None if source is None else {source.label: source}


def _beside(path: str | None, name: str | None) -> Path:
    if not name:
        raise DataError("the schema's test split is 'file' but names no test file")
    base = Path(path) if path else Path(".")
    return (base if base.is_dir() else base.parent) / name


_DIGESTS: dict[tuple, str] = {}

# The datasets this process loaded from files, by the files' versions and the load's arguments (every one of them
# seeded: the same key gives the same dataset), most recent last; a hit is a deep copy. The runs of an in-process
# compare or sweep, and every node of an in-process Flower simulation, load the same files with the same seed: at
# 30-200 ms a load on the paper's tabular files that was most of a short run's set-up.
_LOADED: "OrderedDict[tuple, FederatedDataset]" = OrderedDict()
LOADED_KEPT = 8
LOADED_MAX_BYTES = 256 * 2**20  # a larger dataset is not kept: a second copy of it would cost memory, not time


def _file_key(p: Path) -> tuple:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def _files(src: DataSource) -> list[Path]:
    """The files a file source reads: its file, or its directory's site files, and its test file."""
    path = Path(src.path)
    files = site_files(path, required=False) if path.is_dir() else [path]
    return files + [Path(src.test_path)] if src.test_path else files


def _files_identity(src: DataSource) -> tuple | None:
    """What a load of ``src`` reads: its ``cache_key`` and its files' versions (path, size, mtime); None for
    in-memory data (a DataFrame or arrays the caller may still change) and missing files."""
    if src.frame is not None or src.arrays is not None or src.path is None:
        return None
    try:
        return src.cache_key, tuple(_file_key(p) for p in _files(src))
    except OSError:
        return None


def _digest(src: DataSource) -> str:
    h = hashlib.sha256()
    h.update((src.schema.digest() if src.schema is not None else "arrays").encode())
    h.update((src.test_path and Path(src.test_path).name or "").encode())
    if src.frame is not None:
        h.update(pd.util.hash_pandas_object(src.frame, index=False).to_numpy().tobytes())
        return h.hexdigest()[:16]
    if src.arrays is not None:
        for a in src.arrays:
            if a is not None:
                h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
        return h.hexdigest()[:16]
    for p in _files(src):
        if not p.exists():
            continue
        key = _file_key(p)
        if key not in _DIGESTS:  # hashing a 100 MB file takes ~0.2 s: once per process and file version
            _DIGESTS[key] = file_digest(p)
        h.update(p.name.encode() + b"\0" + _DIGESTS[key].encode())
    return h.hexdigest()[:16]


def open_source(path, schema=None, *, test_file=None, test_split: str | None = None, name: str | None = None) \
        -> DataSource:
    """A DataSource from what a user types: a data path, a schema file (or Schema), test options."""
    if path is None:
        raise DataError("no data given")
    if isinstance(schema, (str, Path)):
        schema = Schema.load(schema)
    if schema is None and Path(path).suffix.lower() not in (".mat", ".npz") and not _array_dir(Path(path)):
        raise DataError(f"{path}: a schema is needed (--schema S.json; `fedgca schema infer {Path(path).name} "
                        "--label COLUMN --normal VALUE` writes one)")
    return DataSource(str(path), schema, name=name).with_test(test_split, test_file)


def _array_dir(p: Path) -> bool:
    return p.is_dir() and all(f.suffix.lower() in (".mat", ".npz") for f in site_files(p, required=False))
