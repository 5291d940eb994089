"""Server optimizers (issue #63): FedAvgM, FedAdam, FedYogi, FedAdagrad step as Flower's strategies of the same name
on the same inputs, round after round; their secure variants; a killed run resumes with the optimizer's state.
(Flower ≡ simulator for every new method: tests/test_flower.py's test parametrised over the registry.)"""
import numpy as np
import pytest
import torch

from fedgca import methods
from fedgca.config import RunConfig
from fedgca.protocol import fedavg, server_opt
from fedgca.protocol.fedopt import ServerOptOptions


def _flower_strategy(name: str, o: ServerOptOptions):
    from flwr.serverapp import strategy as s

    if name == "fedavgm":
        return s.FedAvgM(server_learning_rate=o.lr, server_momentum=o.momentum)
    if name == "fedadagrad":
        return s.FedAdagrad(eta=o.lr, tau=o.tau)
    cls = {"fedadam": s.FedAdam, "fedyogi": s.FedYogi}[name]
    return cls(eta=o.lr, beta_1=o.beta1, beta_2=o.beta2, tau=o.tau)


def _replies(models: list[dict], sizes: list[int]):
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    out = []
    for i, (m, n) in enumerate(zip(models, sizes)):
        request = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=i + 1, message_type="train")
        out.append(Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in m.items()}),
                                       "metrics": MetricRecord({"num-examples": n})}), reply_to=request))
    return out


@pytest.mark.parametrize("name", server_opt.NAMES)
def test_each_server_optimizer_steps_as_flowers_strategy(name):
    """Five rounds of random client models: fedgca's step and Flower 1.41's strategy from the same θ and the same
    replies agree to float32 precision every round (their moments evolving side by side), with non-default
    hyperparameters so that each one is exercised."""
    from flwr.app import Array, ArrayRecord
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0
    try:
        rng = np.random.default_rng(7)
        o = ServerOptOptions(lr=0.3, momentum=0.7, beta1=0.8, beta2=0.95, tau=1e-2)
        flower = _flower_strategy(name, o)
        theta = {"w": rng.normal(size=(4, 3)).astype(np.float32), "b": rng.normal(size=(3,)).astype(np.float32)}
        state, sizes = {}, [40, 25, 90]
        for r in range(5):
            models = [{k: v + rng.normal(scale=0.2, size=v.shape).astype(np.float32) for k, v in theta.items()}
                      for _ in sizes]
            if name == "fedavgm":
                flower.current_arrays = ArrayRecord({k: Array(v.copy()) for k, v in theta.items()})
            else:
                flower.current_arrays = {k: v.copy() for k, v in theta.items()}
            theirs, _ = flower.aggregate_train(r + 1, _replies(models, sizes))
            t = {k: torch.as_tensor(v) for k, v in theta.items()}
            stacked = {k: torch.stack([torch.as_tensor(m[k]) for m in models]) for k in theta}
            mean = fedavg.aggregate(t, stacked, sizes)
            mine, state = server_opt.step(name, t, mean, state, o, r)
            for k in theta:
                np.testing.assert_allclose(mine[k].numpy(), theirs[k].numpy(), rtol=2e-5, atol=2e-6, err_msg=f"{k} r={r}")
            theta = {k: v.numpy().astype(np.float32) for k, v in mine.items()}
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def test_the_methods_and_their_options():
    """Each optimizer is a plain and a secure method, reads only its own options, and validates them."""
    for name in server_opt.NAMES:
        plain, secure = methods.get(name), methods.get(f"secagg-{name}")
        assert plain.server_opt == secure.server_opt == name and secure.secure and not plain.secure
        assert plain.flower and plain.server_rule == "fedavg" and "server_lr" in plain.reads
    assert "server_momentum" in methods.get("fedavgm").reads and "server_momentum" not in methods.get("fedadam").reads
    cfg = RunConfig(dataset="magic", method="fedyogi").resolved()
    assert cfg.server_lr == server_opt.default_lr("fedyogi")
    assert RunConfig(dataset="magic", method="fedavg").resolved().server_lr is None  # read by no other method
    for bad, msg in (({"server_beta1": 1.0}, "--server-beta1 must be in \\[0, 1\\)"),
                     ({"server_lr": 0.0}, "--server-lr must be > 0"), ({"server_tau": -1.0}, "--server-tau must be > 0")):
        with pytest.raises(ValueError, match=msg):
            RunConfig(dataset="magic", method="fedadam", **bad).resolved()


@pytest.mark.parametrize("method", ["fedadam", "secagg-fedavgm"])
def test_a_killed_server_optimizer_run_resumes_to_the_same_metrics(tmp_path, data_dir, kill_after_round, method):
    """The optimizer's momentum or moments are in the checkpoint: a run killed after round 2 resumes to the
    uninterrupted metrics.csv; the secure variant is the plain one up to the quantisation of the mean."""
    from fedgca.simulation import runner

    cfg = RunConfig(dataset="magic", method=method, clients=3, rounds=4, local_epochs=1, seed=100)
    whole = runner.run(cfg, tmp_path / "whole", data_dir=data_dir, progress=False)
    kill_after_round(lambda: runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False), 2)
    runner.run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False, resume=True)
    assert (tmp_path / "resumed" / "metrics.csv").read_bytes() == (tmp_path / "whole" / "metrics.csv").read_bytes()
    if method.startswith("secagg-"):
        plain = runner.run(RunConfig(**{**cfg.to_dict(), "method": method.removeprefix("secagg-")}),
                           tmp_path / "plain", data_dir=data_dir, progress=False)
        assert whole["final"]["auroc"] == pytest.approx(plain["final"]["auroc"], abs=1e-5)
