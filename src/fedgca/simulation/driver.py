"""The simulator's driver of a method (``fedgca.algorithms``): every client of a round stacked in one process.

It runs the method's steps as the Flower ServerApp does over messages — the first step for the sampled
clients, each later one for those whose reply was accepted, each reply checked by the method — and keeps
what only the simulator has: all clients' models in one stack (``Federation.clients``), the pooled rows of a
``pooled`` method (Centralized), the comm record measured from the payloads built, the evaluation of the
deployed models at every point the method names (a metric row over all clients), and the models of the round
the validation rule selects (the detectors a run saves).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from fedgca import devices, runrecord
from fedgca.algorithms import ClientWork, FederatedMethod, method_for
from fedgca.config import ABLATION_CLIENT
from fedgca.evaluation.metrics import evaluate_clients, shard_scores
from fedgca.evaluation.selection import validation_selected
from fedgca.protocol.gca import UploadError
from fedgca.training.loop import ClientShards

log = logging.getLogger("fedgca")


def _pool(shards: ClientShards) -> ClientShards:
    """Every client's rows as one shard (the centralized reference's data)."""
    rows = np.concatenate([devices.to_numpy(shards.client(i)) for i in range(shards.num_clients)])
    return ClientShards.from_arrays([rows], device=shards.device)


def _nbytes(arrays: dict) -> int:
    return int(sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays.values()))


class SimulatedMethod:
    """One run's method over a ``Federation``: ``run_round`` trains the round's clients and calls
    ``evaluate(phase, epoch)`` where the method evaluates; the runner adds the end-of-round evaluation."""

    def __init__(self, fed, method: FederatedMethod | None = None):
        self.fed = fed
        self.pooled = fed.cfg.spec.pooled
        # a pooled method trains one model on every client's rows; its τ and validation error on all of them
        self.shards = _pool(fed.shards) if self.pooled else fed.shards
        self.val_shards = (_pool(fed.val_shards) if self.pooled and fed.val_shards is not None else fed.val_shards)
        self.selected = _Selection(fed.val_shards is not None)
        self.method = method or method_for(fed.cfg, fed.dataset.kind, fed.shards.sizes)
        self.size_note = self.method.size_note(fed.shards.sizes)  # before any file: it may refuse the run
        self.method.start(fed.clients.client_state_dict(0), fed.num_clients)
        if self.method.deploys_global:
            fed.clients.set_all(self.method.deployed())

    def play_round(self, r: int, rows: list[dict], progress=None) -> dict:
        """Round ``r`` with its evaluations appended to ``rows`` (``progress(r, phase, epoch)`` told of each);
        the selected round's models kept; returns the round's comm.json record."""

        def evaluate(phase: str, epoch: int) -> None:
            rows.append(self.evaluate(r, phase, epoch))
            if progress is not None:
                progress(r, phase, epoch)

        record = self.run_round(r, self.fed.participants(r), evaluate)
        evaluate("round", -1)
        self.selected.offer(r, rows, self.deployed_clients())
        return {"round": r, **record}

    @property
    def deploys_one_model(self) -> bool:
        """After a round every slot holds the same model: the test set is scored once."""
        return self.method.deploys_global

    def run_round(self, r: int, part: torch.Tensor, evaluate) -> dict:
        """One round; returns its comm.json record (bytes and uploads measured from what was built)."""
        fed, method = self.fed, self.method
        if self.pooled:
            part = torch.ones(1, dtype=torch.bool, device="cpu")
        ids = list(range(self.shards.num_clients))
        targets = part.clone()
        record = {"bytes_up": 0, "bytes_down": 0, "uploads": 0}
        for step in method.steps:
            sent = method.send(step, r)
            if sent is not None:
                record["bytes_down"] += int(targets.sum()) * _nbytes(sent)
            work = ClientWork(fed.cfg, fed.clients, self.shards, targets, ids, evaluate)
            accepted = {}
            for slot, reply in method.client(step, r, work, sent).items():
                try:
                    accepted[slot] = method.check(step, reply, int(self.shards.sizes[slot]), fed.latent_dim)
                except UploadError as e:  # a client's own computation can diverge (NaN): rejected, as on Flower
                    log.warning("round %d %s: rejected the reply of client %d: %s", r + 1, step.name, slot, e)
            record["bytes_up"] += sum(_nbytes(a.arrays) for a in accepted.values())
            record["uploads"] += method.uploads(step, accepted)
            if not accepted:
                log.warning("round %d %s: no valid reply; the rest of the round is skipped", r + 1, step.name)
                break
            method.aggregate(step, r, accepted)
            targets = torch.zeros_like(targets)
            targets[sorted(accepted)] = True
        if method.deploys_global:
            fed.clients.set_all(method.deployed())  # every client evaluates/deploys the server's model
        return {**record, "participants": [int(i) for i in torch.nonzero(part).flatten()], **method.round_record()}

    def deployed_clients(self):
        """The stacked models each client deploys (its own, or the server's model per client)."""
        return self.fed.clients

    def deployed_shards(self) -> ClientShards:
        return self.shards  # a pooled method: τ on all training rows (SPEC §5)

    def deployed_val_shards(self) -> ClientShards | None:
        return self.val_shards

    def evaluate(self, r: int, phase: str, epoch: int) -> dict:
        """A metric row: every client's deployed model (SPEC §5), τ on its training or validation rows."""
        fed = self.fed
        clients, shards, val_shards = self.deployed_clients(), self.shards, self.val_shards
        ids = None
        if phase == "align" and fed.cfg.eval_align_clients == "client0":  # the weighting ablation's client alone
            ids = [ABLATION_CLIENT]
            clients, shards = clients.slot_view(ABLATION_CLIENT), shards.only(ABLATION_CLIENT)
            val_shards = val_shards.only(ABLATION_CLIENT) if val_shards is not None else None
        val = shard_scores(clients, val_shards) if val_shards is not None else None  # scored once: τ and val_error
        tau_scores = val if fed.cfg.threshold == "val-quantile" else None
        one_model = self.deploys_one_model and phase == "round"  # "local": the pre-aggregation models differ
        if fed.client_tests is not None:  # per-site test sets: each client on its own rows, as a Flower node
            per_client = self._evaluate_own_tests(clients, shards, tau_scores, ids or range(shards.num_clients))
        else:
            res = evaluate_clients(clients, shards, fed.test_x, fed.dataset.test_y, fed.cfg.quantile, tau_scores,
                                   one_model=one_model)
            per_client = dict(res["per_client"])
        per_client["val_error"] = [float(s.mean()) for s in val] if val is not None else [float("nan")]
        return runrecord.metric_row(r, phase, epoch, per_client, paper_phase=fed.cfg.paper_phase, client_ids=ids)

    def _evaluate_own_tests(self, clients, shards, tau_scores, ids) -> dict[str, list]:
        """Per-client metrics, each client's model on its own test rows: the computation a Flower node makes
        (``fedgca.flower.client_app._metrics``) for each slot, so both drivers write the same metrics.csv."""
        out: dict[str, list] = {}
        for slot, i in enumerate(ids):
            x, y = self.fed.client_tests[i]
            res = evaluate_clients(clients.slot_view(slot), shards.only(slot), x, y, self.fed.cfg.quantile,
                                   None if tau_scores is None else [tau_scores[slot]])
            for k, v in res["per_client"].items():
                out.setdefault(k, []).append(v[0])
        return out

    def deploy_selected(self) -> int:
        """Load the selected round's models into the deployed stack (the run is over); that round, 1-based."""
        return self.selected.deploy(self.deployed_clients(), self.fed.cfg.rounds)

    def summary_extra(self) -> dict:
        return self.method.summary_extra()

    def checkpoint(self) -> dict:
        """What a checkpoint keeps of the run's models: the clients', the method's server state, the selection."""
        return {"clients": self.fed.clients.state_dict(), "method": self.method.state_dict(),
                "selected": self.selected.state_dict()}

    def restore(self, ckpt: dict) -> None:
        self.fed.clients.load_state_dict(ckpt["clients"])
        self.method.load_state_dict(ckpt["method"])
        self.selected.load_state_dict(ckpt.get("selected"))


class _Selection:
    """The deployed models of the round a run selects without test labels (``evaluation.selection``'s rule),
    kept so that the saved detectors are the selected ones. Without a validation split the final round is the
    selected one and nothing is kept."""

    def __init__(self, active: bool):
        self.active, self.round, self.params = active, None, None

    def offer(self, r: int, rows: list[dict], deployed) -> None:
        """After round ``r``'s evaluation: keep its models if the rule now selects it."""
        if self.active and validation_selected(rows)["round"] == r + 1:
            self.round = r
            self.params = {k: v.detach().clone() for k, v in deployed.params.items()}

    def deploy(self, deployed, rounds: int) -> int:
        """Load the selected round's parameters into ``deployed`` (the run is over); returns that round (1-based)."""
        if self.params is None or self.round == rounds - 1:
            return rounds
        with torch.no_grad():
            for k, v in deployed.params.items():
                v.copy_(self.params[k])
        return self.round + 1

    def state_dict(self) -> dict:
        return {} if self.params is None else {"round": self.round, "params": self.params}

    def load_state_dict(self, state) -> None:
        if state:
            self.round, self.params = int(state["round"]), dict(state["params"])
