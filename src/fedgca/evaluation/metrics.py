"""Scores, per-client thresholds and detection metrics (SPEC §5), for all clients in one pass."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedgca.devices import has_float64, to_numpy
from fedgca.evaluation.threshold import quantile_thresholds
from fedgca.protocol.losses import reconstruction_per_row
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import StackedModels, stacked_reconstruction

# Rows per scoring pass of one model (every pass scores one client's model; scores do not depend on it).
TABULAR_PASS_ROWS = 512  # the MLP's [256, rows] activations stay in L2 (512 KiB); 256-4,096 measured, 512 fastest
IMAGE_PASS_ROWS = 256  # the conv AE: 256 images per pass ran 25-45 % faster than 1,024 or 4,096
# The device engine scores every client at once; its widest activations [C, width, rows] stay under this
DEVICE_PASS_BYTES = 1 << 30
# ... and computes their detection metrics where they are, in blocks of clients whose temporaries stay under this
METRICS_PASS_BYTES = 1 << 30
_METRICS_BYTES_PER_SCORE = 96  # detection_metrics_rows' live temporaries per score: a dozen 8-byte ones


def chunk_rows(row_shape) -> int:
    """Rows per scoring pass of one model, by input shape (vectors: the MLP; images: the conv AE).

    One model at a time beat the stacked batched matmuls of every client on the same block of rows, with
    identical scores (benchmarks/bench_scoring.py, idle, 1 thread: adult's 20 clients × 16,281 test rows
    1.39× faster, 42 GFLOP/s; magic's 10 × 13,376 1.17×, 44 GFLOP/s).
    """
    return TABULAR_PASS_ROWS if len(tuple(row_shape)) == 1 else IMAGE_PASS_ROWS


def _scores(clients: StackedModels, i: int, x: Tensor) -> Tensor:
    """s(x) = ||x − T_i(x)||² of client i's model on rows x, pass by pass."""
    n_feature_dims = x.dim() - 1
    step = chunk_rows(x.shape[1:])
    out = torch.empty(len(x), dtype=x.dtype, device=x.device)
    for start in range(0, len(x), step):
        part = x[start : start + step]
        out[start : start + step] = reconstruction_per_row(part, clients.reconstruct_client(i, part), n_feature_dims)
    return out


def _all_at_once(clients: StackedModels) -> bool:
    """Score every client in one pass per block of rows: the device engine (``training.stacked.device_engine``),
    for an MLP. The operations per evaluation then do not grow with the clients on the axis; the conv AE
    still goes client by client."""
    return clients.device_engine and clients.hand_backward


def _stacked_scores(clients: StackedModels, x: Tensor, then: "RowMetrics | None" = None) -> Tensor:
    """s(x) of every client's model at once: x [M, d] (the same rows for every client) or [C, M, d] (each
    client's own) → [C, M], or what ``then`` computes from them before they are read back. Under the batched
    engine's broker, with the other runs' scorings (one pass, one read back: the result comes back on the host);
    else ``_scores_at_once``."""
    if clients.broker is not None:
        return clients.broker.scores(clients, x, _scores_at_once, then)
    scores = _scores_at_once(clients, x)
    return scores if then is None else then(scores)


@dataclass(frozen=True)
class RowMetrics:
    """The device engine's test metrics, computed where the scores are, before the one read back: each
    client's accuracy, AUROC and AUPRC (``detection_metrics_rows``) — n clients' thresholds on a scoring of n
    models, or of one model that every client deploys (its scores then serve every τ)."""

    y: Tensor  # [M] bool: the test rows' labels
    thresholds: Tensor  # [n] float64: each client's τ

    def __call__(self, scores: Tensor) -> Tensor:
        return RowMetrics.of_many([self], [scores])[0]

    @staticmethod
    def of_many(requests: list["RowMetrics"], scores: list[Tensor]) -> list[Tensor]:
        """Many scorings' metrics as one computation, each [n_i, 3] on the host (one read back); every scoring
        has the same number of rows (the broker groups them so)."""
        rows = [s.expand(len(r.thresholds), -1) for r, s in zip(requests, scores)]
        x, y = torch.cat(rows), torch.cat([r.y.expand_as(s) for r, s in zip(requests, rows)])
        thresholds = torch.cat([r.thresholds for r in requests])
        step = max(1, METRICS_PASS_BYTES // (_METRICS_BYTES_PER_SCORE * x.shape[1]))  # rows are independent
        out = torch.cat([detection_metrics_rows(x[i : i + step], y[i : i + step], thresholds[i : i + step])
                         for i in range(0, len(x), step)])
        return list(out.cpu().split([len(r.thresholds) for r in requests]))


def _scores_at_once(clients: StackedModels, x: Tensor) -> Tensor:
    """``_stacked_scores`` computed here, in blocks of rows sized to ``DEVICE_PASS_BYTES``. Each block is read in
    one layout, rows contiguous (a loaded test set may come column-major): a matrix product's rounding depends on
    the layout of its operands, and the broker's padded block of many runs' rows is row-major."""
    n = x.shape[-2]
    width = max(max(v.shape[1] for k, v in clients.params.items() if k.endswith(".weight")), x.shape[-1])
    step = max(TABULAR_PASS_ROWS, DEVICE_PASS_BYTES // (4 * width * clients.num_clients))
    out = torch.empty(clients.num_clients, n, dtype=x.dtype, device=x.device)
    for start in range(0, n, step):
        part = x[..., start : start + step, :].contiguous()
        rows = part.unsqueeze(0) if part.dim() == 2 else part
        rec = stacked_reconstruction(clients, rows.expand(clients.num_clients, -1, -1))
        out[:, start : start + step] = reconstruction_per_row(rows, rec)
    return out


@torch.no_grad()
def shared_scores(clients: StackedModels, x: Tensor) -> Tensor:
    """s(x) = ||x − T_i(x)||² of every client's model on the same rows: [C, M]."""
    if _all_at_once(clients):
        return _stacked_scores(clients, x)
    return torch.stack([_scores(clients, i, x) for i in range(clients.num_clients)])


@torch.no_grad()
def shard_scores(clients: StackedModels, shards: ClientShards) -> list[np.ndarray]:
    """Each client's scores on its own rows (no padding is scored)."""
    if _all_at_once(clients):  # the padded rows are scored too, and dropped: one read back for all clients
        scores = to_numpy(_stacked_scores(clients, shards.x))
        return [scores[i, :n].copy() for i, n in enumerate(shards.sizes)]
    return [to_numpy(_scores(clients, i, shards.client(i))) for i in range(shards.num_clients)]


def mean_error(per_client_means) -> float:
    """The metrics row's train/val error: the mean over clients of each client's mean score, in float32.

    (Scores are float32; both drivers average the per-client means this one way.)
    """
    return float(np.mean(np.asarray(per_client_means, dtype=np.float32)))


def detection_metrics(test_scores: np.ndarray, test_y: np.ndarray, thresholds: np.ndarray) -> dict:
    """Accuracy at each client's threshold, AUROC and AUPRC (anomaly = positive), mean over clients.

    ``test_scores`` is [C, M], or [1, M] when every client deploys the same model (only τ_i differ).
    """
    scores = np.asarray(test_scores, dtype=np.float64)
    thresholds = np.asarray(thresholds)
    y = np.asarray(test_y).astype(bool)
    finite = np.isfinite(scores).all(axis=1)  # a diverged client gets NaN, not a crash
    safe = np.where(finite[:, None], scores, 0.0)
    n = len(thresholds)
    order = np.argsort(safe, axis=1)  # one unstable sort serves both ranking metrics (see _descending)
    return _summarised({
        "accuracy": ((scores > thresholds[:, None]) == y).mean(axis=1),
        "auroc": np.broadcast_to(np.where(finite, auroc_rows(safe, y, order), np.nan), (n,)),
        "auprc": np.broadcast_to(np.where(finite, average_precision_rows(safe, y, order), np.nan), (n,)),
    })


def _summarised(per_client: dict[str, np.ndarray]) -> dict:
    """``detection_metrics``' result: the mean over clients of each metric, and the clients' own."""
    summary = {k: float(np.mean(v)) for k, v in per_client.items()}
    summary["per_client"] = {k: v.tolist() for k, v in per_client.items()}
    return summary


_ROW_METRICS = ("accuracy", "auroc", "auprc")  # detection_metrics_rows' columns


def detection_metrics_rows(scores: Tensor, y: Tensor, thresholds: Tensor) -> Tensor:
    """``detection_metrics`` where the scores are (the device engine's evaluation), one row per client:
    scores [C, M], labels y [C, M] (bool), thresholds [C] → [C, 3] float64: accuracy, AUROC, AUPRC.

    Fixed shapes and no read back, so the metrics of many runs' clients are one computation (the batched
    engine's broker) and each row's figures do not depend on the others. One sort per row. Accuracy (a count)
    and AUROC (a sum of mid-ranks, half-integers: exact in any order) equal ``detection_metrics``' bit for
    bit; AUPRC sums the same terms in another order, so equals it to float64 rounding (tests/test_metrics.py).
    """
    s = scores.to(torch.float64)
    m = s.shape[1]
    finite = torch.isfinite(s).all(1)
    srt, order = torch.sort(torch.where(finite[:, None], s, 0.0), dim=1)
    pos = torch.gather(y, 1, order).to(torch.float64)
    idx = torch.arange(m, device=s.device).expand_as(srt)
    first = torch.ones_like(srt, dtype=torch.bool)  # the element opens a tie group
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    last = torch.ones_like(first)  # ... closes one
    last[:, :-1] = first[:, 1:]
    start = torch.where(first, idx, 0).cummax(1).values  # its group's first index
    end = torch.where(last, idx + 1, m).flip(1).cummin(1).values.flip(1)  # one past its group's last
    n_pos = pos.sum(1)
    rank_sum = ((start + end + 1).to(torch.float64) / 2 * pos).sum(1)  # mid-ranks, as _mid_ranks
    auroc = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * (m - n_pos))
    # a positive is credited with the precision at its group's threshold: the positives scoring at least as
    # high over the rows that do (average_precision_rows' group_precision, the same integer ratio)
    tp = n_pos[:, None] - torch.gather(torch.cumsum(pos, 1) - pos, 1, start)
    auprc = (tp / (m - start) * pos).sum(1) / n_pos.clamp(min=1)
    accuracy = ((s > thresholds[:, None]) == y).sum(1).to(torch.float64) / m
    nan = torch.full_like(auroc, float("nan"))
    return torch.stack([accuracy, torch.where(finite, auroc, nan), torch.where(finite, auprc, nan)], 1)


def auroc_rows(scores: np.ndarray, y: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """ROC AUC of every row of ``scores`` [C, M] against one label vector, ties at mid-rank.

    The Mann–Whitney form, vectorised over clients; equals sklearn's ``roc_auc_score`` (tested).
    ``order``: each row's ascending argsort, if the caller has it (any sort: tied scores share a rank).
    """
    if order is None:
        order = np.argsort(scores, axis=1)
    ranks = np.stack([_mid_ranks(row, o) for row, o in zip(scores, order)])
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    return (ranks[:, y].sum(axis=1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _mid_ranks(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values`` sorted by ``order``, ties at their average rank (scipy's
    ``rankdata(method="average")``, without importing scipy.stats: 1.6 s of a Flower client's start-up).

    Every member of a tie group gets the group's mid-rank, so the order within a group is irrelevant and an
    unstable sort (4× faster than a stable one on 13,376 scores) gives the same ranks bit for bit."""
    s = values[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # first index of each tie group
    ends = np.r_[starts[1:], len(s)]  # one past its last
    mid = (starts + ends + 1) / 2.0  # average of ranks start+1 … end
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(mid, ends - starts)
    return ranks


def _descending(scores: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``np.argsort(-scores, axis=1, kind="stable")`` from each row's ascending ``order`` (any sort).

    Reversed, ``order`` is a descending order; only its tie groups can be out of the stable order (rows
    ascending within a group), and only those positions are sorted again: float32 scores of 13,376 rows tie
    a few times, so this costs a fraction of a second stable sort. The tied positives' order matters: AP
    sums them, and a different order changes its last bit."""
    desc = order[:, ::-1].copy()
    s = np.take_along_axis(scores, desc, axis=1)
    same = s[:, 1:] == s[:, :-1]  # position i ties with i + 1
    for r in np.flatnonzero(same.any(axis=1)):
        in_group = np.flatnonzero(np.r_[False, same[r]] | np.r_[same[r], False])
        group = np.cumsum(np.r_[True, ~same[r]])[in_group]
        desc[r, in_group] = desc[r, in_group][np.lexsort((desc[r, in_group], group))]
    return desc


def average_precision_rows(scores: np.ndarray, y: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """sklearn's average precision, AP = Σ_thresholds (R_n − R_{n−1}) P_n, for every row.

    Scores sorted descending; tied scores form one threshold, so every
    positive is credited with the precision at the end of its tie group.
    ``order``: each row's ascending argsort, if the caller has it.
    """
    order = _descending(scores, np.argsort(scores, axis=1) if order is None else order)
    s = np.take_along_axis(scores, order, axis=1)
    pos = y[order]
    precision = np.cumsum(pos, axis=1) / np.arange(1, s.shape[1] + 1)
    is_end = np.ones_like(s, dtype=bool)
    is_end[:, :-1] = s[:, :-1] != s[:, 1:]
    # index of the end of each element's tie group: running minimum of end positions, from the right
    end_idx = np.where(is_end, np.arange(s.shape[1]), s.shape[1])
    end_idx = np.minimum.accumulate(end_idx[:, ::-1], axis=1)[:, ::-1]
    group_precision = np.take_along_axis(precision, end_idx, axis=1)
    return (group_precision * pos).sum(axis=1) / max(int(y.sum()), 1)


def evaluate_clients(
    clients: StackedModels, shards: ClientShards, test_x: Tensor, test_y: np.ndarray, q: float,
    threshold_scores: list[np.ndarray] | None = None, one_model: bool = False,
    val_shards: ClientShards | None = None, tau_on_val: bool = False,
) -> dict:
    """Thresholds on each client's own training rows (or on ``threshold_scores``, e.g. its validation rows'
    scores, which the caller already has), then metrics on the shared test set.

    ``val_shards``: the clients' validation rows, scored here (``result["val_scores"]``) and, with
    ``tau_on_val``, the rows τ is set on. ``one_model``: every slot holds the same model (a parameter-sharing
    baseline's global model), so the test set is scored once, not once per client; only the thresholds differ.
    """
    val = shard_scores(clients, val_shards) if val_shards is not None else None
    train = shard_scores(clients, shards)
    if tau_on_val:
        threshold_scores = val
    thresholds = quantile_thresholds(train if threshold_scores is None else threshold_scores, q)
    scorer = clients.slot_view(0) if one_model else clients
    if _all_at_once(scorer) and has_float64(test_x.device):  # the metrics where the test set was scored: [n, 3]
        then = RowMetrics(torch.as_tensor(np.asarray(test_y).astype(bool), device=test_x.device),
                          torch.as_tensor(thresholds, dtype=torch.float64, device=test_x.device))
        with torch.no_grad():
            rows = to_numpy(_stacked_scores(scorer, test_x, then))
        result = _summarised({k: np.ascontiguousarray(rows[:, j]) for j, k in enumerate(_ROW_METRICS)})
    else:
        result = detection_metrics(to_numpy(shared_scores(scorer, test_x)), test_y, thresholds)
    result["per_client"]["train_error"] = [float(s.mean()) for s in train]
    result["train_error"] = mean_error(result["per_client"]["train_error"])
    result["thresholds"] = thresholds.tolist()
    result["val_scores"] = val
    return result
