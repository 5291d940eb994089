"""A practitioner's own data on a Flower node: a CSV file plus a shared schema file.

Each SuperNode is started with ``--node-config "data-path=/path/rows.csv
schema-path=/path/schema.json"``. The schema (``fedgca.data.schema``: the one
format every fedgca table uses) is the same file on every node (the server checks
its digest); it names the feature columns in order, their types and, for
categorical columns, the category list (required here), and optionally a label
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

from pathlib import Path

import numpy as np

from fedgca import seeding
from fedgca.data.encoding import encode_columns
from fedgca.data.errors import DataError
from fedgca.data.readers import read_file
from fedgca.data.schema import Schema
from fedgca.lazyimport import LazyModule

pd = LazyModule("pandas")  # imported when a CSV is read (fedgca.lazyimport)

DEFAULT_STATS_MIN_ROWS = 20


def require_category_lists(schema: Schema, where: str = "schema") -> Schema:
    """A federation's nodes share one encoding: every categorical feature must list its categories
    (fitting them would mean sharing each node's category set, which reveals which values it holds)."""
    missing = [f.name for f in schema.features if f.type == "categorical" and not f.categories]
    if missing:
        raise DataError(f"{where}: categorical feature(s) {', '.join(map(repr, missing))} need their 'categories' "
                        "list for a Flower deployment (`fedgca schema infer` writes them)")
    return schema


def load_schema(path) -> Schema:
    """A node's schema file, checked for a federation."""
    return require_category_lists(Schema.load(path), str(path))


def read_rows(path, schema: Schema) -> tuple[pd.DataFrame, np.ndarray | None]:
    """A node's file (any format fedgca reads): its feature columns and, with a label, 1 = anomaly / 0 = normal."""
    table = read_table(path, schema)
    y = None if table.labels is None else schema.is_anomaly(table.labels).to_numpy().astype(np.int64)
    return table.features, y


def read_table(path, schema: Schema):
    """A node's file as a RawTable (features, label strings or None)."""
    return read_file(Path(path), schema, require_label=False)


def encode(X: pd.DataFrame, schema: Schema) -> np.ndarray:
    """Category codes from the schema (unseen → dedicated code), numbers as they are: float64 [n, d]."""
    return encode_columns(X, schema.columns, schema.categories)


def eval_split(n: int, fraction: float, seed: int, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out evaluation rows) of a labelled node's file."""
    n_eval = int(np.floor(fraction * n))
    perm = seeding.rng(seed, "eval-split", client_id).permutation(n)
    return np.sort(perm[n_eval:]), np.sort(perm[:n_eval])


# ---------------------------------------------------------------------------- federated fitting
