"""Parameter sharing with a server optimizer — FedAvgM, FedAdam, FedYogi, FedAdagrad (``protocol/fedopt.py``) — and
their secure variants: the round is FedAvg's (or secure FedAvg's); the server then steps its own optimizer from
θ^(r) towards the clients' weighted mean instead of taking the mean, carrying its momentum or moments from round to
round in its state (a checkpoint keeps them: a resumed run goes on with them). The mean is all it reads of the
clients, so the secure variant's server, which learns only the mean, runs the same step.
"""
from __future__ import annotations

from fedgca.algorithms.base import Reply, Step, implements
from fedgca.algorithms.secure import SecureParameterSharing
from fedgca.algorithms.sharing import ParameterSharing
from fedgca.protocol import server_opt
from fedgca.protocol.fedopt import ServerOptOptions


class ServerOptimizing:
    """Mixed in before a parameter-sharing class, whose ``aggregate`` sets the global model to the clients' mean."""

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.opt_state: dict = {}

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        before = self.global_params
        super().aggregate(step, r, replies)  # θ ← the clients' weighted mean (plain or summed)
        self.global_params, self.opt_state = server_opt.step(self.cfg.spec.server_opt, before, self.global_params,
                                                             self.opt_state, ServerOptOptions.of(self.cfg), r)

    def summary_extra(self) -> dict:
        o = ServerOptOptions.of(self.cfg)
        reads = self.cfg.spec.reads
        return {**super().summary_extra(), "server_optimizer": {
            "name": self.cfg.spec.server_opt,
            **{k: getattr(o, k) for k in ("lr", "momentum", "beta1", "beta2", "tau") if f"server_{k}" in reads},
            "as": "Flower 1.41's strategy of the same name (protocol/fedopt.py)"}}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "server_opt": self.opt_state}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.opt_state = state.get("server_opt", {})


@implements("fedavgm", "fedadam", "fedyogi", "fedadagrad")
class OptimizedSharing(ServerOptimizing, ParameterSharing):
    pass


@implements("secagg-fedavgm", "secagg-fedadam", "secagg-fedyogi", "secagg-fedadagrad")
class SecureOptimizedSharing(ServerOptimizing, SecureParameterSharing):
    pass
