"""Records → the training normals, the test set and the sites: the test split and one encoding pass.

:class:`DataSource` names where records are (a file, a directory of per-site files, or a pandas
DataFrame / NumPy arrays in Python) and the :class:`~fedgca.data.schema.Schema` that says what
they mean. ``source.load(seed)`` reads them (:mod:`fedgca.data.readers`), splits off the test set
by the schema's rule, fits SPEC §4's encoding on the training normals and returns the
:class:`~fedgca.data.dataset.FederatedDataset` every driver trains on. The built-in tabular
datasets are sources too (:mod:`fedgca.data.presets`): there is one path.

Test split (``schema.test_split``):

* ``balanced`` (own data's default): with A anomalies, A normals drawn at random with the run
  seed; test = those + all A anomalies (the paper's balanced test set, without depending on
  file order);
* ``balanced-tail``: SPEC §4's rule, the last A normals in file order;
* ``file``: a given test file (its normal and anomalous rows).

Which rows made the test set is recorded: ``info["test_rows"]`` (0-based row numbers of the
table, files concatenated in name order) is written to a run's ``test_rows.csv``.
"""
from __future__ import annotations

import numpy as np

from fedgca import seeding
from fedgca.lazyimport import LazyModule

from .dataset import FederatedDataset, split_info
from .encoding import TabularPreprocessor, category_codes, encode_columns
from .errors import DataError
from .readers import (
    RawTable,
)
from .schema import Schema

pd = LazyModule("pandas")


