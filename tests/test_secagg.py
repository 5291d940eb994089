"""Secure aggregation (Flower's SecAgg+): what the server receives, what it computes, clients lost mid-round.

The Flower ≡ simulator identity of metrics.csv for the secure methods is in tests/test_flower.py (parametrised
over the registry)."""
import csv
import json
import logging

import numpy as np
import pytest

from fedgca.algorithms import method_class
from fedgca.config import RunConfig
from fedgca.protocol import secagg


def _magic(**kw) -> RunConfig:
    return RunConfig(**{"dataset": "magic", "method": "secagg-fedavg", "clients": 3, "rounds": 2,
                        "local_epochs": 1, "seed": 100, **kw})


def test_secure_mean_is_the_weighted_mean_up_to_quantisation():
    rng = np.random.default_rng(0)
    vectors = [[rng.normal(scale=0.3, size=(40, 7)).astype(np.float32), rng.normal(size=(7,)).astype(np.float32)]
               for _ in range(4)]
    weights = [100, 250, 40, 610]
    s = secagg.SecAggSettings(max_weight=max(weights))
    mean = secagg.secure_mean(vectors, weights, [1, 2, 3, 4], s)
    exact = [sum(w * v[j] for w, v in zip(weights, vectors)) / sum(weights) for j in range(2)]
    step = 2 * s.clipping_range / s.quantization_range  # one quantisation level
    for m, e in zip(mean, exact):
        assert np.abs(m - e).max() < 4 * step / min(weights) * max(weights)
    assert all(np.array_equal(a, b) for a, b in zip(mean, secagg.secure_mean(vectors, weights, [1, 2, 3, 4], s)))
    other = secagg.secure_mean(vectors, weights, [5, 6, 7, 8], s)  # other rounding draws, other last bits
    assert not all(np.array_equal(a, b) for a, b in zip(mean, other))


def test_secure_fedavg_equals_fedavg_up_to_quantisation(tmp_path, data_dir):
    from fedgca.simulation.runner import run

    secure = run(_magic(), tmp_path / "secure", data_dir=data_dir, progress=False)
    plain = run(_magic(method="fedavg"), tmp_path / "plain", data_dir=data_dir, progress=False)
    for p in ("final", "peak"):
        assert secure[p]["auroc"] == pytest.approx(plain[p]["auroc"], abs=1e-4)
    assert "secure_aggregation" in secure and "server_learns_per_round" in secure["secure_aggregation"]
    # what crossed the network: the model down, one masked int64 vector (weight + values) up per client
    assert secure["bytes_down_per_round"] == plain["bytes_down_per_round"]
    assert secure["bytes_up_per_round"] == 3 * 8 * (1 + 38_037)


class _Spying:
    """An in-process grid that keeps every reply the ServerApp receives."""

    received: list = []

    @classmethod
    def grid(cls):
        from fedgca.flower.inprocess import InProcessGrid

        class Grid(InProcessGrid):
            def pull_messages(self, message_ids):
                replies = super().pull_messages(message_ids)
                cls.received.extend(replies)
                return replies

        return Grid


@pytest.mark.parametrize("method", ["secagg-fedavg", "secagg-gca"])
def test_the_server_receives_masked_vectors_and_their_mean_only(tmp_path, data_dir, method):
    """Every reply a secure run's ServerApp receives: no client's model or code in any record; the collect
    stage's vectors masked (uniform modulo 2³², not the quantised values below 2²²)."""
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    from fedgca.flower import client_app
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.secagg import SECAGG
    from fedgca.flower.server_app import make_server_app

    cfg = _magic(method=method, recon_epochs=1, align_epochs=1)
    steps = sum(s.summed for s in method_class(method).steps)  # SecAgg+ runs per round
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    _Spying.received = []
    run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path))), client_app.app, nodes,
                  grid_class=_Spying.grid())
    train = [m for m in _Spying.received if m.metadata.message_type == "train"]
    assert train and all(not m.has_error() for m in train)
    for m in _Spying.received:
        for record in m.content.array_records.values():
            assert len(record) == 0  # secaggplus_mod empties the FitRes parameters: nothing but masks leave
    masked = [m.content.config_records[SECAGG][Key.MASKED_PARAMETERS] for m in train
              if Key.MASKED_PARAMETERS in m.content.config_records[SECAGG]]
    assert len(masked) == 3 * cfg.rounds * steps
    from flwr.common import bytes_to_ndarray

    for vector in masked:
        values = np.concatenate([bytes_to_ndarray(b).ravel() for b in vector])
        assert values.max() > 2 ** 30  # masked: spread over [0, 2³²); an unmasked vector stays below 2²²
    phases = {json.loads(x)["phase"] for x in (tmp_path / "messages.jsonl").read_text().splitlines()}
    assert {"secagg.setup", "secagg.share_keys", "secagg.collect_masked_vectors", "secagg.unmask"} <= phases


