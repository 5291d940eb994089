"""The six baselines of SPEC §2 in the stacked simulator.

All share one local-training routine (``fedgca.training.local.local_training``) and differ only in
the client loss (FedProx) and the server rule (fedavg/fednova/dpfedavg
modules in ``fedgca.protocol``). Parameter-sharing clients keep their Adam
state across rounds (so that FedAvg with one client is exactly centralized
training); each round they start from the broadcast global model.
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import devices, privacy
from fedgca.devices import to_numpy
from fedgca.protocol import dpfedavg, server_rules
from fedgca.protocol.sampling import num_participants
from fedgca.simulation.base import CommRecord, EvaluateFn, SimMethod, simulates
from fedgca.training.local import client_loss_term, local_training
from fedgca.training.loop import ClientShards


def _pool(shards: ClientShards) -> ClientShards:
    """Every client's rows as one shard (the centralized reference's data)."""
    rows = np.concatenate([devices.to_numpy(shards.client(i)) for i in range(shards.num_clients)])
    return ClientShards.from_arrays([rows], device=shards.device)


@simulates("single")
class SingleClientSimulation(SimMethod):
    """Each client trains alone (R × local epochs in total); nothing is communicated."""

    def run_round(self, r, part, evaluate: EvaluateFn) -> CommRecord:
        fed = self.fed
        local_training(fed.clients, fed.shards, fed.cfg.seed, r, fed.cfg.local_epochs, part, fed.cfg.batch_size)
        return CommRecord(0, 0, 0, [int(i) for i in torch.nonzero(part).flatten()])


@simulates("centralized")
class CentralizedSimulation(SimMethod):
    """One autoencoder on the pooled training normals; a reference, not a federation."""

    def __init__(self, fed):
        super().__init__(fed)
        self.pooled = _pool(fed.shards)
        self.pooled_val = _pool(fed.val_shards) if fed.val_shards is not None else None

    def run_round(self, r, part, evaluate: EvaluateFn) -> CommRecord:
        fed = self.fed
        local_training(fed.clients, self.pooled, fed.cfg.seed, r, fed.cfg.local_epochs,
                        torch.ones(1, dtype=torch.bool, device="cpu"), fed.cfg.batch_size)
        return CommRecord(0, 0, 0, [0])

    def deployed_shards(self) -> ClientShards:
        return self.pooled  # threshold on all training data (SPEC §5)

    def deployed_val_shards(self) -> ClientShards | None:
        return self.pooled_val  # its validation error and --threshold val-quantile: all validation rows


@simulates("fedavg", "fedprox", "fednova", "dpsgd-fedavg")
class FedAvgSimulation(SimMethod):
    """Clients start each round from the global model, train locally, upload parameters.

    FedAvg, FedProx and FedNova: the method's client term (``training.local.client_loss_term``) and
    server rule (``protocol.server_rules``) are looked up by name, as the Flower apps do.
    """

    deploys_one_model = True

    def __init__(self, fed):
        super().__init__(fed)
        self.global_params = fed.clients.client_state_dict(0)  # θ^(0): one model for everyone
        fed.clients.set_all(self.global_params)
        # What the server last received from each client (its locally trained θ_i, and the round):
        # the white-box attack of SPEC §6 starts from the victim's round-R upload.
        self.last_upload = {k: torch.zeros_like(v.detach()) for k, v in fed.clients.params.items()}
        self.last_upload_round = [-1] * fed.num_clients
        self.clip_norms: list[list[float]] = []  # per round, the update norms a clipping server rule saw
        self.dp = privacy.resolve(fed.cfg, fed.shards.sizes)  # DP-SGD-FedAvg: DP-SGD local training

    def run_round(self, r, part, evaluate: EvaluateFn) -> CommRecord:
        fed, cfg = self.fed, self.fed.cfg
        fed.clients.set_all(self.global_params, part)  # download θ^(r)
        if cfg.optimizer_state == "reset":  # a fresh Adam (and StepLR) per round, as most FL code does
            fed.clients.optim.reset(part)
        # diagnostic: the clients' local models after every local epoch (where along local training the
        # paper's figures may have been taken: issue #33)
        after = (lambda e: evaluate("local-epoch", e)) if cfg.eval_local_epochs else None
        local_training(fed.clients, fed.shards, cfg.seed, r, cfg.local_epochs, part, cfg.batch_size,
                       client_loss_term(cfg, fed.clients, self.global_params), dp=self.dp, after_epoch=after)
        if cfg.baseline_eval == "local":  # each client's own model after local training, before aggregation
            evaluate("local", -1)
        idx = torch.nonzero(part).flatten()
        uploads = {k: v.detach()[idx].clone() for k, v in fed.clients.params.items()}  # what each client sends
        for k, v in uploads.items():
            self.last_upload[k][idx] = v
        for i in idx.tolist():
            self.last_upload_round[i] = r
        sizes = fed.shards.sizes[to_numpy(idx)]
        self.global_params, norms = server_rules.aggregate(cfg.spec.server_rule, r, self.global_params, uploads, sizes,
                                                           server_rules.RuleOptions.of(cfg))
        if norms is not None:  # DP-FedAvg: how often updates were clipped
            self.clip_norms.append(norms.tolist())
        fed.clients.set_all(self.global_params)  # every client evaluates/deploys the global model
        model_bytes = sum(v.nbytes for v in self.global_params.values())
        return CommRecord(
            bytes_up=sum(v.nbytes for v in uploads.values()),
            bytes_down=len(idx) * model_bytes,
            uploads=len(idx),
            participants=[int(i) for i in idx],
        )

    def state_dict(self) -> dict:
        return {"global": self.global_params, "last_upload": self.last_upload,
                "last_upload_round": self.last_upload_round}

    def load_state_dict(self, state: dict) -> None:
        self.global_params = state["global"]
        if "last_upload" in state:
            self.last_upload, self.last_upload_round = state["last_upload"], state["last_upload_round"]


@simulates("dpfedavg")
class DPFedAvgSimulation(FedAvgSimulation):
    """FedAvg with DP-FedAvg's server rule; it also reports the accounting and how often updates were clipped."""

    def summary_extra(self) -> dict:
        cfg = self.fed.cfg
        return {"dp": dpfedavg.accounting_record(
            sigma=cfg.dp_sigma, clip=cfg.dp_clip, delta=cfg.dp_delta, rounds=cfg.rounds, clients=cfg.clients,
            participants=num_participants(cfg.participation, cfg.clients), clip_norms=self.clip_norms)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "clip_norms": self.clip_norms}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.clip_norms = state.get("clip_norms", [])
