"""Vectorised detection metrics (SPEC §5) against scikit-learn."""
import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from fedgca.data.source import DataSource
from fedgca.evaluation.metrics import (
    auroc_rows,
    average_precision_rows,
    detection_metrics,
)
from fedgca.evaluation.threshold import quantile_thresholds


@pytest.mark.parametrize("tied", [False, True])
def test_auroc_and_ap_match_sklearn(tied):
    rng = np.random.default_rng(0)
    y = rng.random(500) < 0.3
    scores = rng.normal(size=(6, 500)) + y
    if tied:
        scores = np.round(scores, 1)  # many ties
    for c in range(6):
        assert auroc_rows(scores, y)[c] == pytest.approx(roc_auc_score(y, scores[c]), abs=1e-12)
        assert average_precision_rows(scores, y)[c] == pytest.approx(average_precision_score(y, scores[c]), abs=1e-12)


def test_one_unstable_sort_gives_the_stable_sorts_figures_bit_for_bit():
    """AUROC and AP from one unstable argsort equal, to the last bit, the stable-sort formulation they replace
    (scipy's mid-ranks; AP summed in the order of a stable descending sort), on rows with and without ties and
    with duplicated scores at the ends."""
    from scipy.stats import rankdata

    rng = np.random.default_rng(2)
    n = int(rng.integers(20, 3000))  # 2,515 rows
    y = rng.random(n) < rng.uniform(0.1, 0.6)
    # many ties: in this row, AP summed in the reverse of an ascending sort differs in the last bit
    tied = np.round(rng.random(n) + 0.3 * y, int(rng.integers(1, 3)))
    scores = rng.random((5, n)).astype(np.float32).astype(np.float64) ** 2 + y
    scores[1] = tied
    scores[2, :50] = scores[2].max()  # a tie group at the top ...
    scores[3, :50] = 0.0  # ... and at the bottom
    ranks = rankdata(scores, axis=1)
    n_pos = int(y.sum())
    auroc_ref = (ranks[:, y].sum(axis=1) - n_pos * (n_pos + 1) / 2) / (n_pos * (len(y) - n_pos))
    desc = np.argsort(-scores, axis=1, kind="stable")
    s, pos = np.take_along_axis(scores, desc, axis=1), y[desc]
    precision = np.cumsum(pos, axis=1) / np.arange(1, s.shape[1] + 1)
    ap_ref = np.empty(len(scores))
    for c in range(len(scores)):  # precision at the end of each tie group, positive by positive
        end = {v: i for i, v in enumerate(s[c])}
        ap_ref[c] = (np.array([precision[c, end[v]] for v in s[c]]) * pos[c]).sum() / n_pos
    order = np.argsort(scores, axis=1)
    assert np.array_equal(auroc_rows(scores, y, order), auroc_ref)
    assert np.array_equal(auroc_rows(scores, y), auroc_ref)
    assert np.array_equal(average_precision_rows(scores, y, order), ap_ref)
    assert np.array_equal(average_precision_rows(scores, y), ap_ref)


@pytest.mark.parametrize("decimals", [None, 3, 1, 0])
def test_descending_order_from_an_unstable_ascending_sort_is_the_stable_one(decimals):
    from fedgca.evaluation.metrics import _descending

    rng = np.random.default_rng(decimals or 7)
    scores = rng.random((4, 3000)).astype(np.float32).astype(np.float64)
    if decimals is not None:
        scores = np.round(scores, decimals)  # up to two values per row: huge tie groups
    scores[0, :40] = scores[0].max()
    assert np.array_equal(_descending(scores, np.argsort(scores, axis=1)), np.argsort(-scores, axis=1, kind="stable"))


