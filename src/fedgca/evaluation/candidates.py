"""The candidate models a client chooses among (``--selection``, issue #47): each client deploys the model —
untrained (round 0) or after some round — that a label-free signal of ``fedgca.evaluation.signals`` rates best
(``ClientSelection``); or (``--selection ensemble-rounds``, ``RoundsEnsemble``) the standardised mean of all of them.

Both drivers keep them with these classes: the simulator over its stack of every client, a Flower client over its
own one-model stack (``fedgca.flower.client_app``), with ``client_ids`` naming whose synthetic anomalies a slot draws.
Each candidate is measured when it exists (before round 1, after each round); only each client's best model so far
is kept (one copy of the stack), so a run never holds R models. Where every client deploys one shared model (a
parameter-sharing method, Centralized) the federation chooses one candidate by the mean of the clients' values: on
Flower the server does (``choice_record`` and ``choice_fields`` read only the values the clients report).
What a client reveals for it: one scalar per candidate (its signal value).
"""
from __future__ import annotations

import numpy as np
import torch

from fedgca import devices
from fedgca.evaluation import signals
from fedgca.evaluation.metrics import detection_metrics, shard_scores, shared_scores
from fedgca.evaluation.selection import DETECTION
from fedgca.protocol import secagg


class ClientSelection:
    """The choice among the candidates measured so far; ``observe(j)`` measures the models after j rounds."""

    def __init__(self, cfg, clients, val_shards, shared: bool, client_ids: list[int] | None = None,
                 summed: bool = False):
        """``clients``: the deployed models (a stack, changed in place round by round); ``val_shards``: each
        client's validation rows; ``client_ids``: whose synthetic anomalies each slot draws (default: its index);
        ``summed`` (a secure method's federation over a shared model): the choice is made from each candidate's
        secure mean over the clients (``summed_mean``), all a secure server learns of the values."""
        self.cfg, self.clients, self.val_shards, self.shared = cfg, clients, val_shards, shared
        self.client_ids = list(range(val_shards.num_clients)) if client_ids is None else list(client_ids)
        self.signal = signals.signal_of(cfg.selection)
        self.history: list[list[float]] = []  # [candidate][client]
        self.means: list[float] | None = [] if summed and shared else None  # [candidate]: the secure means
        self.best: dict[str, torch.Tensor] | None = None  # each slot's best model so far
        self._fakes: list[torch.Tensor] | None = None

    def _anomalies(self) -> list[torch.Tensor]:
        """Each client's synthetic anomalies (drawn once; from its validation rows alone)."""
        if self._fakes is None:
            val = self.val_shards
            kind = signals.generator_of(self.signal)
            self._fakes = [torch.as_tensor(signals.client_anomalies(devices.to_numpy(val.client(i)), kind,
                                                                    self.cfg.seed, cid),
                                           dtype=torch.float32, device=val.device)
                           for i, cid in enumerate(self.client_ids)]
        return self._fakes

    def measure(self) -> list[float]:
        """The signal of each client's deployed model, from its validation rows (and their synthetic anomalies)."""
        models, val = self.clients, self.val_shards
        scores = shard_scores(models, val)
        if self.signal == "val-error":
            return [float(s.mean()) for s in scores]
        fakes = self._anomalies()
        return [signals.proxy_auroc(scores[i], devices.to_numpy(shared_scores(models.slot_view(i), fakes[i]))[0])
                for i in range(val.num_clients)]

    def chosen(self) -> list[int]:
        if self.means is not None:
            return [summed_choice(self.cfg.selection, self.means)] * len(self.client_ids)
        return _chosen(self.cfg.selection, self.history, self.shared)[1]

    @torch.no_grad()
    def observe(self, candidate: int) -> list[float]:
        """Measure the models after ``candidate`` rounds; keep them for the clients whose choice they now are.
        Returns the values measured. A candidate never measured (a Flower client that missed a round's
        evaluation) counts as NaN: never chosen."""
        assert candidate >= len(self.history), "candidates are observed in order"
        n = len(self.client_ids)
        self.history += [[float("nan")] * n for _ in range(candidate - len(self.history))]
        self.history.append(self.measure())
        if self.means is not None:
            self.means.append(summed_mean(self.history[-1]))
        params = self.clients.params
        if self.best is None:
            self.best = {k: v.detach().clone() for k, v in params.items()}
            return self.history[-1]
        now = torch.as_tensor([j == candidate for j in self.chosen()])
        if bool(now.any()):
            for k, v in params.items():
                self.best[k][now.to(v.device)] = v[now.to(v.device)]
        return self.history[-1]

    @torch.no_grad()
    def apply(self) -> list[int]:
        """Put each client's chosen model in its slot; returns the rounds chosen (0 = untrained)."""
        for k, v in self.clients.params.items():
            v.copy_(self.best[k])
        return self.chosen()

    def record(self) -> dict:
        if self.means is not None:
            return summed_choice_record(self.cfg.selection, means=self.means)
        return choice_record(self.cfg.selection, self.history, self.shared)

    def selected_fields(self) -> dict:
        if self.means is not None:
            return summed_choice_fields(self.cfg.selection, self.chosen()[0])
        return choice_fields(self.cfg.selection, self.history, self.shared)

    def state_dict(self) -> dict:
        return {"history": [list(map(float, h)) for h in self.history],
                "best": {k: v.detach().clone() for k, v in (self.best or {}).items()},
                **({} if self.means is None else {"means": list(self.means)})}

    def load_state_dict(self, state: dict) -> None:
        self.history = [list(map(float, h)) for h in state["history"]]
        self.best = {k: v.clone() for k, v in state["best"].items()} or None
        if self.means is not None:
            self.means = [float(v) for v in state["means"]]


