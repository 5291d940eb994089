"""Secure aggregation: what a method whose server learns only sums adds to it (``SecureSum``), and FedAvg and
FedProx over it (Flower's SecAgg+: ``secaggplus_mod`` on the clients, ``SecAggPlusWorkflow`` on the server).

A summed step's replies reach the server only as their weighted mean over the clients (weights: the reply's
``num-examples``); the simulator computes that mean as SecAgg+ does (``summed_reply``), the Flower ServerApp
receives it from the protocol. The parameter-sharing client step is FedAvg's (FedProx's proximal term included); the reply is summed, never seen alone
(``Step.summed``). What the server learns per round: the mean model Σ q_i·θ_i / Σ q_i (q_i the quantised N_i,
values clipped to ±8 and quantised to 2²² levels), the number of clients summed, who they were and each one's
N_i (already known from registration). A client checks its own model before sending: a non-finite one is not
sent (the server could not tell it from the others once masked).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedgca import devices
from fedgca.algorithms.base import SUMMED, ClientWork, Reply, Step, implements
from fedgca.algorithms.sharing import MODEL, ParameterSharing, all_finite
from fedgca.protocol import secagg


class SecureSum:
    """What a summed step needs of its method: SecAgg+'s settings (``secagg``, W = the largest weight a client
    can have), the simulator's sum of the replies, and no check of a reply the server never sees."""

    server_learns: tuple[str, ...] = ()  # summary.json: what the server learns per round besides the sums' number

    def secure_settings(self, max_weight: float) -> None:
        self.secagg = secagg.SecAggSettings(max_weight=float(max_weight))

    def summed_reply(self, r: int, replies: dict[int, Reply]) -> Reply:
        """The simulator's sum: what SecAgg+ returns for these clients' replies (``protocol.secagg``)."""
        ids = sorted(replies)
        keys = list(replies[ids[0]].arrays)
        mean = secagg.secure_mean([[devices.as_numpy(replies[i].arrays[k]) for k in keys] for i in ids],
                                  [replies[i].metrics["num-examples"] for i in ids],
                                  [secagg.rounding_seed(self.cfg.seed, r, i) for i in ids], self.secagg)
        return Reply(dict(zip(keys, mean)), {"summed": ids})

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        if step.summed:
            return reply  # the server sees no client's reply: each client checked its own
        return super().check(step, reply, num_examples, latent_dim)

    def summary_extra(self) -> dict:
        s = self.secagg
        return {**super().summary_extra(), "secure_aggregation": {
            "protocol": "SecAgg+ (Flower: secaggplus_mod on the clients, SecAggPlusWorkflow on the server)",
            "server_learns_per_round": [*self.server_learns,
                                        "how many clients were summed, and which (comm.json: accepted)",
                                        "each summed client's weight (its N_i or code count, known from "
                                        "registration)"],
            **dataclasses.asdict(s)}}


@implements("secagg-fedavg", "secagg-fedprox")
class SecureParameterSharing(SecureSum, ParameterSharing):
    steps = (Step("train", sends=MODEL, reply=MODEL, metrics=True, summed=True),)
    server_learns = ("the weighted mean of the summed clients' models (weights: quantised N_i)",)

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.secure_settings(max(self.sizes))  # W: every q_i ≤ T

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        replies = super().client(step, r, work, received)
        return {slot: rep for slot, rep in replies.items() if all_finite(rep.arrays.values())}

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        mean = replies[SUMMED].arrays
        self.global_params = {k: torch.as_tensor(np.asarray(mean[k], dtype=np.float32), device=v.device)
                              for k, v in self.global_params.items()}
        # the most the server holds of any summed client: the mean (SPEC §6's white-box attack starts from it)
        for k, v in self.global_params.items():
            self.last_upload[k][:] = v
        self.last_upload_round = [r] * len(self.last_upload_round)
