"""A schema inferred from a table (``fedgca schema infer``, ``fedgca.load_data(label=, normal=)``): numeric vs
categorical columns, category lists, the label rule; identifiers and constant text left out with a note."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fedgca.lazyimport import LazyModule

from .errors import DataError
from .readers import ARRAY_FILES, ARRAY_LABEL, read_array_file, require_file
from .schema import CATEGORICAL, NUMERIC, Feature, Schema

pd = LazyModule("pandas")


MAX_CATEGORIES = 1000  # a text column with more distinct values is an identifier, not a category


def infer_schema(data, *, label: str | None, normal, anomaly=None, site: str | None = None,
                 exclude=(), sep: str | None = None, max_categories: int = MAX_CATEGORIES,
                 where: str | None = None) -> tuple[Schema, list[str]]:
    """A schema for a table file or DataFrame: numeric vs categorical from the values, category lists,
    the label rule. Returns (schema, notes) — the notes say what was decided and why.

    A column is numeric when every non-empty cell parses as a number; otherwise categorical, with
    its sorted values as the category list, unless it has more than ``max_categories`` distinct
    values (an identifier or free text), which is left out with a note.
    """
    notes: list[str] = []
    if isinstance(data, (str, Path)) and Path(data).suffix.lower() in ARRAY_FILES:
        return _array_file_schema(Path(data), label)
    if isinstance(data, (str, Path)):
        path = Path(data)
        where = where or str(path)
        frame, sep = _read_text_frame(path, sep)
    else:
        frame, where = data, where or "DataFrame"
    frame = frame.copy(deep=False)
    frame.columns = [str(c).strip() for c in frame.columns]
    normal = [normal] if isinstance(normal, str) else list(normal or [])
    if label is not None:
        if label not in frame.columns:
            raise DataError(f"{where}: no label column {label!r} (columns: {', '.join(map(repr, frame.columns[:10]))}"
                            f"{' ...' if len(frame.columns) > 10 else ''})")
        values = frame[label].astype(str).str.strip()
        present = sorted(pd.unique(values))
        absent = [v for v in normal if v not in present]
        if absent:
            raise DataError(f"{where}: column {label!r} has no value {', '.join(map(repr, absent))} "
                            f"(values: {', '.join(map(repr, present[:10]))}{' ...' if len(present) > 10 else ''})")
        if not normal:
            raise DataError(f"{where}: say which {label!r} values are normal (--normal VALUE[,VALUE])")
        if anomaly is not None:
            anomaly = [anomaly] if isinstance(anomaly, str) else list(anomaly)
    if site is not None and site not in frame.columns:
        raise DataError(f"{where}: no site column {site!r}")
    feats = []
    for col in frame.columns:
        if col == label or col in exclude:
            continue
        s = frame[col]
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            feats.append(Feature(col, NUMERIC))
            continue
        text = s.dropna().astype(str).str.strip()
        text = text[text != ""]
        # parsed once per distinct value (in order of first appearance): pandas parses a failing text cell by
        # cell, 50 ms a column of a 45,000-row file, and a category column has a handful of distinct values
        distinct = pd.unique(text)
        parsed = pd.to_numeric(pd.Series(distinct, dtype=object), errors="coerce")
        if len(text) and parsed.notna().all():
            feats.append(Feature(col, NUMERIC))
            continue
        cats = sorted(distinct)
        if len(cats) > max_categories and col != site:
            notes.append(f"left out {col!r}: {len(cats)} distinct text values (> {max_categories}; an identifier "
                         "or free text, not a category)")
            continue
        if parsed.notna().any():
            words = distinct[parsed.isna().to_numpy()]
            notes.append(f"{col!r} is categorical: {int(text.isin(words).sum())} of its cells are not numbers "
                         f"(e.g. {words[0]!r})")
        if s.isna().any() or (s.astype(str).str.strip() == "").any():
            cats = sorted({*cats, "MISSING"})
        feats.append(Feature(col, CATEGORICAL, tuple(cats)))
    if not feats:
        raise DataError(f"{where}: no feature columns left")
    schema = Schema(features=tuple(feats), label=label, normal=tuple(normal),
                    anomaly=None if anomaly is None else tuple(anomaly), site=site)
    if sep is not None:
        schema = replace(schema, csv=replace(schema.csv, sep=sep))
    n_num, n_cat = len(schema.numeric), len(schema.categorical)
    notes.insert(0, f"{len(feats)} features: {n_num} numeric, {n_cat} categorical")
    return schema, notes


def _array_file_schema(path: Path, label: str | None) -> tuple[Schema, list[str]]:
    """An .npz/.mat file fixes its own schema (X numeric, y = 1 anomaly); reading it whole also checks it."""
    if label not in (None, ARRAY_LABEL):
        raise DataError(f"{path}: an .npz/.mat file's label is its array {ARRAY_LABEL!r} (1 = anomaly), "
                        f"not {label!r}")
    schema = read_array_file(path).schema
    return schema, [f"{len(schema.features)} numeric features (the columns of X); label y, 1 = anomaly "
                    "(an .npz/.mat file's own schema: --normal and --anomaly are not read)"]


def _read_text_frame(path: Path, sep: str | None):
    """The file as text cells (for inference), with its separator sniffed from the header line."""
    require_file(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            return pd.read_parquet(path), None
        except Exception as e:  # noqa: BLE001 — pyarrow raises several types for a damaged or foreign file
            raise DataError(f"{path}: not a readable Parquet file ({' '.join(str(e).split())[:160]})") from None
    if sep is None:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
        sep = max((",", ";", "\t", "|"), key=first.count)
        if path.suffix.lower() == ".tsv":
            sep = "\t"
    try:
        frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=[""], index_col=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as e:
        raise DataError(f"{path}: cannot read as a table ({' '.join(str(e).split())[:160]})") from None
    if len(frame) == 0:
        raise DataError(f"{path}: no data rows")
    return frame, sep


__all__ = ["MAX_CATEGORIES", "infer_schema"]