def test_detection_metrics_accuracy_thresholds_and_nan_client():
    y = np.array([0, 0, 1, 1])
    scores = np.array([[0.1, 0.2, 0.9, 0.8], [np.nan, 0.1, 0.2, 0.3]])
    thr = quantile_thresholds([np.array([0.0, 0.1, 0.2, 0.3, 0.4]), np.array([1.0])], q=0.75)
    assert thr.tolist() == pytest.approx([0.3, 1.0])
    res = detection_metrics(scores, y, thr)
    assert res["per_client"]["accuracy"] == [1.0, 0.5]
    assert res["per_client"]["auroc"][0] == 1.0 and np.isnan(res["per_client"]["auroc"][1])


def test_scores_do_not_depend_on_the_pass_size(monkeypatch, data_dir):
    """Scoring one model at a time in 512-row passes (the default) equals scoring all rows in one pass, and
    equals, bit for bit, the stacked forward pass that training uses."""
    import torch

    import fedgca.evaluation.metrics as m
    from fedgca.config import RunConfig
    from fedgca.simulation.federation import build_federation

    fed = build_federation(RunConfig(dataset="magic", method="gca").resolved(), DataSource.builtin("magic", data_dir))
    assert m.chunk_rows(fed.test_x.shape[1:]) == 512 < len(fed.test_x)
    chunked = m.shared_scores(fed.clients, fed.test_x)
    train_chunked = m.shard_scores(fed.clients, fed.shards)
    with torch.no_grad():
        stacked_x = fed.test_x.unsqueeze(0).expand(fed.clients.num_clients, *fed.test_x.shape)
        assert torch.equal(chunked, m.reconstruction_per_row(stacked_x, fed.clients.reconstruct(stacked_x)))
    monkeypatch.setattr(m, "chunk_rows", lambda row_shape: 1 << 30)
    whole = m.shared_scores(fed.clients, fed.test_x)
    assert chunked.shape == whole.shape == (fed.clients.num_clients, len(fed.test_x))
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=0)
    for a, b in zip(train_chunked, m.shard_scores(fed.clients, fed.shards)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)


def test_image_scores_do_not_depend_on_the_pass_size(monkeypatch):
    """The same for the conv autoencoder: 28×28 images score in 256-row passes (4 clients: what is checked is per
    client, the pass size)."""
    import torch

    import fedgca.evaluation.metrics as m
    from fedgca.models.conv import ConvAE
    from fedgca.training.stacked import StackedModels

    torch.manual_seed(0)
    clients = StackedModels([ConvAE(1, 28, 28) for _ in range(4)])
    x = torch.rand(600, 1, 28, 28) * 2 - 1
    assert m.chunk_rows(x.shape[1:]) == 256
    chunked = m.shared_scores(clients, x)
    monkeypatch.setattr(m, "chunk_rows", lambda row_shape: 1 << 30)
    torch.testing.assert_close(chunked, m.shared_scores(clients, x), rtol=1e-5, atol=1e-7)


def test_one_global_model_is_scored_once_with_the_same_result(data_dir):
    """A baseline's global model in every slot: scoring the test set once gives exactly the per-client result."""
    from fedgca.config import RunConfig
    from fedgca.evaluation.metrics import evaluate_clients
    from fedgca.simulation.federation import build_federation

    fed = build_federation(RunConfig(dataset="magic", method="fedavg").resolved(), DataSource.builtin("magic", data_dir))
    fed.clients.set_all(fed.clients.client_state_dict(3))
    args = (fed.clients, fed.shards, fed.test_x, fed.dataset.test_y, 0.75)
    once, per_client = evaluate_clients(*args, one_model=True), evaluate_clients(*args, one_model=False)
    assert once == per_client
    assert len(set(once["thresholds"])) == fed.num_clients  # τ_i still differ per client


@pytest.mark.parametrize("n", [5, 12, 19])
def test_a_thresholds_flag_rate_from_few_rows_matches_brute_force(n):
    """The flag rate a τ from n validation scores gives on new normal rows (mean and spread over clients),
    against brute force: 40,000 clients with n uniform scores each, τ by fedgca's quantile rule, F(τ) = τ."""
    from fedgca.evaluation.threshold import (
        FEW_THRESHOLD_ROWS,
        few_threshold_rows,
        threshold_flag_rate,
    )

    tau = np.quantile(np.random.default_rng(0).random((40000, n)), 0.75, axis=1)
    mean, sd = threshold_flag_rate(n, 0.75)
    assert abs((1 - tau).mean() - mean) < 0.002 and abs((1 - tau).std() - sd) < 0.002
    assert f"about {100 * mean:.0f} %" in few_threshold_rows([n, 50], 0.75)
    assert few_threshold_rows([FEW_THRESHOLD_ROWS, 99]) is None


