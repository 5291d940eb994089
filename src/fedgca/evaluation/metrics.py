"""Scores, per-client thresholds and detection metrics (SPEC §5), for all clients in one pass."""
from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor

from fedgca.protocol.losses import reconstruction_per_row
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import StackedModels

CHUNK_ROWS = 4096


@torch.no_grad()
def shared_scores(clients: StackedModels, x: Tensor) -> Tensor:
    """s(x) = ||x − T_i(x)||² of every client's model on the same rows: [C, M]."""
    n_feature_dims = x.dim() - 1
    out = []
    for start in range(0, len(x), CHUNK_ROWS):
        chunk = x[start : start + CHUNK_ROWS].unsqueeze(0).expand(clients.num_clients, *x[start : start + CHUNK_ROWS].shape)
        out.append(reconstruction_per_row(chunk, clients.reconstruct(chunk), n_feature_dims))
    return torch.cat(out, dim=1)


@torch.no_grad()
def shard_scores(clients: StackedModels, shards: ClientShards) -> list[np.ndarray]:
    """Each client's scores on its own rows (padding dropped)."""
    n_feature_dims = shards.x.dim() - 2
    out = []
    for start in range(0, shards.x.shape[1], CHUNK_ROWS):
        chunk = shards.x[:, start : start + CHUNK_ROWS]
        out.append(reconstruction_per_row(chunk, clients.reconstruct(chunk), n_feature_dims))
    scores = torch.cat(out, dim=1).numpy()
    return [scores[c, :n] for c, n in enumerate(shards.sizes)]


def quantile_thresholds(train_scores: list[np.ndarray], q: float = 0.75) -> np.ndarray:
    """τ_i = the q-quantile of client i's training scores (numpy's linear interpolation)."""
    return np.array([np.quantile(s, q) for s in train_scores])


def detection_metrics(test_scores: np.ndarray, test_y: np.ndarray, thresholds: np.ndarray) -> dict:
    """Accuracy at each client's threshold, AUROC and AUPRC (anomaly = positive), mean over clients."""
    per_client = {
        "accuracy": [float(((s > t).astype(np.int64) == test_y).mean()) for s, t in zip(test_scores, thresholds)],
        "auroc": [_safe(roc_auc_score, test_y, s) for s in test_scores],
        "auprc": [_safe(average_precision_score, test_y, s) for s in test_scores],
    }
    summary = {k: float(np.mean(v)) for k, v in per_client.items()}
    summary["per_client"] = per_client
    return summary


def _safe(metric, y, s) -> float:
    """NaN scores (a diverged client) count as chance level rather than crashing the run."""
    if not np.isfinite(s).all():
        return float("nan")
    return float(metric(y, s))


def evaluate_clients(
    clients: StackedModels, shards: ClientShards, test_x: Tensor, test_y: np.ndarray, q: float
) -> dict:
    """Thresholds on each client's own training rows, then metrics on the shared test set."""
    train = shard_scores(clients, shards)
    thresholds = quantile_thresholds(train, q)
    result = detection_metrics(shared_scores(clients, test_x).numpy(), test_y, thresholds)
    result["train_error"] = float(np.mean([s.mean() for s in train]))
    result["thresholds"] = thresholds.tolist()
    return result
