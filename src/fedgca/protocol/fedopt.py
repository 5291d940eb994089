"""Server optimizers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021): the server treats the weighted
mean of the clients' models as a step, Δ = mean − θ, and applies its own optimizer to it. What they share is here;
each optimizer is a module of its own (``fedavgm``, ``fedadam``, ``fedyogi``, ``fedadagrad``), written as Flower
1.41's strategies compute them (``flwr.serverapp.strategy.FedAvgM``, ``FedAdam``, ``FedYogi``, ``FedAdagrad``;
tests/test_server_opt.py checks each against Flower's on the same inputs, round after round).

Each optimizer is a pure function ``step(theta, mean, state, opts, round_idx) -> (theta', state')`` over dicts of
tensors: the server state it carries between rounds (momentum, moments) goes in and out, so a checkpoint keeps it
and a resumed run goes on with it. The mean is all a step reads of the clients, which is why each runs under secure
aggregation as FedAvg does.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedgca.protocol.fedavg import Params


@dataclass(frozen=True)
class ServerOptOptions:
    """The server optimizer's hyperparameters (RunConfig's ``server_*`` options)."""

    lr: float  # η, the server learning rate
    momentum: float = 0.9  # FedAvgM's β
    beta1: float = 0.9  # FedAdam / FedYogi / FedAdagrad's first moment
    beta2: float = 0.99  # FedAdam / FedYogi's second moment
    tau: float = 1e-3  # the adaptivity τ (added to √v)

    @classmethod
    def of(cls, cfg) -> "ServerOptOptions":
        return cls(lr=cfg.server_lr, momentum=cfg.server_momentum, beta1=cfg.server_beta1, beta2=cfg.server_beta2,
                   tau=cfg.server_tau)


def delta(theta: Params, mean: Params) -> Params:
    """Δ = mean − θ: the round's step of the clients' mean (the negative pseudo-gradient)."""
    return {k: mean[k] - v for k, v in theta.items()}


def first_moment(state: dict, d: Params, beta1: float) -> Params:
    """m ← β₁·m + (1 − β₁)·Δ, from m = 0 (Flower's FedOpt)."""
    m = state.get("m") or {k: v.new_zeros(v.shape) for k, v in d.items()}
    return {k: beta1 * m[k] + (1 - beta1) * d[k] for k in d}


def adaptive_step(theta: Params, m: Params, v: Params, lr: float, tau: float) -> Params:
    """θ + η·m / (√v + τ): the update FedAdam (with its η bias-corrected), FedYogi and FedAdagrad share."""
    return {k: x + lr * m[k] / (v[k].sqrt() + tau) for k, x in theta.items()}