def _faulty_app(crash_stage_clients):
    """fedgca's ClientApp whose listed clients crash inside SecAgg+'s collect stage (after sharing keys)."""
    from flwr.clientapp import ClientApp

    from fedgca.flower import client_app as fedgca_client
    from fedgca.flower.secagg import LEGACY_CONFIG, secure_aggregation

    app = ClientApp(mods=[fedgca_client.torch_threads, secure_aggregation])
    app.query("info")(fedgca_client.info)
    app.evaluate()(fedgca_client.evaluate)

    @app.train()
    def train(msg, context):
        if LEGACY_CONFIG in msg.content.config_records and \
                int(context.node_config["partition-id"]) in crash_stage_clients:
            raise RuntimeError("fault injection: crash in the secure round")
        return fedgca_client.train(msg, context)

    return app


@pytest.mark.parametrize("lost", [[2], [1, 2]], ids=["one-lost-above-threshold", "two-lost-below-threshold"])
def test_a_client_lost_in_the_secure_round(tmp_path, data_dir, caplog, lost):
    """3 clients, threshold 2: one lost after sharing its keys → the others' mean, its masks recovered; two lost
    → the round fails in one warning line, the global model is kept, and the run goes on."""
    from fedgca.flower.config import to_run_config
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.server_app import make_server_app

    cfg = _magic(rounds=2)
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="fedgca"):
        run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path), reply_timeout=30.0)),
                      _faulty_app(set(lost)), nodes)
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 2  # the run finished
    kept = [i for i in range(3) if i not in lost]
    if len(kept) >= 2:
        assert all(r["took_part"] == kept for r in rounds)
        assert all(r["accepted"]["train"] == kept for r in rounds)
    else:
        assert all(r["took_part"] == [] for r in rounds)
        assert "secure aggregation did not complete" in caplog.text
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert len(rows) == 2 and all(0 <= float(r["auroc"]) <= 1 for r in rows)
    assert all(str(i) in rounds[0]["dropped"] for i in lost)


def test_secure_methods_are_the_sum_rules():
    """FedNova needs each client's τ_i and DP-FedAvg clips each update at the server: neither is a sum."""
    from fedgca import methods

    secure = [n for n in methods.names(family="parameter-sharing") if any(s.summed for s in method_class(n).steps)]
    assert secure == ["secagg-fedavg", "secagg-fedprox"]
    assert all(methods.get(n).server_rule == "fedavg" for n in secure)
    assert all(methods.get(n).attack == "white-box" for n in secure)  # on the mean: all the server holds


def test_secure_gca_clusters_on_sums_and_learns_as_gca(tmp_path, data_dir):
    """The server's mixture comes from summed statistics alone: its EM matches an EM on the pooled codes (the
    same moments and E-steps computed centrally), no code is uploaded, and the detectors learn about as GCA's."""
    from fedgca.protocol import mixture_sums
    from fedgca.simulation.runner import run

    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=c, scale=0.5, size=(n, 4)) for c, n in ((-2.0, 300), (2.0, 200), (0.0, 250))]
    pooled = np.concatenate(parts)
    s = secagg.SecAggSettings(max_weight=300)
    summed = secagg.secure_mean([list(mixture_sums.moments(p, 32.0).values()) for p in parts],
                                [len(p) for p in parts], [1, 2, 3], s)
    exact = mixture_sums.moments(pooled, 32.0)
    assert np.allclose(summed[0], exact["m1"], atol=1e-5) and np.allclose(summed[1], exact["m2"], atol=1e-5)
    mix = mixture_sums.initial_mixture(exact["m1"], exact["m2"], 32.0, 3, np.random.default_rng(1))
    for _ in range(30):
        st = mixture_sums.statistics(pooled, mix)
        mix = mixture_sums.m_step(st["s0"], st["s1"], st["s2"], mix)
    assert sorted(np.round(mix.means[:, 0]).tolist()) == [-2.0, 0.0, 2.0]  # the three clusters found
    assert sorted(np.round(mix.weights * len(pooled)).tolist()) == [200, 250, 300]

    cfg = RunConfig(dataset="magic", method="secagg-gca", clients=3, rounds=3, recon_epochs=1, align_epochs=1, seed=100)
    secure = run(cfg, tmp_path / "secure", data_dir=data_dir, progress=False)
    plain = run(RunConfig(**{**cfg.to_dict(), "method": "gca"}), tmp_path / "gca", data_dir=data_dir, progress=False)
    assert secure["uploads_per_round"] == 0 and plain["uploads_per_round"] > 0
    assert secure["peak"]["auroc"] > plain["peak"]["auroc"] - 0.02
    comm = json.loads((tmp_path / "secure" / "comm.json").read_text())
    assert all(c["broadcast_k"] >= 1 for c in comm)


def test_a_killed_secure_gca_run_resumes_to_the_same_metrics(tmp_path, data_dir, kill_after_round):
    """The server's mixture is in the checkpoint (as tensors: torch.load(weights_only=True) refuses NumPy)."""
    from fedgca.simulation import runner

    cfg = RunConfig(dataset="magic", method="secagg-gca", clients=3, rounds=3, recon_epochs=1, align_epochs=1,
                    seed=100)
    runner.run(cfg, tmp_path / "whole", data_dir=data_dir, progress=False)
    kill_after_round(lambda: runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False), 1)
    runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False, resume=True)
    assert (tmp_path / "resumed" / "metrics.csv").read_bytes() == (tmp_path / "whole" / "metrics.csv").read_bytes()
