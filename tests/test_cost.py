"""experiments/cost.py: the protocol FLOPs it predicts equal the rows the engine actually trains and scores.

Tiny real runs count every trained row (per epoch: the participating clients' rows; 6F for a full-model
epoch, 6F_enc for an encoder-only alignment epoch) and every scored row (2F) by wrapping the engine's own
functions; their sum must equal ``cost.run_flops`` for each kind of method. F itself (``forward_cost``) is
checked against the closed forms of an MLP and of a convolution.
"""
from __future__ import annotations

import pytest

from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.experiments import cost


@pytest.fixture()
def counted(monkeypatch):
    import fedgca.evaluation.metrics as metrics
    import fedgca.simulation.evaluation as sim_evaluation
    import fedgca.training.gca as gca_training
    import fedgca.training.local as local

    rows = {"train6": 0, "train3": 0, "scored": 0}

    def count_epoch(real):
        def wrapped(clients, shards, rngs, batch_size, loss_fn, keys, participating):
            n = int(shards.sizes[participating.numpy().astype(bool)].sum())
            rows["train6" if len(keys) == len(clients.params) else "train3"] += n
            return real(clients, shards, rngs, batch_size, loss_fn, keys, participating)
        return wrapped

    def count_shared(real):
        def wrapped(clients, x):
            rows["scored"] += clients.num_clients * len(x)
            return real(clients, x)
        return wrapped

    def count_shards(real):
        def wrapped(clients, shards):
            rows["scored"] += int(shards.sizes.sum())
            return real(clients, shards)
        return wrapped

    for mod in (gca_training, local):
        monkeypatch.setattr(mod, "run_epoch", count_epoch(mod.run_epoch))
    monkeypatch.setattr(metrics, "shared_scores", count_shared(metrics.shared_scores))
    monkeypatch.setattr(metrics, "shard_scores", count_shards(metrics.shard_scores))
    monkeypatch.setattr(sim_evaluation, "shard_scores", count_shards(sim_evaluation.shard_scores))
    return rows


@pytest.mark.parametrize("overrides", [
    dict(method="gca"),
    dict(method="gca", eval_align_epochs=True, val_fraction=0.1),
    dict(method="gca", eval_align_epochs=True, eval_align_clients="client0", val_fraction=0.1),
    dict(method="single"),
    dict(method="centralized", val_fraction=0.1),
    dict(method="fedavg", participation=0.5),
    dict(method="fedprox", baseline_eval="local"),
    dict(method="fedavg", baseline_eval="local", eval_local_epochs=True),
], ids=["gca", "gca-align-evals-val", "gca-align-evals-client0", "single", "centralized-val", "fedavg-half", "fedprox-local-eval",
        "fedavg-local-epoch-evals"])
def test_predicted_flops_equal_the_engines_work(tmp_path, data_dir, counted, overrides):
    from fedgca.simulation.runner import run

    cfg = RunConfig("academic", rounds=2, recon_epochs=2, align_epochs=1, local_epochs=2, seed=100, **overrides)
    run(cfg, tmp_path / "run", data_dir=data_dir, progress=False)
    sizes = cost.sizes(cfg, DataSource.builtin(cfg.dataset, data_dir))
    F, F_enc = sizes.forward, sizes.encoder_forward
    measured = 6 * F * counted["train6"] + 6 * F_enc * counted["train3"] + 2 * F * counted["scored"]
    if cfg.participation < 1:  # the prediction counts the participants' expected rows (m/C of all rows)
        assert measured == pytest.approx(cost.run_flops(cfg, sizes), rel=0.01)
    else:
        assert measured == cost.run_flops(cfg, sizes)
    assert counted["scored"] > 0 and counted["train6"] > 0


def test_sizes_follow_the_partition_and_validation_split(data_dir):
    s = cost.sizes(RunConfig("academic", val_fraction=0.1), DataSource.builtin("academic", data_dir))
    assert (s.clients, s.train_rows + s.val_rows, s.test_rows, s.forward) == (10, 788, 2842, 46758)
    assert s.val_rows == sum(int(0.1 * n) for n in [79] * 8 + [78] * 2)


def test_forward_cost_is_the_parameter_count_of_an_mlp_and_per_position_for_a_convolution():
    from torch import nn

    from fedgca import models
    from fedgca.models import build_model, counted_cost, forward_cost, param_count

    mlp = build_model((36,))
    enc, dec = mlp.encoder, mlp.decoder
    assert forward_cost(mlp, (36,)) == (param_count(mlp), param_count(enc))
    assert param_count(enc) + param_count(dec) == param_count(mlp)
    # the MLP's count without torch's meta pass, held to FlopCounterMode's
    for dx in (1, 6, 36, 500):
        assert forward_cost(build_model((dx,)), (dx,)) == counted_cost(build_model((dx,)), (dx,))

    class Other(nn.Module):  # Linear/ReLU without a bias (counted from its parameters), or with another layer
        def __init__(self, last):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(5, 7, bias=False), nn.ReLU(), nn.Linear(7, 3))
            self.decoder = nn.Sequential(nn.Linear(3, 5), last)

        def forward(self, x):
            return self.decoder(self.encoder(x))

    for last, counted in ((nn.ReLU(), False), (nn.Tanh(), True), (nn.Sequential(nn.Linear(5, 5)), True)):
        model, calls = Other(last), []
        with pytest.MonkeyPatch.context() as mp:  # which way it was counted
            mp.setattr(models, "counted_cost", lambda *a, real=models.counted_cost: calls.append(1) or real(*a))
            cost = forward_cost(model, (5,))
        assert cost == counted_cost(model, (5,)) == (param_count(model), 59) and bool(calls) == counted

    class Tiny(nn.Module):  # a conv encoder and a transposed-conv decoder, counted by hand
        def __init__(self):
            super().__init__()
            self.encoder = nn.Conv2d(2, 4, kernel_size=3, stride=2, padding=1)  # 2×8×8 -> 4×4×4
            self.decoder = nn.ConvTranspose2d(4, 2, kernel_size=3, stride=2, padding=1, output_padding=1, bias=False)

        def forward(self, x):
            return self.decoder(self.encoder(x))

    conv = 16 * 4 * (2 * 9) + 16 * 4  # output positions × out channels × (in channels × kernel) + bias adds
    deconv = 16 * 4 * 2 * 9  # input positions × in × out channels × kernel, no bias
    assert forward_cost(Tiny(), (2, 8, 8)) == (conv + deconv, conv)
    fm = build_model((1, 28, 28))
    assert forward_cost(fm, (1, 28, 28))[0] > 40 * param_count(fm)
    assert next(fm.parameters()).device.type == "cpu"  # counted on a meta copy: the model itself is untouched
