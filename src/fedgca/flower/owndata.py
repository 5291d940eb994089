"""A practitioner's own data on a Flower node: a CSV file plus a shared schema file.

Each SuperNode is started with ``--node-config "data-path=/path/rows.csv
schema-path=/path/schema.json"``. The schema is the same file on every node
(the server checks its digest); it names the feature columns in order, their
types and, for categorical columns, the category list, and optionally a label
column that is used **only for evaluation**::

    {
      "features": [
        {"name": "fLength", "type": "numeric"},
        {"name": "colour", "type": "categorical", "categories": ["blue", "red"]}
      ],
      "label": {"column": "class", "normal": ["g"], "anomaly": ["h"]},
      "csv": {"sep": ",", "header": true},
      "eval_fraction": 0.3,
      "corr_threshold": 0.6
    }

With a label column, each node holds out ``eval_fraction`` of its rows (drawn
with the run seed and its client id) as its local test set and trains on the
rest — the labels of training rows are never read, so training sees the rows
as they come (in a deployment, known anomalies should be removed from the CSV
beforehand). Without a label column every row trains and evaluation reports
only the reconstruction error and threshold.

Preprocessing without pooling records (SPEC §4's encoding, fitted
federatedly). Category codes come from the schema's category lists (sorted;
a value not in the list gets the dedicated unseen code), so nothing about
categories is exchanged. Each node then sends the server, once per run,
three aggregates of its *encoded training rows*: the row count n_i, the
column means (d numbers) and the centred scatter matrix Σ(x−x̄_i)(x−x̄_i)ᵀ
(d×d). The server pools them exactly (Chan et al.'s parallel formula) into
the pooled mean and covariance, runs the same left-to-right correlation
filter, standardises with the pooled mean and population std, and sends the
fitted preprocessor (kept columns, means, stds — no per-node values) back.
No raw record leaves a node; a node refuses to share statistics of fewer
than ``stats-min-rows`` rows (node config, default 20).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedgca import seeding
from fedgca.data.paths import DataError
from fedgca.data.tabular import (
    TabularPreprocessor,
    abs_correlation,
    constant_columns,
    correlation_filter,
    encode_columns,
    moments,
)
from fedgca.lazyimport import LazyModule

pd = LazyModule("pandas")  # imported when a CSV is read (fedgca.lazyimport)

DEFAULT_STATS_MIN_ROWS = 20


@dataclass(frozen=True)
class Feature:
    name: str
    type: str  # "numeric" | "categorical"
    categories: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schema:
    features: tuple[Feature, ...]
    label: str | None = None
    normal: tuple[str, ...] = ()
    anomaly: tuple[str, ...] = ()
    sep: str = ","
    header: bool = True
    eval_fraction: float = 0.3
    corr_threshold: float = 0.6
    raw: dict = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def load(cls, path) -> "Schema":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataError(f"{path}: schema file not found") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(d, where=str(path))

    @classmethod
    def from_dict(cls, d: dict, where: str = "schema") -> "Schema":
        feats = []
        for i, f in enumerate(d.get("features") or []):
            if isinstance(f, str):
                f = {"name": f, "type": "numeric"}
            kind = f.get("type", "numeric")
            if kind not in ("numeric", "categorical"):
                raise DataError(f"{where}: feature {f.get('name')!r}: type must be 'numeric' or 'categorical'")
            cats = tuple(sorted(str(c) for c in f.get("categories", [])))
            if kind == "categorical" and not cats:
                raise DataError(f"{where}: categorical feature {f.get('name')!r} needs its 'categories' list "
                                "(sharing each node's category set would reveal which values it holds)")
            feats.append(Feature(str(f["name"]), kind, cats))
        if not feats:
            raise DataError(f"{where}: 'features' must list at least one column")
        if len({f.name for f in feats}) != len(feats):
            raise DataError(f"{where}: duplicate feature names")
        label = d.get("label") or {}
        csv = d.get("csv") or {}
        schema = cls(
            features=tuple(feats),
            label=label.get("column"),
            normal=tuple(str(v) for v in label.get("normal", [])),
            anomaly=tuple(str(v) for v in label.get("anomaly", [])),
            sep=str(csv.get("sep", ",")),
            header=bool(csv.get("header", True)),
            eval_fraction=float(d.get("eval_fraction", 0.3)),
            corr_threshold=float(d.get("corr_threshold", 0.6)),
            raw=d,
        )
        if schema.label is not None and not schema.anomaly:
            raise DataError(f"{where}: label {schema.label!r} needs an 'anomaly' list of label values")
        if schema.label is not None and not 0 < schema.eval_fraction < 1:
            raise DataError(f"{where}: eval_fraction must be in (0, 1)")
        return schema

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def categories(self) -> dict[str, list[str]]:
        return {f.name: list(f.categories) for f in self.features if f.type == "categorical"}

    def digest(self) -> str:
        """Same schema on every node ⇔ same digest (the server checks)."""
        canon = {"features": [(f.name, f.type, list(f.categories)) for f in self.features],
                 "label": [self.label, list(self.normal), list(self.anomaly)], "sep": self.sep,
                 "header": self.header, "eval_fraction": self.eval_fraction, "corr": self.corr_threshold}
        return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:16]


def read_rows(path, schema: Schema) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The CSV's feature columns (typed) and, if the schema has a label, 1 = anomaly / 0 = normal."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    names = None if schema.header else schema.columns + ([schema.label] if schema.label else [])
    text_cols = {f.name: str for f in schema.features if f.type == "categorical"}
    if schema.label:
        text_cols[schema.label] = str
    try:
        df = pd.read_csv(path, sep=schema.sep, header=0 if schema.header else None, names=names, dtype=text_cols,
                         keep_default_na=False, na_values=[""], index_col=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read as CSV ({' '.join(str(e).split())})") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in schema.columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(map(repr, missing))}")
    if len(df) == 0:
        raise DataError(f"{path}: no data rows")
    X = df[schema.columns].copy()
    for f in schema.features:
        if f.type == "numeric":
            values = pd.to_numeric(X[f.name], errors="coerce")
            bad = np.flatnonzero(~np.isfinite(values.to_numpy(dtype=np.float64)))
            if bad.size:
                raise DataError(f"{path}: line {bad[0] + 1 + int(schema.header)}: column {f.name!r}: "
                                f"missing or non-numeric value {X[f.name].iloc[bad[0]]!r}")
            X[f.name] = values.astype(np.float64)
        else:
            if X[f.name].isna().any():
                row = int(np.flatnonzero(X[f.name].isna().to_numpy())[0])
                raise DataError(f"{path}: line {row + 1 + int(schema.header)}: column {f.name!r}: missing value")
            X[f.name] = X[f.name].astype(str).str.strip().astype(object)
    y = None
    if schema.label:
        if schema.label not in df.columns:
            raise DataError(f"{path}: schema names label column {schema.label!r}, which the file lacks")
        lab = df[schema.label].astype(str).str.strip()
        known = set(schema.anomaly) | set(schema.normal)
        if schema.normal:
            unknown = ~lab.isin(known)
            if unknown.any():
                row = int(np.flatnonzero(unknown.to_numpy())[0])
                raise DataError(f"{path}: line {row + 1 + int(schema.header)}: label value {lab.iloc[row]!r} is "
                                f"neither normal ({', '.join(schema.normal)}) nor anomaly ({', '.join(schema.anomaly)})")
        y = lab.isin(schema.anomaly).to_numpy().astype(np.int64)
    return X.reset_index(drop=True), y


def encode(X: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Category codes from the schema (unseen → dedicated code), numbers as they are: float64 [n, d]."""
    return encode_columns(X, schema.columns, schema.categories)