def _chosen(rule: str, history, shared: bool) -> tuple[str, list[int]]:
    signal = signals.signal_of(rule)
    return signal, [int(j) for j in signals.choose(np.array(history), signal, shared)]


def choice_record(rule: str, history, shared: bool) -> dict:
    """summary.json's ``selection`` from every candidate's values ``history`` [candidate][client]: the rule, the
    values, each client's choice (what the Flower server writes from the values its clients report)."""
    signal, chosen = _chosen(rule, history, shared)
    return {
        "rule": rule, "signal": signal,
        "better": "higher" if signals.higher_is_better(signal) else "lower",
        "scope": "federation (one shared model: the mean over clients)" if shared else "per client",
        "client_rounds": chosen,
        "untrained_share": float(np.mean(np.array(chosen) == 0)),
        "values": [[float(v) for v in row] for row in history],  # [candidate round][client]
        "revealed": "one scalar per client per candidate (its signal value); no row, score or model",
    }


def choice_fields(rule: str, history, shared: bool) -> dict:
    """summary.json's ``selected``: ``round`` the round most clients chose, ``client_rounds`` each one's."""
    signal, rounds = _chosen(rule, history, shared)
    return {"round": max(sorted(set(rounds)), key=rounds.count), "client_rounds": rounds,
            "rule": f"each client's model (untrained or a round's) with the best {signal} on its validation "
                    f"rows ({'higher' if signals.higher_is_better(signal) else 'lower'} is better; "
                    f"{'one choice for the shared model' if shared else 'per client'})"}


