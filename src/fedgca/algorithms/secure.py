"""Parameter sharing over secure aggregation: FedAvg and FedProx whose server learns only the weighted mean of
the clients' models (Flower's SecAgg+: ``secaggplus_mod`` on the clients, ``SecAggPlusWorkflow`` on the server).

The client step is FedAvg's (FedProx's proximal term included); the reply is summed, never seen alone
(``Step.summed``). What the server learns per round: the mean model Σ q_i·θ_i / Σ q_i (q_i the quantised N_i,
values clipped to ±8 and quantised to 2²² levels), the number of clients summed, who they were and each one's
N_i (already known from registration). A client checks its own model before sending: a non-finite one is not
sent (the server could not tell it from the others once masked).
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import devices
from fedgca.algorithms.base import SUMMED, ClientWork, Reply, Step, implements
from fedgca.algorithms.sharing import MODEL, ParameterSharing, _finite
from fedgca.protocol import secagg


@implements("secagg-fedavg", "secagg-fedprox")
class SecureParameterSharing(ParameterSharing):
    steps = (Step("train", sends=MODEL, reply=MODEL, metrics=True, summed=True),)

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.secagg = secagg.SecAggSettings(max_weight=float(max(self.sizes)))  # W: every q_i ≤ T

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        replies = super().client(step, r, work, received)
        return {slot: rep for slot, rep in replies.items() if all(_finite(a) for a in rep.arrays.values())}

    def summed_reply(self, r: int, replies: dict[int, Reply]) -> Reply:
        """The simulator's sum: what SecAgg+ returns for these clients' replies (``protocol.secagg``)."""
        ids = sorted(replies)
        keys = list(replies[ids[0]].arrays)
        mean = secagg.secure_mean([[devices.to_numpy(replies[i].arrays[k]) for k in keys] for i in ids],
                                  [replies[i].metrics["num-examples"] for i in ids],
                                  [secagg.rounding_seed(self.cfg.seed, r, i) for i in ids], self.secagg)
        return Reply(dict(zip(keys, mean)), {"clients": len(ids)})

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        return reply  # the server sees no client's reply: each client checked its own (``client``)

    def summary_extra(self) -> dict:
        s = self.secagg
        return {**super().summary_extra(), "secure_aggregation": {
            "protocol": "SecAgg+ (Flower: secaggplus_mod on the clients, SecAggPlusWorkflow on the server)",
            "server_learns_per_round": ["the weighted mean of the summed clients' models (weights: quantised N_i)",
                                        "how many clients were summed, and which (comm.json: accepted)",
                                        "each summed client's N_i (known from registration)"],
            "clipping_range": s.clipping_range, "quantization_range": s.quantization_range,
            "modulus_range": s.modulus_range, "max_weight": s.max_weight, "num_shares": s.num_shares,
            "reconstruction_threshold": s.reconstruction_threshold}}

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        mean = replies[SUMMED].arrays
        self.global_params = {k: torch.as_tensor(np.asarray(mean[k], dtype=np.float32), device=v.device)
                              for k, v in self.global_params.items()}
