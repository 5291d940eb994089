"""Secure aggregation: what a method whose server learns only sums adds to it (``SecureSum``), and FedAvg and
FedProx over it (Flower's SecAgg+: ``secaggplus_mod`` on the clients, ``SecAggPlusWorkflow`` on the server).

A summed step's replies reach the server only as sums over the clients, in the parts of a vector the method lays out
(``summed_layout``, ``protocol.secagg``): the simulator sums the clients' vectors itself (``summed_reply``), the
Flower ServerApp receives the sum from the protocol; both read it with ``read_sums``, which refuses a sum of fewer
than two contributions the same way (the server keeps its model). The parameter-sharing client step is FedAvg's
(FedProx's proximal term included). What the server learns per round: the mean model Σ q_i·θ_i / Σ q_i (q_i the
quantised N_i / max N, values clipped to ±8 and quantised to 2³⁰ levels) and how many clients it is over. A client
checks its own model before sending: a non-finite one is sent as absent (the server cannot tell which).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from fedgca.algorithms import secure_rounds
from fedgca.algorithms.base import SUMMED, Reply, Step, implements
from fedgca.algorithms.sharing import MODEL, ParameterSharing, all_finite
from fedgca.devices import as_numpy
from fedgca.protocol import secagg
from fedgca.protocol.sampling import num_participants
from fedgca.protocol.secagg import Contribution, Part

log = logging.getLogger("fedgca")

TWO_CLIENTS = ("a secure run of 2 clients: each client learns the other's model (or statistics) from the sum and its "
               "own; secure aggregation hides a client only among 3 or more")


class SecureSum:
    """What a summed step needs of its method: SecAgg+'s settings (``secagg``), the weight scale W (the largest
    weight a client can have), the vector layout of each summed step, and how a reply becomes parts and the sums a
    reply again. The server never checks a reply it never sees: each client checked its own."""

    secagg = secagg.SecAggSettings()
    summed_parts: dict[str, str] = {}  # each part of a summed step's vector: what its sum tells the server

    def secure_settings(self, max_weight: float) -> None:
        self.weight_scale = float(max_weight)

    # ------------------------------------------------------------------ the vector

    def summed_layout(self, step: Step, r: int) -> secagg.Layout:
        """The parts of a summed step's vector (the server sends it; the client fills it)."""
        raise NotImplementedError

    def contributions(self, step: Step, reply: Reply) -> dict[str, Contribution]:
        """A client's reply as the parts of the step's vector."""
        raise NotImplementedError

    def from_sums(self, step: Step, parts: dict[str, secagg.Summed]) -> dict:
        """The reply arrays the method aggregates, from the sums of the step's parts."""
        raise NotImplementedError

    def read_sums(self, step: Step, r: int, parts: dict[str, secagg.Summed]) -> Reply | None:
        """The step's summed reply, or None (one warning line) when the sum may not be used."""
        count = min(parts[p.name].count for p in self.summed_layout(step, r))
        why = secagg.refusal(count)
        if why is not None:
            log.warning("round %d %s: secure aggregation refused: %s; the server keeps its state", r + 1, step.name,
                        why)
            return None
        return Reply(self.from_sums(step, parts), {"summed": count})

    def summed_reply(self, step: Step, r: int, replies: dict[int, Reply]) -> Reply | None:
        """The simulator's sum of these clients' replies (keys: client ids), read as the Flower server reads it."""
        ids = sorted(replies)
        layout = self.summed_layout(step, r)
        parts = secagg.secure_sum(layout, [self.contributions(step, replies[i]) for i in ids],
                                  [secagg.rounding(self.cfg.seed, r, i) for i in ids], self.secagg)
        return self.read_sums(step, r, parts)

    # ------------------------------------------------------------------ both drivers

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        if step.summed:
            return reply  # the server sees no client's reply: each client checked its own
        return super().check(step, reply, num_examples, latent_dim)

    def size_note(self, sizes) -> str | None:
        if num_participants(self.cfg.participation, len(sizes)) < 2:
            raise ValueError(f"method {self.cfg.method!r} sums over clients: every round needs 2 or more "
                             f"(--clients {len(sizes)}, --participation {self.cfg.participation:g})")
        secagg.check_capacity(len(sizes), self.secagg)
        notes = [n for n in (super().size_note(sizes), TWO_CLIENTS if len(sizes) == 2 else None) if n]
        return "; ".join(notes) or None

    def summary_extra(self) -> dict:
        return {**super().summary_extra(), "secure_aggregation": {
            "protocol": "SecAgg+ (Flower: secaggplus_mod on the clients, SecAggPlusWorkflow on the server), masks "
                        "from fedgca's generator (protocol.masks)",
            "server_learns": secure_rounds.server_learns(self, self.cfg),
            **self.secagg.flower()}}


@implements("secagg-fedavg", "secagg-fedprox")
class SecureParameterSharing(SecureSum, ParameterSharing):
    steps = (Step("train", sends=MODEL, reply=MODEL, metrics=True, summed=True),)
    summed_parts = {"model": "the weighted mean of the contributing clients' models (weights: quantised N_i / max "
                             "N) and how many contributed"}

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.secure_settings(max(self.sizes))  # W: every q_i ≤ T

    def summed_layout(self, step: Step, r: int) -> secagg.Layout:
        """One weighted part: the model's arrays flattened in the global model's order (the server's side)."""
        return (Part("model", int(sum(v.numel() for v in self.global_params.values())), weighted=True),)

    def contributions(self, step: Step, reply: Reply) -> dict[str, Contribution]:
        # the reply's arrays are in the global model's order (its check on the plain methods; the same step)
        if not all_finite(reply.arrays.values()):
            return {}  # a client checks what it sends: a non-finite model is not sent
        x = np.concatenate([np.asarray(as_numpy(a), dtype=np.float64).ravel() for a in reply.arrays.values()])
        return {"model": Contribution(x, reply.metrics["num-examples"] / self.weight_scale)}

    def from_sums(self, step: Step, parts: dict[str, secagg.Summed]) -> dict:
        flat, out, at = parts["model"].mean, {}, 0
        for k, v in self.global_params.items():
            out[k] = flat[at:at + v.numel()].reshape(tuple(v.shape))
            at += v.numel()
        return out

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        mean = replies[SUMMED].arrays
        self.global_params = {k: torch.as_tensor(np.asarray(mean[k], dtype=np.float32), device=v.device)
                              for k, v in self.global_params.items()}
        # the most the server holds of any summed client: the mean (SPEC §6's white-box attack starts from it)
        for k, v in self.global_params.items():
            self.last_upload[k][:] = v
        self.last_upload_round = [r] * len(self.last_upload_round)
