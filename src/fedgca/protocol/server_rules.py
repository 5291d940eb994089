"""The parameter-sharing server rules of SPEC §2 behind one call, used by both drivers.

The in-process simulator and the Flower ServerApp both call ``aggregate``, so
that a Flower federation and the simulator compute the same global model —
DP-FedAvg's noise included (drawn from ``int_seed(seed, "dp-noise", r)``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedgca import seeding
from fedgca.protocol import dpfedavg, fedavg, fednova
from fedgca.protocol.fedavg import Params


@dataclass(frozen=True)
class RuleOptions:
    """What the server rules read from a run's configuration."""

    seed: int
    local_epochs: int
    batch_size: int
    dp_clip: float = 1.0
    dp_sigma: float = 1.0

    @classmethod
    def of(cls, cfg) -> "RuleOptions":
        return cls(seed=cfg.seed, local_epochs=cfg.local_epochs, batch_size=cfg.batch_size, dp_clip=cfg.dp_clip,
                   dp_sigma=cfg.dp_sigma)


def aggregate(rule: str, round_idx: int, global_params: Params, stacked: Params, sizes, opts: RuleOptions,
              local_steps: Tensor | None = None) -> tuple[Params, Tensor | None]:
    """θ^(r+1) by ``rule`` (a MethodSpec's ``server_rule``) from the participants' models (stacked [m, ...]) and sizes; DP-FedAvg also returns the update norms.

    ``local_steps``: FedNova's τ_i as the clients report them; by default the
    SPEC formula E·⌈N_i/B⌉ (what an honest client reports).
    """
    if rule == "fedavg":  # also FedProx (which changes the client loss only) and DP-SGD-FedAvg
        return fedavg.aggregate(global_params, stacked, sizes), None
    if rule == "fednova":
        tau = fednova.local_steps(sizes, opts.local_epochs, opts.batch_size) if local_steps is None else local_steps
        return fednova.aggregate(global_params, stacked, sizes, tau), None
    if rule == "dpfedavg":
        gen = torch.Generator(device="cpu").manual_seed(seeding.int_seed(opts.seed, "dp-noise", round_idx))
        return dpfedavg.aggregate(global_params, stacked, sizes, clip=opts.dp_clip, sigma=opts.dp_sigma,
                                  generator=gen)
    raise ValueError(f"unknown parameter-sharing server rule {rule!r}")
