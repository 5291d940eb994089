"""Tabular datasets: raw readers, preprocessing and the normal/anomaly split (SPEC §4).

Three layers, each usable on its own:

* :func:`read_raw` reads ONE file in a dataset's canonical published format
  (see ``shared/data/*/SOURCE.md``) and returns typed feature columns and the
  label column. It is also how a practitioner's new rows in the same format are
  scored later, so every malformed input raises :class:`DataError` with a
  one-line message naming the file and the problem.
* :class:`TabularPreprocessor` is the SPEC §4 "Tabular encoding": category
  codes, the left-to-right correlation filter, standardisation; fitted on the
  training normals only and JSON round-trippable.
* :func:`load_tabular` ties them together: files -> normal/anomaly split ->
  :class:`FederatedDataset`.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedgca.lazyimport import LazyModule

from .dataset import FederatedDataset, split_info
from .paths import REMOTE_FILES, DataError, ensure_files, locate, resolve_data_dir

pd = LazyModule("pandas")  # imported when a CSV is read (fedgca.lazyimport)

# --------------------------------------------------------------------------- formats


@dataclass(frozen=True)
class RawFormat:
    """A dataset's canonical file format (SOURCE.md) and its label semantics (SPEC §4 table)."""

    name: str
    sep: str
    header: bool
    features: tuple[str, ...]  # canonical feature names, in file order
    categorical: frozenset[str]  # non-numeric feature columns; all others must parse as numbers
    label: str
    normal: tuple[str, ...]  # label values of normal rows
    anomaly: tuple[str, ...]  # label values of anomalous rows
    unused: tuple[str, ...] = ()  # label values that are valid but belong to neither class
    encoding: str = "utf-8"
    comment: str | None = None  # lines starting with this are skipped (adult.test)
    skipinitialspace: bool = False  # adult separates fields by ", "
    label_strip: str = ""  # trailing characters removed from labels (adult.test's ".")

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.features, self.label)

    @property
    def label_values(self) -> tuple[str, ...]:
        return (*self.normal, *self.anomaly, *self.unused)

    @property
    def sep_name(self) -> str:
        return {",": "','", ";": "';'"}.get(self.sep, repr(self.sep))


_ACADEMIC_FEATURES = (
    "Marital status", "Application mode", "Application order", "Course",
    "Daytime/evening attendance", "Previous qualification", "Previous qualification (grade)",
    "Nacionality", "Mother's qualification", "Father's qualification", "Mother's occupation",
    "Father's occupation", "Admission grade", "Displaced", "Educational special needs", "Debtor",
    "Tuition fees up to date", "Gender", "Scholarship holder", "Age at enrollment", "International",
    "Curricular units 1st sem (credited)", "Curricular units 1st sem (enrolled)",
    "Curricular units 1st sem (evaluations)", "Curricular units 1st sem (approved)",
    "Curricular units 1st sem (grade)", "Curricular units 1st sem (without evaluations)",
    "Curricular units 2nd sem (credited)", "Curricular units 2nd sem (enrolled)",
    "Curricular units 2nd sem (evaluations)", "Curricular units 2nd sem (approved)",
    "Curricular units 2nd sem (grade)", "Curricular units 2nd sem (without evaluations)",
    "Unemployment rate", "Inflation rate", "GDP",
)  # fmt: skip
_ADULT_FEATURES = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)  # fmt: skip
_BANK_FEATURES = (
    "age", "job", "marital", "education", "default", "balance", "housing", "loan", "contact",
    "day", "month", "duration", "campaign", "pdays", "previous", "poutcome",
)  # fmt: skip
_CREDIT_FEATURES = ("Time", *(f"V{i}" for i in range(1, 29)), "Amount")
_MAGIC_FEATURES = (
    "fLength", "fWidth", "fSize", "fConc", "fConc1", "fAsym", "fM3Long", "fM3Trans", "fAlpha", "fDist",
)  # fmt: skip

