"""Reading tables of records: one reader for every tabular input, described by a :class:`Schema`.

Inputs: a CSV/TSV text file (optionally .gz/.xz/.bz2), a Parquet file, an ODDS ``.mat`` or
ADBench ``.npz`` file (arrays ``X`` and ``y``, 1 = anomaly), a directory of per-site files (one
file per site: the natural federated layout), or in Python a pandas DataFrame or NumPy arrays.
Each becomes a :class:`RawTable` — typed feature columns, label strings, site names — that
:mod:`fedgca.data.prepare` splits and encodes the same way whatever it came from.

Every malformed input raises :class:`DataError` with one line naming the file, the column and
the first offending line (and how many rows share the problem).
"""
from __future__ import annotations

import bz2
import gzip
import lzma
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedgca.lazyimport import LazyModule

from .arrayfiles import read_mat, read_npz
from .errors import DataError
from .schema import (
    CATEGORICAL,
    MISSING_CATEGORY,
    MISSING_TOKENS,
    NUMERIC,
    CsvLayout,
    Feature,
    Schema,
)

pd = LazyModule("pandas")  # imported when a table is read (fedgca.lazyimport)

PARQUET = (".parquet", ".pq")
ARRAY_FILES = (".mat", ".npz")
ARRAY_LABEL = "y"  # the label column of a .mat/.npz table: "1" = anomaly, "0" = normal


@dataclass
class RawTable:
    """Records as read, before any split or encoding.

    ``features``: the schema's feature columns (numeric float64 with NaN where a cell was empty
    and the schema imputes; categorical stripped strings, ``MISSING`` for empty cells);
    ``labels``: label strings or None; ``sites``: site names or None; ``files``: file names
    (no directories, so nothing of this machine ends up in a run's files).
    """

    features: Any  # pd.DataFrame (with ``matrix``: the categorical columns only)
    labels: Any  # pd.Series | None
    sites: Any  # pd.Series | None
    files: list[str]
    schema: Schema
    # Large CSVs (read_training_file): every feature as one float64 [n, d] matrix in schema order — numeric
    # columns filled, categorical columns NaN until the split fixes their categories — instead of a frame.
    matrix: Any = None

    def __len__(self) -> int:
        return len(self.matrix) if self.matrix is not None else len(self.features)


# --------------------------------------------------------------------------- text helpers


def _open_text(path: Path, encoding: str):
    """Open a possibly compressed text file (error paths only: counting lines, sniffing)."""
    opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}.get(path.suffix, open)
    return opener(path, "rt", encoding=encoding, errors="replace", newline="")


def line_number(path: Path, csv: CsvLayout, record: int) -> int:
    """1-based file line of the ``record``-th data record (0-based), as pandas skipped them.

    pandas drops blank lines, comment lines and the header, so the record index is not the
    line number; this re-scans the file (error path only). Quoted fields spanning lines are
    not counted specially.
    """
    seen = -1 if csv.header else 0
    with _open_text(path, csv.encoding) as f:
        for lineno, line in enumerate(f, start=1):
            text = line.strip("\r\n")
            if not text.strip() or (csv.comment and text.startswith(csv.comment)):
                continue
            if seen == -1:
                seen = 0
                continue
            if seen == record:
                return lineno
            seen += 1
    return record + 1 + int(csv.header)


def _rows_text(count: int) -> str:
    return "" if count <= 1 else f"; {count} rows in all"


# --------------------------------------------------------------------------- CSV


def _check_separator(path: Path, schema: Schema) -> None:
    """Header-less files: a first record with a single field means another separator."""
    csv = schema.csv
    with _open_text(path, csv.encoding) as f:
        for lineno, line in enumerate(f, start=1):
            text = line.strip()
            if not text or (csv.comment and text.startswith(csv.comment)):
                continue
            if csv.sep not in text:
                raise DataError(f"{path}: line {lineno}: found 1 field, expected {len(schema.features)} or more "
                                f"(wrong separator? expected {csv.sep_name})")
            return