class RoundsEnsemble:
    """``--selection ensemble-rounds``: every candidate's models (the untrained ones and each round's) and each
    client's standardisation of them (mean and std of the model's scores on the client's validation rows); at the
    end each client deploys their standardised mean. Holds R + 1 copies of the stack (small for SPEC's MLP)."""

    def __init__(self, cfg, clients, val_shards):
        self.cfg, self.clients, self.val_shards = cfg, clients, val_shards
        self.members: list[tuple[dict, list]] = []  # per candidate: (stacked params, per-client (mean, std))

    @torch.no_grad()
    def observe(self, candidate: int) -> None:
        assert candidate >= len(self.members), "candidates are observed in order"  # a Flower client may miss one
        scores = shard_scores(self.clients, self.val_shards)
        self.members.append(({k: v.detach().clone() for k, v in self.clients.params.items()},
                             [signals.standardisation(s) for s in scores]))

    def record(self) -> dict:
        return ensemble_record(self.cfg.selection, [stats for _, stats in self.members])

    def selected_fields(self) -> dict:
        return ensemble_fields(len(self.members))

    def state_dict(self) -> dict:
        return {"members": [{"params": p, "standardise": [list(s) for s in st]} for p, st in self.members]}

    def load_state_dict(self, state: dict) -> None:
        self.members = [({k: v.clone() for k, v in m["params"].items()},
                         [(float(a), float(b)) for a, b in m["standardise"]]) for m in state["members"]]


def ensemble_record(rule: str, standardise) -> dict:
    """summary.json's ``selection`` of an ensemble: ``standardise`` [candidate][client] (mean, std)."""
    return {"rule": rule, "members": len(standardise),
            "standardise": [[list(s) for s in stats] for stats in standardise],
            "revealed": "nothing to choose; each member's (mean, std) on the client's validation rows is reported "
                        "for this record only (no row, score or model)"}


def ensemble_fields(members: int) -> dict:
    return {"round": members - 1,
            "rule": f"each client's standardised mean of its {members} models (the untrained one and every "
                    "round's; each model's scores standardised on the client's validation rows)"}


def deployed_metrics(scores: np.ndarray, test_y: np.ndarray, threshold: float) -> dict:
    """A deployed detector's metrics: its scores of the test rows at its threshold."""
    res = detection_metrics(np.asarray(scores)[None, :], test_y, np.array([threshold]))
    return {m: float(res["per_client"][m][0]) for m in DETECTION}


def deployed_summary(per_client: list[dict], fields: dict, record: dict) -> dict:
    """summary.json's ``selected`` (the deployed detectors' metrics, mean over clients, and the selection's fields)
    and ``selection`` (its record), from each client's ``deployed_metrics`` in client order."""
    lists = {m: [float(c[m]) for c in per_client] for m in DETECTION}
    selected = {**{m: float(np.mean(lists[m])) for m in DETECTION}, "phase": "deployed", "epoch": "",
                "per_client": lists, **fields}
    return {"selected": selected, "selection": record}


# ---------------------------------------------------------------------------- under secure aggregation
# A secure method's server learns a candidate's values and the deployed detectors' metrics only as sums over the
# clients (``protocol.secagg``); the simulator computes the same sums, so both drivers choose and report alike.


def selection_part(candidate: int) -> secagg.Part:
    """A candidate's signal value in a secure evaluation vector (one value, its finite flag)."""
    return secagg.Part(f"selection/{candidate}", 1, exact=True, scale=secagg.METRIC_SCALE, flags=True)


DEPLOYED_PART = secagg.Part("deployed", len(DETECTION), exact=True, scale=secagg.METRIC_SCALE, flags=True)


def chosen_part(rounds: int) -> secagg.Part:
    """Each client's chosen candidate as a one-hot row over 0..R: the sum is how many clients chose each round."""
    return secagg.Part("chosen", rounds + 1, exact=True)


def _summed(part: secagg.Part, values: list) -> secagg.Summed:
    return secagg.secure_sum((part,), [{part.name: secagg.Contribution(np.asarray(v, dtype=np.float64))}
                                       for v in values], [None] * len(values), secagg.SecAggSettings())[part.name]


def summed_mean(values: list[float]) -> float:
    """The secure mean of the clients' values of one candidate (NaN if one is not finite: never chosen)."""
    return float(_summed(selection_part(0), [[v] for v in values]).mean[0])


