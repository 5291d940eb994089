"""Parameter sharing (SPEC §2): FedAvg, FedProx, FedNova, DP-FedAvg and DP-SGD-FedAvg, one round.

The server sends θ^(r); each client loads it, trains its local epochs (FedProx adds its proximal term, DP-SGD-
FedAvg trains with DP-SGD) and replies with its model, its N_i and its local steps τ_i; the server folds the
accepted models into θ^(r+1) by the method's rule (``protocol.server_rules``: FedAvg, FedNova, DP-FedAvg with
its seeded noise). Clients keep their Adam state across rounds (so that FedAvg with one client is exactly
centralized training); every client deploys θ^(r+1).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedgca import privacy
from fedgca.algorithms.base import ClientWork, FederatedMethod, Reply, Step, implements
from fedgca.protocol import dpfedavg, fednova, server_rules
from fedgca.protocol.fedavg import Params
from fedgca.protocol.gca import UploadError
from fedgca.protocol.sampling import num_participants
from fedgca.training.local import client_loss_term, local_training

MODEL = "arrays"  # Flower strategies' name for a model's ArrayRecord


def all_finite(arrays) -> bool:
    """Every value of every array finite, in one reduction per array and one synchronisation: a NaN or ±inf
    anywhere makes an array's float64 sum non-finite (this runs on every reply of every round)."""
    arrays = list(arrays)
    if all(isinstance(a, torch.Tensor) for a in arrays):
        return bool(torch.isfinite(torch.stack([a.sum(dtype=torch.float64) for a in arrays])).all())
    return bool(np.isfinite([np.sum(np.asarray(a), dtype=np.float64) for a in arrays]).all())


@implements("fedavg", "fedprox", "fednova", "dpsgd-fedavg", "dpfedavg")
class ParameterSharing(FederatedMethod):
    steps = (Step("train", sends=MODEL, reply=MODEL, metrics=True),)
    deploys_global = True

    def __init__(self, cfg, kind, sizes):
        super().__init__(cfg, kind, sizes)
        self.dp = privacy.resolve(cfg, self.sizes)  # DP-SGD-FedAvg: DP-SGD local training
        self.global_params: Params = {}
        self.clip_norms: list[list[float]] = []  # per round, the update norms a clipping server rule saw

    def evaluation_points(self) -> list[tuple[str, int]]:
        return [("local-epoch", self.cfg.local_epochs)] if self.cfg.eval_local_epochs else []

    # ------------------------------------------------------------------ client

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        cfg, models = work.cfg, work.models
        global_params = {k: torch.as_tensor(v, device=models.device) for k, v in received.items()}
        models.set_all(global_params, work.part)  # download θ^(r)
        if cfg.optimizer_state == "reset":  # a fresh Adam (and StepLR) per round, as most FL code does
            models.optim.reset(work.part)
        # diagnostic: the clients' local models after every local epoch (issue #33)
        after = (lambda e: work.evaluate("local-epoch", e)) if cfg.eval_local_epochs else None
        local_training(models, work.shards, cfg.seed, r, cfg.local_epochs, work.part, cfg.batch_size,
                       client_loss_term(cfg, models, global_params), client_ids=work.ids, dp=self.dp,
                       after_epoch=after)
        if cfg.baseline_eval == "local":  # each client's own model after local training, before aggregation
            work.evaluate("local", -1)
        sizes = work.shards.sizes
        tau = fednova.local_steps([int(n) for n in sizes], cfg.local_epochs, cfg.batch_size)
        return {slot: Reply({k: v.detach()[slot] for k, v in models.params.items()},
                            {"num-examples": int(sizes[slot]), "local-steps": float(tau[slot])})
                for slot in work.slots}

    # ------------------------------------------------------------------ server

    def start(self, initial: dict, num_clients: int) -> None:
        self.global_params = {k: v.detach().clone() for k, v in initial.items()}  # θ^(0): one model for everyone
        # What the server last received from each client (its locally trained θ_i, and the round): the
        # white-box attack of SPEC §6 starts from the victim's round-R upload.
        self.last_upload = {k: torch.zeros((num_clients, *v.shape), dtype=v.dtype, device=v.device)
                            for k, v in self.global_params.items()}
        self.last_upload_round = [-1] * num_clients

    def send(self, step: Step, r: int) -> dict:
        return self.global_params

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        if list(reply.arrays) != list(self.global_params):
            raise UploadError("model tensors differ in names from the global model")
        for k, a in reply.arrays.items():
            ref = self.global_params[k]
            dtype = str(a.dtype).removeprefix("torch.")
            if tuple(a.shape) != tuple(ref.shape) or dtype != str(ref.dtype).removeprefix("torch."):
                raise UploadError(f"tensor {k!r} is {dtype}{list(a.shape)}, expected "
                                  f"{str(ref.dtype).removeprefix('torch.')}{list(ref.shape)}")
        if not all_finite(reply.arrays.values()):
            bad = next(k for k, a in reply.arrays.items() if not all_finite([a]))
            raise UploadError(f"tensor {bad!r} contains NaN or inf")
        if reply.metrics.get("num-examples") != num_examples:
            raise UploadError(f"num-examples {reply.metrics.get('num-examples')} ≠ the {num_examples} rows the "
                              "client registered")
        tau = reply.metrics.get("local-steps")
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
            raise UploadError(f"local-steps must be a positive number, got {tau!r}")
        return reply

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        ids = sorted(replies)
        device = next(iter(self.global_params.values())).device
        stacked = {k: torch.stack([torch.as_tensor(replies[i].arrays[k], device=device) for i in ids])
                   for k in self.global_params}
        for k, v in stacked.items():
            self.last_upload[k][ids] = v
        for i in ids:
            self.last_upload_round[i] = r
        sizes = [int(replies[i].metrics["num-examples"]) for i in ids]
        tau = torch.tensor([float(replies[i].metrics["local-steps"]) for i in ids], dtype=torch.float64,
                           device="cpu")  # the clients' reports (an honest client's: E·⌈N_i/B⌉)
        self.global_params, norms = server_rules.aggregate(self.cfg.spec.server_rule, r, self.global_params,
                                                           stacked, sizes, server_rules.RuleOptions.of(self.cfg), tau)
        if norms is not None:  # DP-FedAvg: how often updates were clipped
            self.clip_norms.append(norms.tolist())

    def deployed(self) -> Params:
        return self.global_params

    def summary_extra(self) -> dict:
        cfg, spec = self.cfg, self.cfg.spec
        extra = {}
        if spec.server_rule == "dpfedavg":
            extra["dp"] = dpfedavg.accounting_record(
                sigma=cfg.dp_sigma, clip=cfg.dp_clip, delta=cfg.dp_delta, rounds=cfg.rounds, clients=cfg.clients,
                participants=num_participants(cfg.participation, cfg.clients), clip_norms=self.clip_norms)
        if spec.client_term == "proximal":
            extra["fedprox"] = {"mu": cfg.fedprox_mu, "effective_coef": cfg.fedprox_coef,
                                "relation": "c = μ / (2B) (fedgca.protocol.fedprox); the client adds c·||θ − θ^(r)||²"}
        return extra

    def state_dict(self) -> dict:
        return {"global": self.global_params, "last_upload": self.last_upload,
                "last_upload_round": self.last_upload_round, "clip_norms": self.clip_norms}

    def load_state_dict(self, state: dict) -> None:
        self.global_params = state["global"]
        if "last_upload" in state:
            self.last_upload, self.last_upload_round = state["last_upload"], state["last_upload_round"]
        self.clip_norms = state.get("clip_norms", [])
