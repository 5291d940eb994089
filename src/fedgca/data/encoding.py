"""SPEC §4 "Tabular encoding": category codes, the correlation filter and standardisation.

:class:`TabularPreprocessor` is fitted on the training normals only and is JSON round-trippable,
so a saved detector applies exactly the same rules to new raw rows. The pieces it is made of
(moments, constant columns, |correlation|, the left-to-right filter) are public because a
Flower deployment fits the same thing from per-node aggregates (``fedgca.flower.owndata``).
Reading files is :mod:`fedgca.data.readers`; the built-in datasets are :mod:`fedgca.data.presets`.
"""
from __future__ import annotations

import numpy as np

from fedgca.lazyimport import LazyModule

from .errors import DataError

pd = LazyModule("pandas")  # imported when rows are encoded (fedgca.lazyimport)


def encode_columns(df: pd.DataFrame, columns: list[str], categories: dict[str, list[str]],
                   fill: dict[str, float] | None = None) -> np.ndarray:
    """Integer category codes for categorical columns (unseen -> len(categories)), floats otherwise.

    ``fill``: the value of an empty (NaN) numeric cell per column (the training normals' mean);
    without it a NaN stays NaN.
    """
    out = np.empty((len(df), len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        if col in categories:
            out[:, j] = category_codes(df[col], categories[col])
        else:
            out[:, j] = pd.to_numeric(df[col], errors="raise").to_numpy(dtype=np.float64)
            if fill is not None and col in fill:
                nan = np.isnan(out[:, j])
                if nan.any():
                    out[nan, j] = fill[col]
    return out


def category_codes(values, cats: list[str]) -> np.ndarray:
    """Integer codes (as float64) of ``values`` over the sorted list ``cats``; unseen -> ``len(cats)``.

    Matched in arrow (``pyarrow.compute.index_in``: exact string equality, as ``Index.get_indexer``) so that
    a million arrow-backed strings are never turned into Python objects.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pyarrow is a dependency; this keeps the rule readable without it
        codes = pd.Index(cats).get_indexer(values.astype(str)).astype(np.float64)
    else:
        found = pc.index_in(pa.array(values.astype(str)), value_set=pa.array(list(cats), type=pa.string()))
        codes = found.to_numpy(zero_copy_only=False).astype(np.float64)  # not found: null -> NaN
        codes[np.isnan(codes)] = -1
    codes[codes < 0] = len(cats)  # SPEC §4: unseen categories get a dedicated code
    return codes


def moments(X: np.ndarray, block: int = 65536) -> tuple[int, np.ndarray, np.ndarray]:
    """(n, column means, centred scatter matrix) of the rows — all the preprocessing fit needs.

    A Flower node shares exactly these (``fedgca.flower.owndata.local_stats``). The scatter matrix
    is summed over blocks of rows, so no centred copy of X is made.
    """
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    m2 = np.zeros((X.shape[1], X.shape[1]))
    for start in range(0, len(X), block):
        Xc = X[start:start + block] - mean
        m2 += Xc.T @ Xc
    return len(X), mean, m2


def column_mean_std(X: np.ndarray, block: int = 65536, columns: list[int] | None = None) \
        -> tuple[np.ndarray, np.ndarray]:
    """``Xk.mean(axis=0)`` and ``Xk.std(axis=0)`` (population) of ``Xk = X[:, columns]`` (default: every
    column), bit for bit, without a full-size temporary or a copy of Xk.

    numpy reduces a C-ordered matrix over axis 0 row after row; carrying the running sum into each
    block's reduction as its first row keeps exactly that order (tested against numpy).
    """
    def column_sum(f):
        acc = None
        for start in range(0, len(X), block):
            rows = X[start:start + block]
            part = f(rows if columns is None else rows[:, columns])
            acc = np.add.reduce(part if acc is None else np.concatenate([acc[None], part]), axis=0)
        return acc

    n = len(X)
    mean = column_sum(lambda b: b) / n
    var = column_sum(lambda b: np.square(b - mean)) / n
    return mean, np.sqrt(var)


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

    0. An empty numeric cell (NaN; only a schema with missing = "impute" lets one through)
       becomes the column's mean over the training normals' non-empty cells (``fill_``), in
       fitting and in every later transform — SimpleImputer(strategy="mean")'s rule.

    ``categories``: fixed category lists per column (a schema's); columns without one fit
    theirs on the training normals. Learned attributes: ``columns_`` (input columns),
    ``categories_``, ``fill_``, ``kept_columns_``, ``dropped_columns_``, ``mean_``, ``std_``.
    """

    def __init__(self, corr_threshold: float = 0.6, categories: dict[str, list[str]] | None = None):
        self.corr_threshold = corr_threshold
        self.categories = categories

    def fit(self, df: pd.DataFrame) -> TabularPreprocessor:
        columns = [str(c) for c in df.columns]
        categories = self.category_lists(df, columns, np.arange(len(df)))
        self._fit_encoded(encode_columns(df, columns, categories), columns, categories)
        return self

    def category_lists(self, df: pd.DataFrame, columns: list[str], rows: np.ndarray) -> dict[str, list[str]]:
        """Each categorical (non-numeric) column's list: the schema's, else the sorted values of ``rows``."""
        fixed = self.categories or {}
        out = {}
        for c in columns:  # (a matrix-backed table's frame holds its categorical columns only)
            if c in df.columns and not pd.api.types.is_numeric_dtype(df[c]):
                out[c] = list(fixed[c]) if c in fixed else sorted(df[c].iloc[rows].astype(str).unique().tolist())
        return out

    def _fit_encoded(self, X: np.ndarray, columns: list[str], categories: dict[str, list[str]]) -> list[int]:
        """Fit on encoded training rows X (float64, NaN where a numeric cell was empty); impute X in place and
        return the kept columns' indices."""
        self.columns_, self.categories_ = columns, categories
        numeric = [j for j, c in enumerate(columns) if c not in categories]
        self.fill_ = {}
        for j in numeric:  # SimpleImputer(strategy="mean"): the mean of the non-empty training cells
            v = X[:, j]
            ok = ~np.isnan(v)
            self.fill_[columns[j]] = float(v[ok].mean()) if ok.any() else 0.0
            if not ok.all():
                v[~ok] = self.fill_[columns[j]]
        n, mean, m2 = moments(X)
        constant = constant_columns(n, mean, m2)
        keep = correlation_filter(abs_correlation(m2, constant), self.corr_threshold)
        self.kept_columns_ = [columns[j] for j in keep]
        self.dropped_columns_ = [c for c in columns if c not in self.kept_columns_]
        self.mean_, std = column_mean_std(X, columns=keep)
        std[constant[keep]] = 1.0
        self.std_ = std
        return keep

    def fit_transform_encoded(self, X: np.ndarray, columns: list[str], categories: dict[str, list[str]],
                              block: int = 65536) -> np.ndarray:
        """fit + transform of encoded training rows: the float32 model inputs. X is consumed (imputed, then
        overwritten by the result, which shares its buffer).

        Bit-identical to ``fit(df).transform(df)`` — the same elementwise arithmetic — with one encoding
        pass, block by block, into X's own memory: no float64 copy of the kept columns and no second
        array of the result's size.
        """
        keep = self._fit_encoded(X, columns, categories)
        n, k = len(X), len(keep)
        if X.flags.c_contiguous and X.flags.writeable:
            # the float32 result written over X's own buffer, row block by row block: output row i ends at byte
            # 4k(i+1) ≤ 8d·i + … , before any input row not yet read (k ≤ d), so X is consumed, not copied
            out = np.frombuffer(X.data, dtype=np.float32, count=n * k).reshape(n, k) if n else \
                np.empty((0, k), dtype=np.float32)
        else:
            out = np.empty((n, k), dtype=np.float32)
        for start in range(0, n, block):
            part = X[start:start + block][:, keep]  # a copy: read before the block's output is written
            out[start:start + block] = self._standardise(part)
        return out

    def transform_encoded(self, X: np.ndarray) -> np.ndarray:
        """Rows encoded over ``columns_`` with ``categories_`` (as at fitting) -> float32 model inputs."""
        idx = [self.columns_.index(c) for c in self.kept_columns_]
        Xk = X[:, idx]
        for j, c in enumerate(self.kept_columns_):
            if c in self.fill_:
                v = Xk[:, j]
                nan = np.isnan(v)
                if nan.any():
                    v[nan] = self.fill_[c]
        return self._checked(self._standardise(Xk))

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        X -= self.mean_  # in place: the same arithmetic as (X - mean) / std, without temporaries
        X /= self.std_
        return X.astype(np.float32)

    @staticmethod
    def _checked(x: np.ndarray) -> np.ndarray:
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise DataError(f"input rows: row {row + 1} has a missing or non-finite value")
        return x

    def transform(self, df: pd.DataFrame) -> np.ndarray:
        """Raw feature frame -> float32 model inputs [len(df), len(kept_columns_)]."""
        missing = [c for c in self.kept_columns_ if c not in df.columns]
        if missing:
            raise DataError(f"input rows lack column(s) {', '.join(map(repr, missing))}")
        cats = {c: v for c, v in self.categories_.items() if c in self.kept_columns_}
        X = encode_columns(df, self.kept_columns_, cats, self.fill_)
        return self._checked(self._standardise(X))

    def fit_transform(self, df: pd.DataFrame) -> np.ndarray:
        return self.fit(df).transform(df)

    def to_dict(self) -> dict:
        """JSON-serialisable state (floats stored as Python floats, exact round trip)."""
        return {
            "type": "tabular",
            "corr_threshold": float(self.corr_threshold),
            "columns": list(self.columns_),
            "categories": {c: list(v) for c, v in self.categories_.items()},
            "fill": {c: float(v) for c, v in self.fill_.items()},
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
        self.fill_ = {c: float(v) for c, v in (d.get("fill") or {}).items()}  # absent in detectors saved before it
        self.kept_columns_ = list(d["kept_columns"])
        self.dropped_columns_ = list(d["dropped_columns"])
        self.mean_ = np.asarray(d["mean"], dtype=np.float64)
        self.std_ = np.asarray(d["std"], dtype=np.float64)
        return self


# --------------------------------------------------------------------------- fitted from aggregates


def local_stats(X: np.ndarray) -> dict[str, np.ndarray]:
    """What one node shares: n_i, column means, centred scatter matrix (float64)."""
    n, mean, m2 = moments(X)
    return {"n": np.array([n], dtype=np.int64), "mean": mean, "m2": m2}


def private_bounds(schema, where: str = "schema"):
    """The public bounds a DP statistics release clips to — or one line saying what the schema lacks (its
    ``range``s, or the correlation filter off: the release has no scatter matrix for it)."""
    if schema.corr_threshold < 1:
        raise DataError(f"{where}: --dp-stats-sigma releases column sums and sums of squares, not the scatter matrix "
                        f"the correlation filter needs: set corr_threshold 1 (off) in the schema, not "
                        f"{schema.corr_threshold}")
    return schema.public_bounds(where)


def released_stats(X: np.ndarray, schema, *, stats_sigma: float | None, seed: int, site: int,
                   where: str = "schema") -> dict[str, np.ndarray]:
    """What site ``site`` releases for the shared encoding: :func:`local_stats`, or with ``stats_sigma`` their DP
    release (``fedgca.protocol.dp.private_column_stats`` over the schema's public bounds, noise drawn with
    (seed, site)). The simulator's per-site fit and a Flower node both call it, so they release the same bytes.

    Rows with an empty or non-finite cell are refused before anything is computed: imputing them would need the
    site's own values, and a non-finite statistic would have the server exclude the site — either way whether a
    site takes part would hang on one record. The message names no count and no column (it may reach the server)."""
    if not np.isfinite(X).all():
        raise DataError(f"{where}: the training rows have empty or non-finite numeric cells, and the shared encoding "
                        "is fitted from per-site statistics, which cannot impute them: fill or drop those rows "
                        "before the run (nothing was released)")
    if stats_sigma is None:
        return local_stats(X)
    from fedgca import seeding
    from fedgca.protocol.dp import private_column_stats

    low, high = private_bounds(schema, where)
    n, mean, m2 = private_column_stats(X, low, high, stats_sigma, seeding.rng(seed, "dp-stats", site))
    return {"n": np.array([n], dtype=np.int64), "mean": mean, "m2": m2}


def pool_stats(stats: list[dict[str, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """Exact pooled (n, mean, scatter) from per-node aggregates (parallel-variance formula)."""
    n = sum(int(s["n"][0]) for s in stats)
    mean = sum(int(s["n"][0]) * s["mean"] for s in stats) / n
    m2 = sum(s["m2"] + int(s["n"][0]) * np.outer(s["mean"] - mean, s["mean"] - mean) for s in stats)
    return n, mean, m2


def fit_from_stats(schema, stats: list[dict[str, np.ndarray]]) -> TabularPreprocessor:
    """SPEC §4 encoding fitted on the union of the nodes' training rows, from aggregates only.

    Same result as ``TabularPreprocessor().fit`` on the pooled rows (up to
    float rounding): the same functions of ``fedgca.data.encoding`` (constant
    columns, |correlation| from the scatter matrix, the left-to-right filter)
    applied to the pooled moments; population std (1 for a constant column).
    """
    n, mean, m2 = pool_stats(stats)
    constant = constant_columns(n, mean, m2)
    keep = correlation_filter(abs_correlation(m2, constant), schema.corr_threshold)
    std = np.sqrt(np.diag(m2)[keep] / n)
    std[constant[keep]] = 1.0
    cols = schema.columns
    return TabularPreprocessor.from_dict({
        "type": "tabular",
        "corr_threshold": schema.corr_threshold,
        "columns": cols,
        "categories": schema.categories,
        "kept_columns": [cols[j] for j in keep],
        "dropped_columns": [c for j, c in enumerate(cols) if j not in keep],
        "mean": [float(v) for v in mean[keep]],
        "std": [float(v) for v in std],
    })
