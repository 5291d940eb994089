"""Adding a method is one module plus one registry call: a method defined here, in the test file, runs on both
drivers — the in-process simulator and ``flower simulate`` — to the same metrics.csv, byte for byte.

The method is FedAvg with server momentum (FedAvgM, Hsu et al. 2019): the server keeps a velocity
v ← β·v + (θ̄ − θ) and moves θ ← θ + v, where θ̄ is FedAvg's weighted average of the clients' models. Its
client step is FedAvg's, inherited; only the server rule is new.
"""
import csv
import dataclasses

import pytest
import torch

from fedgca import methods
from fedgca.algorithms import Step, register
from fedgca.algorithms.base import _CLASSES
from fedgca.algorithms.sharing import ParameterSharing
from fedgca.config import RunConfig
from fedgca.flower.simulation import simulate
from fedgca.methods import MethodSpec
from fedgca.protocol import fedavg
from fedgca.simulation.runner import run

BETA = 0.9


class FedAvgM(ParameterSharing):
    """FedAvg's client step; the server adds momentum to the averaged update."""

    def start(self, initial, num_clients):
        super().start(initial, num_clients)
        self.velocity = {k: torch.zeros_like(v) for k, v in self.global_params.items()}

    def aggregate(self, step: Step, r: int, replies) -> None:
        ids = sorted(replies)
        stacked = {k: torch.stack([torch.as_tensor(replies[i].arrays[k]) for i in ids]) for k in self.global_params}
        average = fedavg.aggregate(self.global_params, stacked, [replies[i].metrics["num-examples"] for i in ids])
        for k, theta in self.global_params.items():
            self.velocity[k] = BETA * self.velocity[k] + (average[k] - theta)
        self.global_params = {k: theta + self.velocity[k] for k, theta in self.global_params.items()}

    def state_dict(self):
        return {**super().state_dict(), "velocity": self.velocity}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.velocity = state["velocity"]


@pytest.fixture
def fedavgm():
    spec = register(MethodSpec("demo-fedavgm", "FedAvgM (test)", "parameter-sharing", methods.get("fedavg").reads, flower=True,
                               attack="white-box", in_paper=False), FedAvgM)
    yield spec
    methods.REGISTRY.pop(spec.name)  # the registries are the process's: leave them as the other tests expect
    _CLASSES.pop(spec.name)


def test_a_method_defined_in_a_test_file_runs_on_both_drivers_to_the_same_metrics(tmp_path, data_dir, fedavgm):
    cfg = RunConfig(dataset="magic", method="demo-fedavgm", clients=3, rounds=3, local_epochs=1, seed=100)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    assert fl["bytes_up_per_round"] == sim["bytes_up_per_round"] > 0
    # the momentum is real: the same federation under plain FedAvg ends elsewhere
    plain = run(dataclasses.replace(cfg, method="fedavg"), tmp_path / "fedavg", data_dir=data_dir, progress=False)
    rows = {d: list(csv.DictReader((tmp_path / d / "metrics.csv").open())) for d in ("sim", "fedavg")}
    # round 1: v = θ̄ − θ, FedAvg's step (θ + (θ̄ − θ) rounds in float32's last bits)
    assert float(rows["sim"][0]["auroc"]) == pytest.approx(float(rows["fedavg"][0]["auroc"]), abs=1e-6)
    assert rows["sim"][-1]["auroc"] != rows["fedavg"][-1]["auroc"] and plain["final"] != sim["final"]