def test_split(labels, schema: Schema, seed: int, where: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(training normal rows, test rows, description), both sorted, by the schema's rule."""
    normal = np.flatnonzero(schema.is_normal(labels).to_numpy())
    anomaly = np.flatnonzero(schema.is_anomaly(labels).to_numpy())
    _require_classes(labels, schema, normal, anomaly, where)
    a = len(anomaly)
    if a >= len(normal):
        raise DataError(f"{where}: a balanced test set takes as many normals as there are anomalies ({a}), "
                        f"which leaves no normal row of {len(normal)} to train on; give a test file")
    if schema.test_split == "balanced-tail":
        held = normal[len(normal) - a:]
        rule = "balanced tail (the last A normals in file order + all A anomalies)"
    else:
        held = np.sort(seeding.rng(seed, "test-split").choice(normal, size=a, replace=False))
        rule = f"balanced (A normals drawn with seed {seed} + all A anomalies)"
    train = np.setdiff1d(normal, held, assume_unique=True)
    return train, np.sort(np.concatenate([held, anomaly])), rule


def _encoded(table: RawTable, columns: list[str], categories: dict[str, list[str]]) -> np.ndarray:
    """Every row encoded (float64 [n, d], NaN where a numeric cell was empty). A matrix-backed table's matrix
    is completed in place (its categorical columns' codes) and handed over, not copied."""
    if table.matrix is None:
        return encode_columns(table.features, columns, categories)
    X, table.matrix = table.matrix, None
    for j, c in enumerate(columns):
        if c in categories:
            X[:, j] = category_codes(table.features[c], categories[c])
    return X


def take_rows(X: np.ndarray, rows: np.ndarray, block: int = 65536) -> np.ndarray:
    """``X[rows]`` for sorted distinct ``rows``, moved to the front of X in place: X's first len(rows) rows.

    Row i's source ``rows[i]`` ≥ i, so a forward copy block by block never overwrites a row still to be read.
    """
    rows = np.asarray(rows)
    for start in range(0, len(rows), block):
        part = rows[start:start + block]
        X[start:start + len(part)] = X[part]
    return X[:len(rows)]


def site_split(labels, schema: Schema, seed: int, site: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One site's (training normal rows, test rows) under the per-site rule: all its anomalies and as many of
    its normals, drawn with (seed, the site's client id). The simulator and a Flower node both call it."""
    normal = np.flatnonzero(schema.is_normal(labels).to_numpy())
    anomaly = np.flatnonzero(schema.is_anomaly(labels).to_numpy())
    _require_classes(labels, schema, normal, anomaly, where)
    if len(anomaly) >= len(normal):
        raise DataError(f"{where}: a per-site test set takes as many normals as the site has anomalies "
                        f"({len(anomaly)}), which leaves none of its {len(normal)} normals to train on")
    held = np.sort(seeding.rng(seed, "test-split", site).choice(normal, size=len(anomaly), replace=False))
    return np.setdiff1d(normal, held, assume_unique=True), np.sort(np.concatenate([held, anomaly]))


def _per_site(table: RawTable, seed: int, where: str, drop_below: int | None = None) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """(training rows, test rows, each test row's site code, kept site names, dropped site names) of the
    per-site rule. ``drop_below``: a site whose split fails (no anomaly, too few normals) or leaves fewer training
    normals than this is dropped — rows, test set and all — before its checks stop the run."""
    if table.sites is None:
        raise DataError(f"{where}: the per-site test split needs sites (the schema's \"site\" column, or a "
                        "directory of per-site files)")
    codes, names = pd.factorize(table.sites, sort=True)
    train, test, test_sites, kept, dropped = [], [], [], [], []
    for j, name in enumerate(names):
        rows = np.flatnonzero(codes == j)
        try:  # the site's draw keeps its index among all sites, so a drop never changes another site's split
            tr, te = site_split(table.labels.iloc[rows].reset_index(drop=True), table.schema, seed, j,
                                f"{where}: site {name!r}")
        except DataError:
            if drop_below is None:
                raise
            dropped.append(str(name))
            continue
        if drop_below is not None and len(tr) < drop_below:
            dropped.append(str(name))
            continue
        train.append(rows[tr])
        test.append(rows[te])
        test_sites.append(np.full(len(te), len(kept), dtype=np.int64))
        kept.append(str(name))
    if not kept:
        raise DataError(f"{where}: no site holds a per-site test set and {drop_below} training normals")
    return (np.sort(np.concatenate(train)), np.concatenate(test), np.concatenate(test_sites), kept, dropped)


def _require_classes(labels, schema: Schema, normal, anomaly, where: str, need_anomalies: bool = True) -> None:
    if len(normal) == 0:
        seen = ", ".join(map(repr, sorted(pd.unique(labels))[:8]))
        raise DataError(f"{where}: no normal rows (label {schema.label!r} never equals "
                        f"{', '.join(map(repr, schema.normal))}; values seen: {seen})")
    if need_anomalies and len(anomaly) == 0:
        raise DataError(f"{where}: no anomalies for the test set (no {schema.label!r} value marks an anomaly)")


def prepare(table: RawTable, test: RawTable | None = None, *, seed: int = 100, name: str = "data",
            drop_sites_below: int | None = None, stats_sigma: float | None = None) -> FederatedDataset:
    """Split, fit SPEC §4's encoding on the training normals, encode: the dataset a run trains on.
    ``drop_sites_below``, ``stats_sigma``: see :meth:`DataSource.load` (the per-site split only)."""
    schema = table.schema
    where = ", ".join(table.files) if len(table.files) <= 3 else f"{table.files[0]} and {len(table.files) - 1} more"
    if table.labels is None:
        raise DataError(f"{where}: no label column: fedgca needs labels to split off a test set and evaluate "
                        "(a deployment without labels is `fedgca flower` with own data)")
    pre = TabularPreprocessor(schema.corr_threshold, schema.categories)
    columns = list(schema.columns)
    test_sites, dropped_sites = None, []
    if test is not None:
        y = table.labels
        train_rows = np.flatnonzero(schema.is_normal(y).to_numpy())
        tnormal = np.flatnonzero(schema.is_normal(test.labels).to_numpy())
        tanomaly = np.flatnonzero(schema.is_anomaly(test.labels).to_numpy())
        _require_classes(y, schema, train_rows, [0], where)
        _require_classes(test.labels, schema, tnormal, tanomaly, ", ".join(test.files))
        test_rows = np.sort(np.concatenate([tnormal, tanomaly]))
        y_test = test.labels.iloc[test_rows]
        rule = f"provided {', '.join(test.files)}, all rows"
        files = [*table.files, *test.files]
        categories = pre.category_lists(table.features, columns, train_rows)
        X_train = take_rows(_encoded(table, columns, categories), train_rows)
        X_test = encode_columns(test.features.iloc[test_rows], columns, categories)
    else:
        if schema.test_split == "per-site":
            train_rows, test_rows, test_sites, _, dropped_sites = _per_site(table, seed, where, drop_sites_below)
            order = np.argsort(test_rows, kind="stable")
            test_rows, test_sites = test_rows[order], test_sites[order]
            rule = (f"per site (each site's anomalies and as many of its normals, drawn with seed {seed} and the "
                    "site's client id; each client evaluated on its own site's rows)")
        else:
            train_rows, test_rows, rule = test_split(table.labels, schema, seed, where)
        y_test = table.labels.iloc[test_rows]
        files = list(table.files)
        # encode every row once, then split the matrix (no copy of the raw frame, no second encoding pass)
        categories = pre.category_lists(table.features, columns, train_rows)
        X_all = _encoded(table, columns, categories)
        X_test = X_all[test_rows]
        X_train = take_rows(X_all, train_rows)
        del X_all
    imputed = {c: int(np.isnan(X_train[:, j]).sum()) for j, c in enumerate(columns)
               if c not in categories and np.isnan(X_train[:, j]).any()}
    imputed_test = sum(int(np.isnan(X_test[:, j]).sum()) for j, c in enumerate(columns) if c not in categories)
    if stats_sigma is not None and test_sites is None:
        raise DataError(f"{where}: --dp-stats-sigma releases each site's statistics for the shared encoding, which "
                        "is fitted from per-site statistics under the per-site test split only (--test-split "
                        "per-site with sites); here it is fitted on the pooled training rows")
    if test_sites is not None:  # fitted from per-site aggregates, in site order, as a Flower server fits it
        pre = _fit_from_sites(pre, X_train, table, train_rows, columns, categories, schema, seed, stats_sigma)
        train = pre.transform_encoded(X_train)
    else:
        train = pre.fit_transform_encoded(X_train, columns, categories)
    del X_train
    test_x = pre.transform_encoded(X_test)
    test_y = schema.is_anomaly(y_test).to_numpy().astype(np.int64)
    sites = site_names = None
    if table.sites is not None:
        codes, uniques = pd.factorize(table.sites.iloc[train_rows], sort=True)
        sites, site_names = codes.astype(np.int64), [str(u) for u in uniques]
    info = {
        **split_info(len(train), test_y, files, rule),
        "normal": list(schema.normal),
        "anomaly": list(schema.anomaly) if schema.anomaly is not None else "every other label value",
        "raw_columns": list(schema.columns),
        "dropped_columns": list(pre.dropped_columns_),
        "schema_digest": schema.digest(),
        "test_rows": test_rows.astype(np.int64),
        "test_rows_from": "the test file" if test is not None else "the data",
    }
    if imputed:
        info["imputed_training_cells"] = imputed
    if imputed_test:
        info["imputed_test_cells"] = imputed_test
    if test_sites is not None and dropped_sites:
        info["dropped_sites"] = dropped_sites
    if test_sites is not None:  # what a deployment releases for the encoding (fedgca.privacy reads it)
        info["encoding_fit"] = "per-site statistics" if stats_sigma is None else "per-site statistics, DP release"
        info["stats_sigma"] = stats_sigma
    return FederatedDataset(
        name=name, kind="tabular", train=train, test_x=test_x, test_y=test_y, preprocessor=pre,
        feature_names=list(pre.kept_columns_), info=info, schema=schema, sites=sites, site_names=site_names,
        test_sites=test_sites,
    )


def _fit_from_sites(pre, X_train, table, train_rows, columns, categories, schema, seed, stats_sigma):
    """The encoding fitted from each site's (n, mean, scatter) of its encoded training rows — or their DP release
    under ``stats_sigma`` — pooled in site order: ``fedgca.data.encoding.fit_from_stats``, the function a Flower
    server applies to its nodes'."""
    from .encoding import fit_from_stats, released_stats

    fixed = {c for c in categories if c not in (schema.categories or {})}
    if fixed:
        raise DataError(f"the per-site split fits the encoding from per-site aggregates: categorical feature(s) "
                        f"{', '.join(map(repr, sorted(fixed)))} need their 'categories' list in the schema "
                        "(`fedgca schema infer` writes them)")
    codes, names = pd.factorize(table.sites.iloc[train_rows], sort=True)
    stats = [released_stats(X_train[codes == j], schema, stats_sigma=stats_sigma, seed=seed, site=j,
                            where=f"site {names[j]!r}") for j in range(int(codes.max()) + 1)]
    return fit_from_stats(schema, stats)