def eval_split(n: int, fraction: float, seed: int, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out evaluation rows) of a labelled node's file."""
    n_eval = int(np.floor(fraction * n))
    perm = seeding.rng(seed, "eval-split", client_id).permutation(n)
    return np.sort(perm[n_eval:]), np.sort(perm[:n_eval])


# ---------------------------------------------------------------------------- federated fitting


def local_stats(X: np.ndarray) -> dict[str, np.ndarray]:
    """What one node shares: n_i, column means, centred scatter matrix (float64)."""
    n, mean, m2 = moments(X)
    return {"n": np.array([n], dtype=np.int64), "mean": mean, "m2": m2}


def pool_stats(stats: list[dict[str, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """Exact pooled (n, mean, scatter) from per-node aggregates (parallel-variance formula)."""
    n = sum(int(s["n"][0]) for s in stats)
    mean = sum(int(s["n"][0]) * s["mean"] for s in stats) / n
    m2 = sum(s["m2"] + int(s["n"][0]) * np.outer(s["mean"] - mean, s["mean"] - mean) for s in stats)
    return n, mean, m2


def fit_from_stats(schema: Schema, stats: list[dict[str, np.ndarray]]) -> TabularPreprocessor:
    """SPEC §4 encoding fitted on the union of the nodes' training rows, from aggregates only.

    Same result as ``TabularPreprocessor().fit`` on the pooled rows (up to
    float rounding): the same functions of ``fedgca.data.tabular`` (constant
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
