"""Peers: what a user would otherwise run — PyOD detectors fitted on the union of the clients' training normals of a
run's split (centralized: the data pooled), or on each client's own training rows alone (``per_site``: nothing
shared, the mean over clients of each site's metric, as Single-Client's), scored on the same test rows by
fedgca's metric code.

``pip install 'fedgca[peers]'`` (PyOD). Each peer is one entry of :data:`PEERS`: a label and a factory of a
PyOD detector given the seed. The split is the run's own: the same test set (``DataSource.load(seed)``), and
the training rows of every client after its validation share (``fedgca.data.partition.client_splits``), so
a peer sees exactly the rows the federation trained on, pooled.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

PYOD_AE_EPOCHS = 50  # PyOD's AutoEncoder with fedgca's widths (256-64-16) and SPEC's batch: 50 epochs


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    make: Callable[[int, int], object]  # (seed, training rows) → an unfitted PyOD detector
    what: str  # one line: the configuration, for the report
    per_site: bool = False  # fitted on each client's rows alone, not on the pooled rows


def _pyod_ae(seed: int, rows: int):
    from pyod.models.auto_encoder import AutoEncoder

    # batch: 50, or all rows when fewer (PyOD's loader drops a last partial batch: 43 rows of 50 never train)
    return AutoEncoder(hidden_neuron_list=[256, 64, 16], epoch_num=PYOD_AE_EPOCHS, batch_size=min(50, rows), lr=1e-3,
                       random_state=seed, verbose=0, device="cpu")


def _iforest(seed: int, rows: int):
    from pyod.models.iforest import IForest

    return IForest(random_state=seed)


def _ecod(seed: int, rows: int):
    from pyod.models.ecod import ECOD

    return ECOD()


def _knn(seed: int, rows: int):
    from pyod.models.knn import KNN

    return KNN()  # k = 5, the largest distance: ADBench's strongest classical detector on its one-class protocol


def _lof(seed: int, rows: int):
    from pyod.models.lof import LOF

    return LOF()


PEERS: dict[str, Peer] = {p.name: p for p in (
    Peer("pyod-ae", "PyOD AE", _pyod_ae, f"PyOD AutoEncoder, hidden 256-64-16, {PYOD_AE_EPOCHS} epochs, batch 50 (or all "
                                         "rows when fewer), "
                                         "Adam 1e-3; PyOD's defaults otherwise (batch norm, dropout 0.2, "
                                         "its own standardisation)"),
    Peer("iforest", "IForest", _iforest, "PyOD IForest, 100 trees, PyOD's defaults"),
    Peer("ecod", "ECOD", _ecod, "PyOD ECOD (parameter-free)"),
    Peer("knn", "KNN", _knn, "PyOD KNN, distance to the 5th nearest training normal, PyOD's defaults"),
    Peer("lof", "LOF", _lof, "PyOD LOF, 20 neighbours, PyOD's defaults"),
    Peer("knn-site", "KNN", _knn, "PyOD KNN (PyOD's defaults) fitted on each client's own training rows alone — a "
                                  "site that shares nothing; the mean over clients of each site's metric, as "
                                  "Single-Client's", per_site=True),
)}
# KNN and LOF beside the others: on ADBench's one-class protocol (train on clean normals) KNN is the strongest classical
# detector (issue #47), so a bench's headline compares against the bar a practitioner would pick; and the same KNN at
# each site alone, the bar for a federation that shares nothing (docs/results/adbench/site_knn)
DEFAULT_PEERS = ("pyod-ae", "iforest", "ecod", "knn", "lof", "knn-site")


def require() -> None:
    """One clear line when PyOD is missing, before any run starts."""
    try:
        import pyod  # noqa: F401
    except ImportError:
        raise ValueError("the centralized peers need PyOD: pip install 'fedgca[peers]' (or --peers none)") from None


def check(names) -> list[str]:
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ValueError(f"--peers: unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)} or none")
    return list(names)


def pooled_split(cfg, dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pooled training normals, test rows, test labels) of run config ``cfg`` on its loaded dataset."""
    from fedgca.data.partition import client_splits

    parts, _ = client_splits(cfg, dataset)
    rows = np.sort(np.concatenate(parts))
    return dataset.train[rows], dataset.test_x, dataset.test_y


def site_splits(cfg, dataset) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(each client's training normals, test rows, test labels) of run config ``cfg`` on its loaded dataset."""
    from fedgca.data.partition import client_splits

    parts, _ = client_splits(cfg, dataset)
    return [dataset.train[p] for p in parts], dataset.test_x, dataset.test_y  # each part's rows in order


def split_for(name: str, cfg, dataset) -> tuple:
    """What peer ``name`` is fitted on: the pooled rows, or each site's (its training argument for ``score``)."""
    if PEERS[name].per_site:
        return site_splits(cfg, dataset)
    return pooled_split(cfg, dataset)


def score(name: str, x_train, x_test: np.ndarray, y_test: np.ndarray, seed: int) -> dict:
    """Fit peer ``name`` on ``x_train`` (a per-site peer: a list, one array per client) and score ``x_test``: AUROC
    and AUPRC by fedgca's metric code (a per-site peer: the mean over clients, each client's also listed)."""
    from fedgca.evaluation.metrics import auroc_rows, average_precision_rows

    t0 = time.perf_counter()
    sites = list(x_train) if PEERS[name].per_site else [x_train]
    x_test = np.asarray(x_test, dtype=np.float32)
    rows = []
    for x in sites:
        det = PEERS[name].make(seed, len(x))
        det.fit(np.asarray(x, dtype=np.float32))
        rows.append(np.asarray(det.decision_function(x_test), dtype=np.float64))
    s = np.stack(rows)
    y = np.asarray(y_test).astype(bool)
    if not np.isfinite(s).all():
        raise ValueError(f"{name}: non-finite scores")
    auroc, auprc = auroc_rows(s, y), average_precision_rows(s, y)
    out = {"peer": name, "auroc": float(np.mean(auroc)), "auprc": float(np.mean(auprc)),
           "seconds": round(time.perf_counter() - t0, 3), "n_train": int(sum(len(x) for x in sites)),
           "n_test": int(len(y))}
    if PEERS[name].per_site:
        out["per_site"] = {"auroc": [float(a) for a in auroc], "auprc": [float(a) for a in auprc],
                           "n_train": [int(len(x)) for x in sites]}
    return out


__all__ = ["DEFAULT_PEERS", "PEERS", "Peer", "check", "pooled_split", "require", "score", "site_splits", "split_for"]