FORMATS: dict[str, RawFormat] = {
    # academic codes every attribute numerically already (UCI 697): all numeric.
    "academic": RawFormat(
        "academic", ";", True, _ACADEMIC_FEATURES, frozenset(), "Target",
        normal=("Graduate",), anomaly=("Dropout",), unused=("Enrolled",), encoding="utf-8-sig",
    ),
    "adult": RawFormat(
        "adult", ",", False, _ADULT_FEATURES,
        frozenset({"workclass", "education", "marital-status", "occupation", "relationship", "race",
                   "sex", "native-country"}),
        "income", normal=("<=50K",), anomaly=(">50K",), comment="|", skipinitialspace=True,
        label_strip=".",
    ),
    "bank": RawFormat(
        "bank", ";", True, _BANK_FEATURES,
        frozenset({"job", "marital", "education", "default", "housing", "loan", "contact", "month",
                   "poutcome"}),
        "y", normal=("no",), anomaly=("yes",),
    ),
    "credit": RawFormat("credit", ",", True, _CREDIT_FEATURES, frozenset(), "Class", normal=("0",), anomaly=("1",)),
    "magic": RawFormat("magic", ",", False, _MAGIC_FEATURES, frozenset(), "class", normal=("g",), anomaly=("h",)),
}  # fmt: skip

# Which raw files make up each dataset, and which one is the provided test split.
TRAIN_FILE = {"academic": "data.csv", "adult": "adult.data", "bank": "bank-full.csv",
              "credit": "creditcard.csv", "magic": "magic04.data"}  # fmt: skip
TEST_FILE = {"adult": "adult.test"}  # datasets absent here use the balanced tail


def _format(name: str) -> RawFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise DataError(f"unknown tabular dataset {name!r}; known: {', '.join(FORMATS)}") from None


# --------------------------------------------------------------------------- raw reading


def _open_text(path: Path, encoding: str):
    """Open a possibly compressed text file (used only on the error path, to count lines)."""
    opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}.get(path.suffix, open)
    return opener(path, "rt", encoding=encoding, errors="replace", newline="")


def _line_number(path: Path, fmt: RawFormat, record: int) -> int:
    """1-based file line of the ``record``-th data record (0-based), as pandas skipped them.

    pandas drops blank lines, comment lines and the header, so the record index
    is not the line number; this re-scans the file (error path only, so cost is
    irrelevant). Quoted fields spanning lines do not occur in these formats.
    """
    seen = -1 if fmt.header else 0
    with _open_text(path, fmt.encoding) as f:
        for lineno, line in enumerate(f, start=1):
            text = line.strip("\r\n")
            if not text.strip() or (fmt.comment and text.startswith(fmt.comment)):
                continue
            if seen == -1:  # the header line
                seen = 0
                continue
            if seen == record:
                return lineno
            seen += 1
    return record + 1 + int(fmt.header)


def _check_separator(path: Path, fmt: RawFormat) -> None:
    """Header-less formats: a first record with a single field means another separator."""
    with _open_text(path, fmt.encoding) as f:
        for lineno, line in enumerate(f, start=1):
            text = line.strip()
            if not text or (fmt.comment and text.startswith(fmt.comment)):
                continue
            if fmt.sep not in text:
                raise DataError(
                    f"{path}: line {lineno}: found 1 field, expected {len(fmt.features)} or more "
                    f"(wrong separator? expected {fmt.sep_name})"
                )
            return


def _read_header(path: Path, fmt: RawFormat) -> dict[str, str]:
    """Map stripped column names to the raw header names (academic has a trailing tab)."""
    head = pd.read_csv(path, sep=fmt.sep, nrows=0, encoding=fmt.encoding, index_col=False)
    return {str(c).strip(): c for c in head.columns}


