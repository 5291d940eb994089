"""What a Flower node trains and evaluates on, from its node config.

Two sources:

* built-in datasets: ``partition-id`` and ``num-partitions`` (and optionally
  ``data-dir``; default ``$FEDGCA_DATA_DIR`` or the user cache). The node
  loads the dataset and takes partition ``partition-id`` of exactly the
  partition the simulator uses (``fedgca.data.partition``), so client
  i of a Flower run and client i of a simulator run hold the same rows.
* a practitioner's own CSV: ``data-path`` and ``schema-path`` (see
  :mod:`fedgca.flower.owndata`).

``client-id`` (optional) overrides the client's global id, which keys every
random draw (``fedgca.seeding``); it defaults to ``partition-id``. ``site-index``
(optional, own data under the per-site test split) is the site's place among
all the federation's site files, which keys its test-set draw as in the
simulator; it defaults to the client id (the same when no site was dropped).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from threading import RLock

import numpy as np

from fedgca.config import RunConfig
from fedgca.flower.owndata import Schema, encode, eval_split, load_schema, read_table

_CACHE: dict = {}
_LOCK = RLock()  # re-entrant: a partition's build loads the dataset through the same cache


@dataclass
class NodeData:
    client_id: int
    source: str  # "builtin" | "csv"
    train: np.ndarray  # float32 model inputs [N_i, *shape]
    val: np.ndarray | None = None
    test_x: np.ndarray | None = None
    test_y: np.ndarray | None = None
    kind: str = "tabular"
    num_partitions: int = 0
    schema_digest: str = ""

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.shape[1:])


class NodeConfigError(ValueError):
    pass


def source_of(node_config: dict) -> str:
    if node_config.get("data-path"):
        return "csv"
    if "partition-id" in node_config:
        return "builtin"
    raise NodeConfigError("node config needs either 'partition-id' and 'num-partitions' (built-in dataset) "
                          "or 'data-path' and 'schema-path' (own CSV)")


def client_id_of(node_config: dict, node_id: int) -> int:
    if "client-id" in node_config:
        return int(node_config["client-id"])
    if "partition-id" in node_config:
        return int(node_config["partition-id"])
    return int(node_id) % (2**31)


def _cached(key, build):
    with _LOCK:
        if key not in _CACHE:
            if len(_CACHE) > 8:
                _CACHE.clear()
            _CACHE[key] = build()
        return _CACHE[key]


def builtin_data(cfg: RunConfig, node_config: dict, client_id: int) -> NodeData:
    """Partition ``partition-id`` of ``num-partitions`` of a built-in dataset, as the simulator splits it."""
    from fedgca.data.partition import client_splits

    pid, n_parts = int(node_config["partition-id"]), int(node_config.get("num-partitions", 0))
    if n_parts != cfg.clients:
        raise NodeConfigError(f"node has num-partitions={n_parts} but the run has clients={cfg.clients}; "
                              "a node's partition must be the simulator's (same C, dataset and seed)")
    if not 0 <= pid < n_parts:
        raise NodeConfigError(f"partition-id {pid} is not in [0, {n_parts})")
    data_dir = node_config.get("data-dir") or None
    key = ("builtin", cfg.dataset, data_dir, cfg.seed, cfg.partition, cfg.clients, cfg.alpha, cfg.batch_size,
           cfg.val_fraction)

    def build():
        ds = _dataset(cfg, data_dir)
        parts, val = client_splits(cfg, ds)
        return ds, parts, val

    def arrays():
        ds, parts, val = _cached(key, build)
        return {"train": ds.train[parts[pid]], "val": ds.train[val[pid]], "test_x": ds.test_x, "test_y": ds.test_y,
                "kind": np.array(ds.kind)}

    a = _disk_cached(node_config, (*key, pid), arrays)
    return NodeData(
        client_id=client_id, source="builtin", train=a["train"], val=a["val"] if len(a["val"]) else None,
        test_x=a["test_x"], test_y=a["test_y"], kind=str(a["kind"]), num_partitions=n_parts,
    )


def _dataset(cfg: RunConfig, data_dir):
    """The built-in dataset, loaded once per process."""
    from fedgca.data import load_dataset

    return _cached(("dataset", cfg.dataset, data_dir, cfg.seed),
                   lambda: load_dataset(cfg.dataset, data_dir, seed=cfg.seed))


def builtin_encoding(cfg: RunConfig, node_config: dict):
    """(preprocessor, schema) of a built-in dataset: what the node's saved detector reads raw records with."""
    ds = _dataset(cfg, node_config.get("data-dir") or None)
    return ds.preprocessor, ds.schema