@pytest.mark.parametrize("decimals", [None, 2, 0])
def test_metrics_computed_where_the_scores_are_equal_the_hosts(decimals):
    """``detection_metrics_rows`` (the device engine's, in torch) against ``detection_metrics`` on the same
    float32 scores: accuracy and AUROC bit for bit, AUPRC to 1e-14 (the same terms summed in another order), both
    against scikit-learn; rows with tie groups at the top and the bottom, a diverged (NaN) client; and a row's
    figures the same alone as among the others."""
    import torch

    from fedgca.evaluation.metrics import detection_metrics_rows

    rng = np.random.default_rng(3)
    m = 2_345
    y = rng.random(m) < 0.2
    scores = (rng.random((6, m)) + 0.4 * y).astype(np.float32)
    if decimals is not None:
        scores = np.round(scores, decimals)
    scores[1, :60], scores[2, :60] = scores[1].max(), scores[2].min()
    scores[3, 17] = np.nan
    thresholds = quantile_thresholds(list(scores[:, :500]), 0.75)
    host = detection_metrics(scores, y, thresholds)["per_client"]
    rows = detection_metrics_rows(torch.from_numpy(scores), torch.from_numpy(y).expand(6, m),
                                  torch.from_numpy(thresholds)).numpy()
    assert np.array_equal(rows[:, 0], host["accuracy"])
    assert np.array_equal(rows[:, 1], host["auroc"], equal_nan=True)
    np.testing.assert_allclose(rows[:, 2], host["auprc"], rtol=0, atol=1e-14)
    assert np.isnan(rows[3, 1:]).all() and not np.isnan(rows[3, 0])
    for c in (0, 1, 2, 4, 5):
        assert rows[c, 1] == pytest.approx(roc_auc_score(y, scores[c]), abs=1e-12)
        assert rows[c, 2] == pytest.approx(average_precision_score(y, scores[c]), abs=1e-12)
        alone = detection_metrics_rows(torch.from_numpy(scores[c : c + 1]), torch.from_numpy(y)[None],
                                       torch.from_numpy(thresholds[c : c + 1])).numpy()
        assert np.array_equal(alone[0], rows[c])


def test_many_scorings_metrics_in_blocks_of_clients_are_the_same(monkeypatch):
    """``RowMetrics.of_many`` (the device engine's metrics of many runs' scorings at once, one of them a one-model
    scoring serving three clients' τ) gives the same figures in one block as in blocks of one client (the memory
    budget), bit for bit; each run's rows come back in its own order."""
    import torch

    from fedgca.evaluation import metrics

    rng = np.random.default_rng(4)
    y = torch.from_numpy(rng.random(400) < 0.25)
    scores = [torch.rand(2, 400), torch.rand(1, 400), torch.rand(4, 400)]
    thens = [metrics.RowMetrics(y, torch.rand(n, dtype=torch.float64)) for n in (2, 3, 4)]
    whole = metrics.RowMetrics.of_many(thens, scores)
    monkeypatch.setattr(metrics, "METRICS_PASS_BYTES", 1)
    blocks = metrics.RowMetrics.of_many(thens, scores)
    assert [tuple(w.shape) for w in whole] == [(2, 3), (3, 3), (4, 3)]
    assert all(torch.equal(a, b) for a, b in zip(whole, blocks))
    assert torch.equal(whole[1][:, 1], whole[1][0, 1].expand(3))  # one model: one AUROC for each client
    for then, s, w in zip(thens, scores, whole):
        assert torch.equal(then(s), w)