def _needed(schema: Schema, require_label: bool) -> list[str]:
    """The columns a file must have: the features, and for training data the label and the site too
    (rows to score need neither)."""
    return schema.read_columns if require_label else schema.columns


def _check_columns(path: Path, schema: Schema, present: list[str], require_label: bool) -> None:
    need = _needed(schema, require_label)
    missing = [c for c in need if c not in present]
    if not missing:
        return
    if len(present) == 1:
        hint = f" (found 1 column; wrong separator? expected {schema.csv.sep_name})"
    else:
        shown = ", ".join(map(repr, present[:8])) + (" ..." if len(present) > 8 else "")
        hint = f" (the file has {shown})"
    what = ", ".join(repr(c) for c in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    kind = "label column" if missing == [schema.label] else "column(s)"
    raise DataError(f"{path}: missing {kind} {what}{hint}; the schema does not match the file")


def _csv_kwargs(schema: Schema, path: Path, require_label: bool) -> dict[str, Any]:
    csv = schema.csv
    if csv.header:
        head = pd.read_csv(path, sep=csv.sep, nrows=0, encoding=csv.encoding, index_col=False)
        raw_names = {str(c).strip(): c for c in head.columns}  # academic's header has a trailing tab
        _check_columns(path, schema, list(raw_names), require_label)
        names, header = None, 0
    else:
        file_cols = list(csv.names or schema.read_columns)
        raw_names = {c: c for c in file_cols}
        names, header = file_cols, None
    wanted = [c for c in schema.read_columns if c in raw_names]
    text = {c for c in schema.categorical} | {schema.label, schema.site} - {None}
    dtype = {raw_names[c]: (str if c in text else "float64") for c in wanted}
    usecols = [raw_names[c] for c in wanted] if csv.header else None  # header-less: every named field
    return dict(sep=csv.sep, header=header, names=names, usecols=usecols, dtype=dtype,
                index_col=False, encoding=csv.encoding, comment=csv.comment,
                skipinitialspace=csv.skipinitialspace, keep_default_na=False,
                na_values=list(MISSING_TOKENS))


def _can_use_arrow(schema: Schema) -> bool:
    """pandas' pyarrow CSV engine: several times faster on large files; it lacks comment/skipinitialspace."""
    csv = schema.csv
    return (csv.comment is None and not csv.skipinitialspace and csv.encoding in ("utf-8", "utf8")
            and len(csv.sep) == 1 and _has_pyarrow())


def _has_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def read_csv(path: Path, schema: Schema, require_label: bool = True) -> "pd.DataFrame":
    """The file's schema columns with typed values; every format problem becomes a DataError.

    Fast path: numeric columns parsed straight to float64 (pyarrow's multithreaded parser when
    the layout allows, else pandas' C parser). Only when that fails is the file re-read as text
    to find the first offending cell, its line and how many rows share the problem.
    """
    require_file(path)
    if not schema.csv.header:
        _check_separator(path, schema)
    try:
        kwargs = _csv_kwargs(schema, path, require_label)
        try:
            df = None
            if _can_use_arrow(schema):
                arrow = kwargs | {"engine": "pyarrow", "index_col": None}
                try:
                    df = pd.read_csv(path, **arrow)
                except Exception:  # any complaint: the C parser reads it again and names the problem
                    df = None
            if df is None:
                df = pd.read_csv(path, **kwargs)
        except ValueError as e:
            if isinstance(e, (pd.errors.ParserError, UnicodeDecodeError)):
                raise
            _diagnose_numeric(path, schema, kwargs)
            raise DataError(f"{path}: unparsable values ({' '.join(str(e).split())})") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except pd.errors.ParserError as e:
        msg = " ".join(str(e).split()).replace("Error tokenizing data. C error: ", "")
        raise DataError(f"{path}: malformed row ({msg}; fields separated by {schema.csv.sep_name})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not {schema.csv.encoding} text ({e.reason} at byte {e.start})") from None
    df.columns = [str(c).strip() for c in df.columns]
    if len(df) == 0:
        raise DataError(f"{path}: no data rows")
    return df


def _diagnose_numeric(path: Path, schema: Schema, kwargs: dict) -> None:
    """Re-read as text and raise a DataError naming the first unparsable numeric cell."""
    kw = dict(kwargs, dtype=str, keep_default_na=False, na_values=None, na_filter=False)
    text = pd.read_csv(path, **kw)
    text.columns = [str(c).strip() for c in text.columns]
    first: tuple[int, str, str, int] | None = None
    for col in schema.numeric:
        if col not in text.columns:
            continue
        vals = text[col].astype(str).str.strip()
        bad = pd.to_numeric(vals, errors="coerce").isna().to_numpy() & ~vals.isin(MISSING_TOKENS).to_numpy()
        rows = np.flatnonzero(bad)
        if rows.size and (first is None or rows[0] < first[0]):
            first = (int(rows[0]), col, vals.iloc[rows[0]], int(rows.size))
    if first is not None:
        row, col, val, count = first
        raise DataError(f"{path}: line {line_number(path, schema.csv, row)}: column {col!r}: text in a numeric "
                        f"column ({val!r}{_rows_text(count)}); declare it categorical in the schema or clean it")


# --------------------------------------------------------------------------- typed columns


def _finish(frame, schema: Schema, where: str, line_of, require_label: bool, files: list[str]) -> RawTable:
    """Typed features, validated labels and sites from a frame holding the schema's columns."""
    feats = frame[schema.columns].reset_index(drop=True)
    out = {}
    for f in schema.features:
        col = feats[f.name]
        if f.type == NUMERIC:
            values = col.to_numpy(dtype=np.float64) if pd.api.types.is_numeric_dtype(col) else None
            if values is None:
                values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
                bad = np.isnan(values) & col.notna().to_numpy()
                if bad.any():
                    rows = np.flatnonzero(bad)
                    raise DataError(f"{where}: {line_of(rows[0])}column {f.name!r}: text in a numeric column "
                                    f"({col.iloc[rows[0]]!r}{_rows_text(rows.size)}); declare it categorical in "
                                    "the schema or clean it")
            inf = np.isinf(values)
            if inf.any():
                rows = np.flatnonzero(inf)
                raise DataError(f"{where}: {line_of(rows[0])}column {f.name!r}: infinite value "
                                f"({values[rows[0]]}{_rows_text(rows.size)}); fedgca cannot standardise it")
            nan = np.isnan(values)
            if nan.any() and schema.missing == "error":
                raise _missing_error(where, line_of, feats, schema)
            out[f.name] = values
        else:
            na = col.isna().to_numpy()
            if na.any() and schema.missing == "error":
                raise _missing_error(where, line_of, feats, schema)
            out[f.name] = _text(col)
    X = pd.DataFrame({c: v.reset_index(drop=True) if isinstance(v, pd.Series) else v for c, v in out.items()},
                     columns=schema.columns)
    labels = _labels(frame, schema, where, line_of, require_label)
    return RawTable(X, labels, _sites(frame, schema), files, schema)


def _text(col):
    """A categorical column's values: stripped strings, ``MISSING`` for an empty cell (pandas' string dtype,
    arrow-backed: no Python object per cell)."""
    return col.astype(str).where(col.notna().to_numpy(), MISSING_CATEGORY).str.strip()


def _sites(frame, schema: Schema):
    if schema.site is None or schema.site not in frame.columns:
        return None
    return _text(frame[schema.site].reset_index(drop=True))


def _missing_error(where: str, line_of, feats, schema: Schema) -> DataError:
    na = feats.isna().to_numpy()
    rows = np.flatnonzero(na.any(axis=1))
    row = int(rows[0])
    if na[row].all():
        return DataError(f"{where}: {line_of(row)}empty row (nothing in any column)")
    col = schema.columns[int(np.flatnonzero(na[row])[0])]
    return DataError(f"{where}: {line_of(row)}missing value in column {col!r}{_rows_text(rows.size)} "
                     "(this schema says missing = 'error')")


def _labels(frame, schema: Schema, where: str, line_of, require_label: bool):
    if schema.label is None:
        return None
    if schema.label not in frame.columns:
        if require_label:
            raise DataError(f"{where}: no label column {schema.label!r}")
        return None
    raw = frame[schema.label].reset_index(drop=True)
    if raw.isna().all() and not require_label:
        return None  # a header-less file without the label field (features only, for scoring)
    if raw.isna().any():
        rows = np.flatnonzero(raw.isna().to_numpy())
        hint = "" if schema.csv.header else f" (too few {schema.csv.sep_name}-separated fields?)"
        raise DataError(f"{where}: {line_of(rows[0])}missing label in column {schema.label!r}"
                        f"{_rows_text(rows.size)}{hint}")
    y = raw.astype(str).str.strip()
    if schema.csv.label_strip:
        y = y.str.rstrip(schema.csv.label_strip)
    if schema.anomaly is not None:
        known = (*schema.normal, *schema.anomaly, *schema.unused)
        unknown = ~y.isin(known)
        if unknown.any():
            rows = np.flatnonzero(unknown.to_numpy())
            raise DataError(f"{where}: {line_of(rows[0])}unknown {schema.label!r} value {y.iloc[rows[0]]!r}"
                            f"{_rows_text(rows.size)} (expected one of {', '.join(known)})")
    return y.rename(schema.label)


# --------------------------------------------------------------------------- arrays (.mat / .npz / NumPy)


def array_schema(d: int, names: list[str] | None = None) -> Schema:
    """The schema of an X/y table: d numeric features x0..x{d-1}, label y (1 = anomaly)."""
    names = names or [f"x{j}" for j in range(d)]
    return Schema(features=tuple(Feature(n) for n in names), label=ARRAY_LABEL, normal=("0",), anomaly=("1",))


def _array_labels(y: np.ndarray, where: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if y.dtype.kind not in "biuf" or not np.isin(y, (0, 1)).all():
        raise DataError(f"{where}: y must hold 0 (normal) and 1 (anomaly) only")
    return y.astype(np.int64)


def table_from_arrays(X, y=None, sites=None, *, names: list[str] | None = None, where: str = "arrays",
                      files: list[str] | None = None, schema: Schema | None = None) -> RawTable:
    """A RawTable from a feature matrix (n × d), optional 0/1 labels and optional site names."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"{where}: X must be a 2-d array (rows × features), got shape {X.shape}")
    if X.dtype.kind not in "biuf":
        raise DataError(f"{where}: X must be numeric, got dtype {X.dtype}")
    if len(X) == 0:
        raise DataError(f"{where}: no rows")
    schema = schema or array_schema(X.shape[1], names)
    if len(schema.features) != X.shape[1]:
        raise DataError(f"{where}: X has {X.shape[1]} columns, the schema names {len(schema.features)} features")
    frame = pd.DataFrame(X.astype(np.float64, copy=False), columns=schema.columns)
    if y is not None:
        yv = _array_labels(y, where)
        if len(yv) != len(X):
            raise DataError(f"{where}: X has {len(X)} rows but y has {len(yv)}")
        frame[schema.label] = yv.astype(str)
    if sites is not None:
        sv = np.asarray(sites).reshape(-1)
        if len(sv) != len(X):
            raise DataError(f"{where}: X has {len(X)} rows but sites has {len(sv)}")
        schema = replace(schema, site="site")
        frame["site"] = sv.astype(str)
    return _finish(frame, schema, where, lambda r: f"row {r + 1}: ", y is not None, files or [where])


def read_array_file(path: Path, schema: Schema | None = None, *, require_label: bool = True) -> RawTable:
    """ODDS ``.mat`` (MATLAB v5; v7.3 is HDF5, which scipy does not read) or ADBench ``.npz`` (X, y; rows to
    score need only X). A damaged, truncated or foreign file is one :class:`DataError` naming it."""
    require_file(path)
    arrays = read_npz(path) if path.suffix.lower() == ".npz" else read_mat(path)
    missing = [k for k in ("X", "y") if k not in arrays and (require_label or k == "X")]
    if missing:
        raise DataError(f"{path}: no array {' or '.join(missing)} (an ODDS .mat / ADBench .npz holds X, the "
                        "features, and y, 1 = anomaly)")
    return table_from_arrays(arrays["X"], arrays.get("y"), where=str(path), files=[path.name],
                             schema=schema)


# --------------------------------------------------------------------------- DataFrames


def table_from_frame(frame, schema: Schema, *, where: str = "DataFrame", require_label: bool = True,
                     files: list[str] | None = None) -> RawTable:
    """A RawTable from a pandas DataFrame holding the schema's columns."""
    present = [str(c) for c in frame.columns]
    need = _needed(schema, require_label)
    missing = [c for c in need if c not in present]
    if missing:
        raise DataError(f"{where}: missing column(s) {', '.join(map(repr, missing))}; the schema does not match")
    if len(frame) == 0:
        raise DataError(f"{where}: no rows")
    frame = frame.copy(deep=False)
    frame.columns = present
    return _finish(frame, schema, where, lambda r: f"row {r + 1}: ", require_label, files or [where])


# --------------------------------------------------------------------------- files and directories


def read_file(path, schema: Schema | None, *, require_label: bool = True) -> RawTable:
    """One file of any supported kind."""
    path = Path(path)
    if path.suffix.lower() in ARRAY_FILES:
        return read_array_file(path, schema, require_label=require_label)
    if schema is None:
        raise DataError(f"{path}: a schema is needed to read this file (fedgca schema infer {path.name} "
                        "--label COLUMN --normal VALUE writes one)")
    if path.suffix.lower() in PARQUET:
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        try:
            import pyarrow.parquet as pq

            present = pq.read_schema(path).names
        except Exception as e:  # pyarrow raises several types for a non-Parquet file
            raise DataError(f"{path}: not a readable Parquet file ({' '.join(str(e).split())[:120]})") from None
        _check_columns(path, schema, present, require_label)
        frame = pd.read_parquet(path, columns=[c for c in schema.read_columns if c in present])
        if len(frame) == 0:
            raise DataError(f"{path}: no data rows")
        return _finish(frame, schema, str(path), lambda r: f"row {r + 1}: ", require_label, [path.name])
    frame = read_csv(path, schema, require_label)
    return _finish(frame, schema, str(path), lambda r: f"line {line_number(path, schema.csv, r)}: ",
                   require_label, [path.name])


STREAM_MIN_BYTES = 32 << 20  # files from this size are streamed into one matrix (below it, the frame is cheaper)
STREAM_BLOCK = 1 << 20  # bytes of text per streamed batch: small batches keep the reader's buffers small


def read_training_file(path, schema: Schema | None) -> RawTable:
    """:func:`read_file` for training data: a large plain CSV is streamed straight into one float64 matrix.

    pandas' whole-file pyarrow read peaks at ~9× the float32 feature array (docs/performance.md); batches of
    ``STREAM_BLOCK`` bytes written into a matrix allocated once keep the peak near 2× plus the text columns.
    Anything the stream does not handle — another layout, a compressed file, a value that does not parse,
    an infinite or (missing = "error") empty cell — goes the frame path, whose errors name the line.
    """
    path = Path(path)
    if schema is not None and path.suffix.lower() not in (*ARRAY_FILES, *PARQUET, ".gz", ".xz", ".bz2") \
            and path.is_file() and path.stat().st_size >= STREAM_MIN_BYTES and schema.csv.header \
            and _can_use_arrow(schema):
        table = _stream_csv(path, schema)
        if table is not None:
            return table
    return read_file(path, schema)


def _stream_csv(path: Path, schema: Schema) -> RawTable | None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    head = pd.read_csv(path, sep=schema.csv.sep, nrows=0, encoding=schema.csv.encoding, index_col=False)
    raw_names = {str(c).strip(): c for c in head.columns}
    _check_columns(path, schema, list(raw_names), True)
    text = set(schema.categorical) | {schema.label, schema.site} - {None}
    wanted = schema.read_columns
    try:
        reader = pacsv.open_csv(
            path, read_options=pacsv.ReadOptions(block_size=STREAM_BLOCK),
            parse_options=pacsv.ParseOptions(delimiter=schema.csv.sep),
            convert_options=pacsv.ConvertOptions(
                column_types={raw_names[c]: pa.string() if c in text else pa.float64() for c in wanted},
                include_columns=[raw_names[c] for c in wanted], null_values=list(MISSING_TOKENS), strings_can_be_null=True))
        columns = schema.columns
        numeric = [(j, raw_names[c]) for j, c in enumerate(columns) if c not in text]
        X, n, strings = None, 0, {c: [] for c in wanted if c in text}
        for batch in reader:
            m = batch.num_rows
            if X is None:  # rows from the first batch's bytes per row, generously: untouched pages cost no memory
                est = int(path.stat().st_size / max(batch.nbytes / max(m, 1), 1.0) * 2) + m + 1024
                X = np.empty((est, len(columns)))
            if n + m > len(X):
                grown = np.empty((2 * (n + m), len(columns)))
                grown[:n] = X[:n]
                X = grown
            for j, name in numeric:
                col = batch.column(name).to_numpy(zero_copy_only=False)
                if np.isinf(col).any() or (schema.missing == "error" and np.isnan(col).any()):
                    return None  # the frame path names the cell
                X[n:n + m, j] = col
            for c in strings:  # cleaned batch by batch: no column-sized temporaries at the end
                col = pc.utf8_trim_whitespace(batch.column(raw_names[c]))
                if schema.missing == "error" and c in schema.categorical and col.null_count:
                    return None
                strings[c].append(col if c == schema.label else pc.fill_null(col, MISSING_CATEGORY))
            n += m
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, KeyError):
        return None  # the frame path reads it again and names the problem
    if X is None or n == 0:
        return None
    X = X[:n]
    frame = {}
    for c in list(strings):  # one column at a time, its chunks freed as it is converted: arrow-backed strings
        frame[c] = pd.Series(pa.chunked_array(strings.pop(c), type=pa.string()).to_pandas())
    frame = pd.DataFrame(frame)
    labels = _labels(frame, schema, str(path), lambda r: f"line {line_number(path, schema.csv, r)}: ", True)
    sites = frame[schema.site] if schema.site is not None else None
    return RawTable(frame[list(schema.categorical)], labels, sites, [path.name], schema, matrix=X)


def require_file(path: Path) -> None:
    """One line for a data file that is not there or holds nothing (every reader checks this first)."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")


def file_label(path) -> str:
    """A file's name without its suffixes ("site-a.csv.gz" → "site-a"): a per-site file's site, a data file's
    dataset name."""
    return Path(path).name.split(".")[0]


def site_files(directory: Path, *, required: bool = True) -> list[Path]:
    """The per-site files of a directory: every regular, non-hidden file, sorted by name (``required``: none is an
    error). Every reader of a per-site directory — the loader, the content digest, schema inference, the Flower
    nodes — takes its files from here."""
    files = sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith("."))
    if not files and required:
        raise DataError(f"{directory}: no files (a per-site directory holds one data file per site)")
    return files


def read_directory(directory: Path, schema: Schema | None, *, exclude: tuple[str, ...] = ()) -> RawTable:
    """One table from a directory of per-site files; each row's site is its file's name (without suffix)."""
    parts = []
    for p in site_files(directory):
        if p.name in exclude:
            continue
        t = read_file(p, schema)
        t.sites = pd.Series([file_label(p)] * len(t), dtype=object)
        parts.append(t)
    if not parts:
        raise DataError(f"{directory}: no data files besides {', '.join(exclude)}")
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    for t in parts[1:]:
        if t.schema.columns != first.schema.columns:
            raise DataError(f"{directory}: {t.files[0]} has other columns than {first.files[0]}")
    return RawTable(
        features=pd.concat([t.features for t in parts], ignore_index=True),
        labels=None if any(t.labels is None for t in parts) else pd.concat([t.labels for t in parts], ignore_index=True),
        sites=pd.concat([t.sites for t in parts], ignore_index=True),
        files=[f for t in parts for f in t.files],
        schema=first.schema,
    )


__all__ = ["RawTable", "array_schema", "read_array_file", "read_csv", "read_directory", "read_file",
           "table_from_arrays", "table_from_frame", "CATEGORICAL"]