def _disk_cached(node_config: dict, key: tuple, build) -> dict[str, np.ndarray]:
    """A deployed ClientApp is a fresh process per message: keep this node's prepared arrays on its disk.

    ``cache-dir`` (node config; default: fedgca's user cache + ``/flower-nodes``) holds one .npz per
    (dataset, data files, seed, partition); ``cache-dir=""`` turns it off. Files are keyed by the
    dataset files' sizes and modification times, so replacing a data file invalidates them.
    """
    import hashlib
    import os

    from fedgca.data.download import default_cache_dir, resolve_data_dir

    root = node_config.get("cache-dir", str(default_cache_dir() / "flower-nodes"))
    if not root:
        return build()
    ds_dir = resolve_data_dir(key[2]) / key[1]
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in ds_dir.rglob("*") if p.is_file()) \
        if ds_dir.is_dir() else []
    digest = hashlib.sha256(repr((key, str(ds_dir.resolve()), files)).encode()).hexdigest()[:24]
    path = Path(root) / f"{key[1]}-{digest}.npz"
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, KeyError):
        pass
    out = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **out)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only node still works, just without the cache
    return out


def csv_frame(node_config: dict):
    """(schema, the node's RawTable) of an own-data node, cached per file."""
    path, schema_path = node_config.get("data-path"), node_config.get("schema-path")
    if not schema_path:
        raise NodeConfigError("an own-data node needs 'schema-path' (the shared schema file) besides 'data-path'")
    key = ("csv", str(path), str(schema_path))

    def build():
        schema = load_schema(schema_path)
        return schema, read_table(path, schema)

    return _cached(key, build)


def csv_split(cfg: RunConfig, node_config: dict, client_id: int):
    """(schema, training frame, eval frame or None, eval labels or None).

    A schema with the per-site test split: the node's anomalies and as many of its normals (drawn with the
    seed and its client id, ``fedgca.data.prepare.site_split``, as the simulator draws them) are its test rows,
    and it trains on its other normals. Otherwise a labelled node holds out ``eval_fraction`` of its rows and
    trains on the rest as they come."""
    schema, table = csv_frame(node_config)
    X, labels = table.features, table.labels
    if labels is None:
        return schema, X, None, None
    if schema.test_split == "per-site":
        from fedgca.data.prepare import site_split

        site = int(node_config.get("site-index", client_id))  # the site's place among all files (own_data_nodes)
        tr, ev = site_split(labels, schema, cfg.seed, site, f"node {client_id}")
    else:
        tr, ev = eval_split(len(X), schema.eval_fraction, cfg.seed, client_id)
    y = schema.is_anomaly(labels).to_numpy().astype(np.int64)
    return schema, X.iloc[tr].reset_index(drop=True), X.iloc[ev].reset_index(drop=True), y[ev]


def csv_encoded_training_rows(cfg: RunConfig, node_config: dict, client_id: int) -> tuple[Schema, np.ndarray]:
    schema, train, _, _ = csv_split(cfg, node_config, client_id)
    return schema, encode(train, schema)


def csv_data(cfg: RunConfig, node_config: dict, client_id: int, preprocessor) -> NodeData:
    """Own rows through the federatedly fitted preprocessor (validation split as the simulator's)."""
    from fedgca.data.partition import split_validation

    schema, train, ev, ev_y = csv_split(cfg, node_config, client_id)
    x = preprocessor.transform(train)
    # the simulator's validation rule, applied to this node's rows as to client client_id's shard
    _, vals = split_validation([np.arange(len(x))] * (client_id + 1), cfg.val_fraction, cfg.seed)
    rows, val = np.setdiff1d(np.arange(len(x)), vals[client_id]), vals[client_id]
    return NodeData(
        client_id=client_id, source="csv", train=x[rows], val=x[val] if len(val) else None,
        test_x=preprocessor.transform(ev) if ev is not None else None, test_y=ev_y,
        kind="tabular", schema_digest=schema.digest(),
    )
