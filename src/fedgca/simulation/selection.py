"""The simulator's per-client model choice (``--selection client-*``, issue #47): each client deploys the model —
untrained (round 0) or after some round — that a label-free signal of ``fedgca.evaluation.signals`` rates best;
or (``--selection ensemble-rounds``, ``RoundsEnsemble``) the standardised mean of all of them.

Each candidate is measured when it exists (before round 1, after each round); only each client's best model so far
is kept (one copy of the stack), so a run never holds R models. Where every client deploys one shared model (a
parameter-sharing method, Centralized) the federation chooses one candidate by the mean of the clients' values.
What a client reveals for it: one scalar per candidate (its signal value), the same a Flower client would report.
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import devices
from fedgca.evaluation import signals
from fedgca.evaluation.metrics import shard_scores, shared_scores


class ClientSelection:
    """The choice among the candidates measured so far; ``observe(j)`` measures the models after j rounds."""

    def __init__(self, cfg, deployed, shared: bool):
        self.cfg, self.deployed, self.shared = cfg, deployed, shared
        self.signal = signals.signal_of(cfg.selection)
        self.history: list[list[float]] = []  # [candidate][client]
        self.best: dict[str, torch.Tensor] | None = None  # each slot's best model so far
        self._fakes: list[torch.Tensor] | None = None

    def _anomalies(self) -> list[torch.Tensor]:
        """Each client's synthetic anomalies (drawn once; from its validation rows alone)."""
        if self._fakes is None:
            val = self.deployed.val_shards
            kind = signals.generator_of(self.signal)
            self._fakes = [torch.as_tensor(signals.client_anomalies(devices.to_numpy(val.client(i)), kind,
                                                                    self.cfg.seed, i),
                                           dtype=torch.float32, device=val.device)
                           for i in range(val.num_clients)]
        return self._fakes

    def measure(self) -> list[float]:
        """The signal of each client's deployed model, from its validation rows (and their synthetic anomalies)."""
        models, val = self.deployed.clients, self.deployed.val_shards
        scores = shard_scores(models, val)
        if self.signal == "val-error":
            return [float(s.mean()) for s in scores]
        fakes = self._anomalies()
        return [signals.proxy_auroc(scores[i], devices.to_numpy(shared_scores(models.slot_view(i), fakes[i]))[0])
                for i in range(val.num_clients)]

    def chosen(self) -> np.ndarray:
        return signals.choose(np.array(self.history), self.signal, self.shared)

    @torch.no_grad()
    def observe(self, candidate: int) -> None:
        """Measure the models after ``candidate`` rounds; keep them for the clients whose choice they now are."""
        assert candidate == len(self.history), "candidates are observed in order"
        self.history.append(self.measure())
        params = self.deployed.clients.params
        if self.best is None:
            self.best = {k: v.detach().clone() for k, v in params.items()}
            return
        now = torch.as_tensor(self.chosen() == candidate)
        if bool(now.any()):
            for k, v in params.items():
                self.best[k][now.to(v.device)] = v[now.to(v.device)]

    @torch.no_grad()
    def apply(self) -> list[int]:
        """Put each client's chosen model in its slot; returns the rounds chosen (0 = untrained)."""
        for k, v in self.deployed.clients.params.items():
            v.copy_(self.best[k])
        return [int(j) for j in self.chosen()]

    def record(self) -> dict:
        """summary.json's ``selection``: the rule, every candidate's values, each client's choice."""
        chosen = [int(j) for j in self.chosen()]
        return {
            "rule": self.cfg.selection, "signal": self.signal,
            "better": "higher" if signals.higher_is_better(self.signal) else "lower",
            "scope": "federation (one shared model: the mean over clients)" if self.shared else "per client",
            "client_rounds": chosen,
            "untrained_share": float(np.mean(np.array(chosen) == 0)),
            "values": [[float(v) for v in row] for row in self.history],  # [candidate round][client]
            "revealed": "one scalar per client per candidate (its signal value); no row, score or model",
        }

    def selected_fields(self) -> dict:
        """summary.json's ``selected``: ``round`` the round most clients chose, ``client_rounds`` each one's."""
        rounds = [int(j) for j in self.chosen()]
        return {"round": max(sorted(set(rounds)), key=rounds.count), "client_rounds": rounds,
                "rule": f"each client's model (untrained or a round's) with the best {self.signal} on its validation "
                        f"rows ({'higher' if signals.higher_is_better(self.signal) else 'lower'} is better; "
                        f"{'one choice for the shared model' if self.shared else 'per client'})"}

    def state_dict(self) -> dict:
        return {"history": [list(map(float, h)) for h in self.history],
                "best": {k: v.detach().clone() for k, v in (self.best or {}).items()}}

    def load_state_dict(self, state: dict) -> None:
        self.history = [list(map(float, h)) for h in state["history"]]
        self.best = {k: v.clone() for k, v in state["best"].items()} or None


class RoundsEnsemble:
    """``--selection ensemble-rounds``: every candidate's models (the untrained ones and each round's) and each
    client's standardisation of them (mean and std of the model's scores on the client's validation rows); at the
    end each client deploys their standardised mean. Holds R + 1 copies of the stack (small for SPEC's MLP)."""

    def __init__(self, cfg, deployed):
        self.cfg, self.deployed = cfg, deployed
        self.members: list[tuple[dict, list]] = []  # per candidate: (stacked params, per-client (mean, std))

    @torch.no_grad()
    def observe(self, candidate: int) -> None:
        assert candidate == len(self.members), "candidates are observed in order"
        scores = shard_scores(self.deployed.clients, self.deployed.val_shards)
        self.members.append(({k: v.detach().clone() for k, v in self.deployed.clients.params.items()},
                             [signals.standardisation(s) for s in scores]))

    def record(self) -> dict:
        return {"rule": self.cfg.selection, "members": len(self.members),
                "standardise": [[list(s) for s in stats] for _, stats in self.members],  # [candidate][client]
                "revealed": "nothing: every member and its standardisation stay on the client"}

    def selected_fields(self) -> dict:
        return {"round": len(self.members) - 1,
                "rule": f"each client's standardised mean of its {len(self.members)} models (the untrained one and "
                        "every round's; each model's scores standardised on the client's validation rows)"}

    def state_dict(self) -> dict:
        return {"members": [{"params": p, "standardise": [list(s) for s in st]} for p, st in self.members]}

    def load_state_dict(self, state: dict) -> None:
        self.members = [({k: v.clone() for k, v in m["params"].items()},
                         [(float(a), float(b)) for a, b in m["standardise"]]) for m in state["members"]]