def _check_columns(path: Path, fmt: RawFormat, present: list[str], require_label: bool) -> None:
    """Every feature column (and the label, when required) must be in the header."""
    need = list(fmt.columns if require_label else fmt.features)
    missing = [c for c in need if c not in present]
    if not missing:
        return
    hint = f" (found {len(present)} column; wrong separator? expected {fmt.sep_name})" if len(present) == 1 else ""
    shown = ", ".join(repr(c) for c in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    raise DataError(f"{path}: missing column(s) {shown}{hint}")


def _read_frame(path: Path, fmt: RawFormat, require_label: bool) -> pd.DataFrame:
    """Read the file with typed columns; every format problem becomes a DataError.

    Fast path: numeric columns parsed straight to float64 by the C parser (the
    284k-row credit file in under a second). Only when that fails is the file
    re-read as text to find the first offending cell and its line.
    """
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    if not fmt.header:
        _check_separator(path, fmt)
    try:
        if fmt.header:
            raw_names = _read_header(path, fmt)
            _check_columns(path, fmt, list(raw_names), require_label)
            usecols = [raw_names[c] for c in fmt.columns if c in raw_names]
            names, header = None, 0
        else:
            raw_names = {c: c for c in fmt.columns}
            usecols, names, header = None, list(fmt.columns), None
        dtype = {raw_names[c]: (str if (c in fmt.categorical or c == fmt.label) else "float64")
                 for c in fmt.columns if c in raw_names}  # fmt: skip
        kwargs: dict[str, Any] = dict(
            sep=fmt.sep, header=header, names=names, usecols=usecols, index_col=False,
            encoding=fmt.encoding, comment=fmt.comment, skipinitialspace=fmt.skipinitialspace,
            keep_default_na=False, na_values=[""],  # "?" (adult) stays a category
        )  # fmt: skip
        try:
            df = pd.read_csv(path, dtype=dtype, **kwargs)
        except ValueError as e:
            if isinstance(e, (pd.errors.ParserError, UnicodeDecodeError)):
                raise
            _diagnose_numeric(path, fmt, kwargs)
            raise DataError(f"{path}: unparsable values ({' '.join(str(e).split())})") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except pd.errors.ParserError as e:
        msg = " ".join(str(e).split()).replace("Error tokenizing data. C error: ", "")
        raise DataError(f"{path}: malformed row ({msg}; fields separated by {fmt.sep_name})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not {fmt.encoding} text ({e.reason} at byte {e.start})") from None
    df.columns = [str(c).strip() for c in df.columns]
    if len(df) == 0:
        raise DataError(f"{path}: no data rows")
    return df


_NA_TOKENS = {"", "nan", "na", "n/a", "null", "none", "-nan"}


def _diagnose_numeric(path: Path, fmt: RawFormat, kwargs: dict) -> None:
    """Re-read as text and raise a DataError naming the first unparsable numeric cell."""
    kw = dict(kwargs, keep_default_na=False, na_values=None, na_filter=False)
    text = pd.read_csv(path, dtype=str, **kw)
    text.columns = [str(c).strip() for c in text.columns]
    first: tuple[int, str, str] | None = None
    for col in fmt.features:
        if col in fmt.categorical or col not in text.columns:
            continue
        vals = text[col].astype(str).str.strip()
        bad = np.flatnonzero(pd.to_numeric(vals, errors="coerce").isna().to_numpy())
        if bad.size and (first is None or bad[0] < first[0]):
            first = (int(bad[0]), col, vals.iloc[bad[0]])
    if first is not None:
        row, col, val = first
        line = _line_number(path, fmt, row)
        problem = "missing or NaN value" if val.lower() in _NA_TOKENS else "cannot parse as a number"
        raise DataError(f"{path}: line {line}: column {col!r}: {problem} ({val!r})")


def _missing_cell_error(path: Path, fmt: RawFormat, df: pd.DataFrame, cols: list[str]) -> DataError:
    """A DataError for the first row with an empty/NaN cell among ``cols``."""
    na = df[cols].isna().to_numpy()
    row = int(np.flatnonzero(na.any(axis=1))[0])
    col = cols[int(np.flatnonzero(na[row])[0])]
    line = _line_number(path, fmt, row)
    if na[row].all():
        return DataError(f"{path}: line {line}: empty row (NaN in every column)")
    return DataError(f"{path}: line {line}: missing or NaN value in column {col!r}")


def _labels(path: Path, fmt: RawFormat, df: pd.DataFrame, require_label: bool) -> pd.Series | None:
    """Normalised label strings (adult.test's trailing '.' removed), validated."""
    if fmt.label not in df.columns:
        return None
    raw = df[fmt.label]
    if raw.isna().all() and not require_label:
        return None  # a header-less file without the label column (features only)
    if raw.isna().any():
        row = int(np.flatnonzero(raw.isna().to_numpy())[0])
        hint = "" if fmt.header else f" (too few {fmt.sep_name}-separated fields?)"
        raise DataError(f"{path}: line {_line_number(path, fmt, row)}: missing label in column {fmt.label!r}{hint}")
    y = raw.astype(str).str.strip()
    if fmt.label_strip:
        y = y.str.rstrip(fmt.label_strip)
    unknown = ~y.isin(fmt.label_values)
    if unknown.any():
        row = int(np.flatnonzero(unknown.to_numpy())[0])
        raise DataError(
            f"{path}: line {_line_number(path, fmt, row)}: unknown {fmt.label!r} value {y.iloc[row]!r} "
            f"(expected one of {', '.join(fmt.label_values)})"
        )
    return y.astype(object).rename(fmt.label).reset_index(drop=True)


def read_raw(name: str, path: Path | str, *, require_label: bool = True) -> tuple[pd.DataFrame, pd.Series | None]:
    """Read one file in dataset ``name``'s canonical format (SPEC §4, SOURCE.md).

    Returns ``(features, labels)``: the feature columns under their canonical
    names in canonical order (numeric columns float64, categorical columns
    stripped strings; adult's ``?`` is kept as its own category) and the label
    strings (``"Graduate"``, ``"<=50K"``, ``"no"``, ``"0"``, ``"g"``, ...), or
    ``None`` when the label column is absent and ``require_label`` is false
    (scoring a practitioner's unlabelled rows). Header-less formats (adult,
    magic) may then omit the last field. Any malformed input raises
    :class:`DataError` with a one-line message naming the file and the problem.
    """
    fmt = _format(name)
    path = Path(path)
    df = _read_frame(path, fmt, require_label)
    feats = list(fmt.features)
    if df[feats].isna().to_numpy().any():
        raise _missing_cell_error(path, fmt, df, feats)
    y = _labels(path, fmt, df, require_label)
    if require_label and y is None:
        raise DataError(f"{path}: no label column {fmt.label!r}")
    X = df[feats].reset_index(drop=True)
    num = [c for c in feats if c not in fmt.categorical]
    finite = np.isfinite(X[num].to_numpy(dtype=np.float64))
    if not finite.all():
        row, j = map(int, np.argwhere(~finite)[0])
        raise DataError(f"{path}: line {_line_number(path, fmt, row)}: non-finite value in column {num[j]!r}")
    for c in fmt.categorical:
        X[c] = X[c].astype(str).str.strip().astype(object)
    return X, y


# --------------------------------------------------------------------------- preprocessing


def encode_columns(df: pd.DataFrame, columns: list[str], categories: dict[str, list[str]]) -> np.ndarray:
    """Integer category codes for categorical columns (unseen -> len(categories)), floats otherwise."""
    out = np.empty((len(df), len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        if col in categories:
            cats = categories[col]
            codes = pd.Index(cats).get_indexer(df[col].astype(str)).astype(np.float64)
            codes[codes < 0] = len(cats)  # SPEC §4: unseen categories get a dedicated code
            out[:, j] = codes
        else:
            out[:, j] = pd.to_numeric(df[col], errors="raise").to_numpy(dtype=np.float64)
    return out


def moments(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(n, column means, centred scatter matrix) of the rows — all the preprocessing fit needs.

    A Flower node shares exactly these (``fedgca.flower.owndata.local_stats``).
    """
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    Xc = X - mean
    return len(X), mean, Xc.T @ Xc


def constant_columns(n: int, mean: np.ndarray, m2: np.ndarray) -> np.ndarray:
    """Zero-variance columns, up to the float rounding of the moments (one rule, from rows or from aggregates)."""
    return np.diag(m2) / n <= 1e-12 * np.maximum(1.0, mean**2)


def abs_correlation(m2: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """|Pearson correlation| from a centred scatter matrix; a constant column correlates 0 with everything."""
    sd = np.sqrt(np.where(constant, 1.0, np.diag(m2)))
    C = m2 / np.outer(sd, sd)
    C[constant, :] = 0.0
    C[:, constant] = 0.0
    return np.clip(np.abs(C), 0.0, 1.0)


def correlation_filter(C: np.ndarray, threshold: float) -> list[int]:
    """Indices of columns kept by SPEC §4's left-to-right scan over the |correlation| matrix C.

    Column j is dropped when |corr(j, i)| > threshold for ANY earlier column i,
    whether or not i itself was dropped (so the result depends only on the
    pairwise matrix, not on the order of previous decisions).
    """
    return [j for j in range(C.shape[0]) if not (C[j, :j] > threshold).any()]


class TabularPreprocessor:
    """SPEC §4 "Tabular encoding", fitted on the training normals only.

    1. Non-numeric columns -> integer codes over the sorted training categories;
       a category unseen in training gets the dedicated code ``len(categories)``.
    2. Correlation filter: scanning left to right, drop every column whose
       |Pearson correlation| with any earlier column (dropped or not) exceeds
       ``corr_threshold`` (strictly); constant columns count as uncorrelated.
    3. Standardise with the training mean and the *population* standard
       deviation (ddof=0, as scikit-learn's StandardScaler); a zero-variance
       column gets std 1.

    Learned attributes: ``columns_`` (input columns), ``categories_``,
    ``kept_columns_``, ``dropped_columns_``, ``mean_``, ``std_``.
    """

    def __init__(self, corr_threshold: float = 0.6):
        self.corr_threshold = corr_threshold

    def fit(self, df: pd.DataFrame) -> TabularPreprocessor:
        columns = [str(c) for c in df.columns]
        categorical = [c for c in columns if not pd.api.types.is_numeric_dtype(df[c])]
        self.columns_ = columns
        self.categories_ = {c: sorted(df[c].astype(str).unique().tolist()) for c in categorical}
        X = encode_columns(df, columns, self.categories_)
        n, mean, m2 = moments(X)
        constant = constant_columns(n, mean, m2)
        keep = correlation_filter(abs_correlation(m2, constant), self.corr_threshold)
        self.kept_columns_ = [columns[j] for j in keep]
        self.dropped_columns_ = [c for c in columns if c not in self.kept_columns_]
        Xk = X[:, keep]
        std = Xk.std(axis=0)
        std[constant[keep]] = 1.0
        self.mean_ = Xk.mean(axis=0)
        self.std_ = std
        return self

    def transform(self, df: pd.DataFrame) -> np.ndarray:
        """Raw feature frame -> float32 model inputs [len(df), len(kept_columns_)]."""
        missing = [c for c in self.kept_columns_ if c not in df.columns]
        if missing:
            raise DataError(f"input rows lack column(s) {', '.join(map(repr, missing))}")
        cats = {c: v for c, v in self.categories_.items() if c in self.kept_columns_}
        X = encode_columns(df, self.kept_columns_, cats)
        if not np.isfinite(X).all():
            row = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
            raise DataError(f"input rows: row {row + 1} has a missing or non-finite value")
        return ((X - self.mean_) / self.std_).astype(np.float32)

    def fit_transform(self, df: pd.DataFrame) -> np.ndarray:
        return self.fit(df).transform(df)

    def to_dict(self) -> dict:
        """JSON-serialisable state (floats stored as Python floats, exact round trip)."""
        return {
            "type": "tabular",
            "corr_threshold": float(self.corr_threshold),
            "columns": list(self.columns_),
            "categories": {c: list(v) for c, v in self.categories_.items()},
            "kept_columns": list(self.kept_columns_),
            "dropped_columns": list(self.dropped_columns_),
            "mean": [float(v) for v in self.mean_],
            "std": [float(v) for v in self.std_],
        }

    @classmethod
    def from_dict(cls, d: dict) -> TabularPreprocessor:
        self = cls(corr_threshold=d["corr_threshold"])
        self.columns_ = list(d["columns"])
        self.categories_ = {c: list(v) for c, v in d["categories"].items()}
        self.kept_columns_ = list(d["kept_columns"])
        self.dropped_columns_ = list(d["dropped_columns"])
        self.mean_ = np.asarray(d["mean"], dtype=np.float64)
        self.std_ = np.asarray(d["std"], dtype=np.float64)
        return self


# --------------------------------------------------------------------------- loading


def balanced_tail_split(labels: pd.Series, fmt: RawFormat) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §4 balanced tail: (training normal rows, test rows), both in file order.

    With A anomalous rows, the last A normal rows are held out; test = those A
    normals + all A anomalies. Rows with ``unused`` labels (academic's Enrolled)
    appear in neither.
    """
    normal = np.flatnonzero(labels.isin(fmt.normal).to_numpy())
    anomaly = np.flatnonzero(labels.isin(fmt.anomaly).to_numpy())
    a = len(anomaly)
    if a == 0 or a >= len(normal):
        raise DataError(f"{fmt.name}: balanced tail needs 0 < anomalies < normals, got {a} and {len(normal)}")
    train = normal[: len(normal) - a]
    test = np.sort(np.concatenate([normal[len(normal) - a :], anomaly]))
    return train, test


def _resolve_file(dataset_dir: Path, name: str, file_name: str) -> Path:
    rf = next(r for r in REMOTE_FILES[name] if r.name == file_name)
    path = locate(dataset_dir, rf)
    assert path is not None  # ensure_files ran first
    return path


def load_tabular(name: str, data_dir: Path | str | None = None, download: bool = True) -> FederatedDataset:
    """Load a tabular dataset as SPEC §4 defines it (files, split, encoding).

    ``data_dir`` is the root holding ``<name>/<file>`` (default: see
    :func:`fedgca.data.paths.resolve_data_dir`). Missing files are downloaded
    when ``download`` is true. Training = normal rows only, file order kept;
    test labels: 1 = anomaly.
    """
    fmt = _format(name)
    dataset_dir = resolve_data_dir(data_dir) / name
    ensure_files(dataset_dir, REMOTE_FILES[name], download=download)
    train_path = _resolve_file(dataset_dir, name, TRAIN_FILE[name])
    X, y = read_raw(name, train_path)
    files = [train_path.name]
    if name in TEST_FILE:
        test_path = _resolve_file(dataset_dir, name, TEST_FILE[name])
        Xt, yt = read_raw(name, test_path)
        files.append(test_path.name)
        train_rows = np.flatnonzero(y.isin(fmt.normal).to_numpy())
        test_rows = np.flatnonzero(yt.isin(fmt.normal + fmt.anomaly).to_numpy())
        X_test, y_test = Xt.iloc[test_rows], yt.iloc[test_rows]
        test_set = f"provided {test_path.name}, all rows"
    else:
        train_rows, test_rows = balanced_tail_split(y, fmt)
        X_test, y_test = X.iloc[test_rows], y.iloc[test_rows]
        test_set = "balanced tail"
    X_train = X.iloc[train_rows].reset_index(drop=True)
    pre = TabularPreprocessor().fit(X_train)
    test_y = y_test.isin(fmt.anomaly).to_numpy().astype(np.int64)
    info = {
        **split_info(len(X_train), test_y, files, dataset_dir, test_set),
        "normal": list(fmt.normal),
        "anomaly": list(fmt.anomaly),
        "raw_columns": list(fmt.features),
        "dropped_columns": list(pre.dropped_columns_),
    }
    return FederatedDataset(
        name=name,
        kind="tabular",
        train=pre.transform(X_train),
        test_x=pre.transform(X_test.reset_index(drop=True)),
        test_y=test_y,
        preprocessor=pre,
        feature_names=list(pre.kept_columns_),
        info=info,
    )