def summed_choice(rule: str, means: list[float]) -> int:
    """The shared model's candidate with the best secure mean (the first best; NaN never)."""
    return int(signals.choose(np.array(means, dtype=np.float64)[:, None], signals.signal_of(rule), True)[0])


def one_hot(candidate: int, rounds: int) -> np.ndarray:
    v = np.zeros(rounds + 1)
    v[int(candidate)] = 1.0
    return v


def rounds_histogram(chosen: list[int], rounds: int) -> list[int]:
    """How many clients chose each candidate 0..R, as a secure server reads it from the one-hot rows' sum."""
    summed = _summed(chosen_part(rounds), [one_hot(j, rounds) for j in chosen])
    return [int(round(v * summed.count)) for v in summed.mean]


def summed_choice_record(rule: str, *, means: list[float] | None = None, histogram: list[int] | None = None) -> dict:
    """summary.json's ``selection`` under secure aggregation: the shared model's secure means per candidate, or how
    many clients chose each candidate (per-client choice) — nothing of any one client."""
    signal = signals.signal_of(rule)
    out = {"rule": rule, "signal": signal, "better": "higher" if signals.higher_is_better(signal) else "lower"}
    if means is not None:
        chosen = summed_choice(rule, means)
        return {**out, "scope": "federation (one shared model: the secure mean over clients)", "round": chosen,
                "means": [float(m) for m in means],
                "revealed": "each candidate's value summed over the clients (SecAgg+); no client's value"}
    return {**out, "scope": "per client", "rounds_histogram": list(histogram),
            "untrained_share": histogram[0] / max(1, sum(histogram)),
            "revealed": "how many clients chose each candidate (a sum of one-hot rows, SecAgg+); no client's choice"}


def summed_choice_fields(rule: str, chosen_round: int | None = None, histogram: list[int] | None = None) -> dict:
    """summary.json's ``selected`` fields under secure aggregation: the shared round, or the round most clients
    chose."""
    signal = signals.signal_of(rule)
    if histogram is not None:
        chosen_round = int(np.argmax(histogram))
    return {"round": int(chosen_round),
            "rule": f"each client's model (untrained or a round's) with the best {signal} on its validation rows "
                    f"({'higher' if signals.higher_is_better(signal) else 'lower'} is better); the server learns "
                    "only sums over clients"}


def summed_ensemble_record(rule: str, members: int) -> dict:
    return {"rule": rule, "members": members,
            "revealed": "nothing to choose; each client standardises its members on its own validation rows"}


def summed_deployed_summary(summed: secagg.Summed, fields: dict, record: dict) -> dict:
    """``selected`` and ``selection`` from the secure sum of the clients' ``deployed_metrics`` (``DEPLOYED_PART``)."""
    means = dict(zip(DETECTION, summed.mean.tolist()))
    return {"selected": {**{m: float(means[m]) for m in DETECTION}, "phase": "deployed", "epoch": "", **fields},
            "selection": record}


def summed_deployed(per_client: list[dict]) -> secagg.Summed:
    """The simulator's sum of the deployed detectors' metrics, as the secure server reads it."""
    return _summed(DEPLOYED_PART, [[c[m] for m in DETECTION] for c in per_client])


def summed_selection(selection, rounds: int) -> tuple[dict, dict]:
    """The simulator's ``selected`` fields and ``selection`` record of a secure run: what the secure server reads —
    the ensemble's size, the shared model's secure means, or the histogram of the clients' choices."""
    rule = selection.cfg.selection
    if isinstance(selection, RoundsEnsemble):
        return ensemble_fields(len(selection.members)), summed_ensemble_record(rule, len(selection.members))
    if selection.means is not None:
        return selection.selected_fields(), selection.record()
    histogram = rounds_histogram(selection.chosen(), rounds)
    return summed_choice_fields(rule, histogram=histogram), summed_choice_record(rule, histogram=histogram)
