"""Your own data's source: where the records are (a file, a directory of per-site files, or a pandas DataFrame /
NumPy arrays in Python), the :class:`~fedgca.data.schema.Schema` that says what they mean, its content digest
(which names runs), and ``load(seed)`` → the :class:`~fedgca.data.dataset.FederatedDataset` every driver trains on
(read by :mod:`fedgca.data.readers`, split and encoded by :mod:`fedgca.data.prepare`). The built-in tabular
datasets are sources too (:mod:`fedgca.data.presets`): there is one path."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

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
    """

    path: str | None = None
    schema: Schema | None = None
    name: str | None = None
    test_path: str | None = None
    frame: Any = field(default=None, repr=False)
    arrays: Any = field(default=None, repr=False)

    # ------------------------------------------------------------------ identity
    @property
    def label(self) -> str:
        """The dataset's name in run directories and tables (the file's stem unless given)."""
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
        # the content digest is hashed in a thread beside the parse (hashlib releases the GIL on large blocks)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            digest = pool.submit(self.digest)
            table, test = self.read()
            ds = prepare(table, test, seed=seed, name=self.label, drop_sites_below=drop_sites_below,
                         stats_sigma=stats_sigma)
            ds.info["digest"] = digest.result()
        return ds

    # ------------------------------------------------------------------ passing to worker processes
    def to_dict(self) -> dict:
        if self.frame is not None or self.arrays is not None:
            raise ValueError("in-memory data cannot be passed to another process; write it to a file first")
        return {"path": self.path, "schema": None if self.schema is None else self.schema.to_dict(),
                "name": self.name, "test_path": self.test_path}

    @classmethod
    def from_dict(cls, d: dict) -> "DataSource":
        return cls(path=d["path"], schema=None if d["schema"] is None else Schema.from_dict(d["schema"]),
                   name=d.get("name"), test_path=d.get("test_path"))


def _beside(path: str | None, name: str | None) -> Path:
    if not name:
        raise DataError("the schema's test split is 'file' but names no test file")
    base = Path(path) if path else Path(".")
    return (base if base.is_dir() else base.parent) / name


_DIGESTS: dict[tuple, str] = {}


def _file_key(p: Path) -> tuple:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


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
    path = Path(src.path)
    files = site_files(path, required=False) if path.is_dir() else [path]
    if src.test_path:
        files.append(Path(src.test_path))
    for p in files:
        if not p.exists():
            continue
        key = _file_key(p)
        if key not in _DIGESTS:  # hashing a 100 MB file takes ~0.2 s: once per process and file version
            fh = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    fh.update(block)
            _DIGESTS[key] = fh.hexdigest()
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
