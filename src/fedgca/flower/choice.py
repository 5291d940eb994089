"""``--selection`` on Flower (issue #47): which model each client deploys, chosen without test labels.

The simulator's classes do the work (``fedgca.evaluation.candidates``): a Flower client keeps its own
``ClientSelection`` or ``RoundsEnsemble`` over its one-model stack in ``context.state`` between messages.

* Before round 1 the server sends ``query.candidate`` (with the initial global model where the server's model is
  deployed): each client measures its untrained model, candidate 0.
* Every round's evaluation of a client's deployed model (the last step's reply, or ``evaluate``) measures it as the
  next candidate and reports its signal value (``selection-value``: one scalar; nothing for an ensemble).
* Per-client models (Single-Client, GCA): each client keeps its best model so far. A shared model (FedAvg, ...):
  the server chooses one candidate by the mean of the reported values and keeps that global model.
* After the last round ``query.deploy`` (with the chosen global model, where shared) asks each client to deploy its
  choice — or its ensemble of rounds — as a detector (threshold on its own rows; written under the node's
  ``detector-dir`` if it has one) and to report the detector's metrics on its test rows and its record.

These two queries are bookkeeping of the selection, as the simulator's; they are in messages.jsonl, not comm.json.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import torch

from fedgca import devices
from fedgca.evaluation import candidates, signals
from fedgca.evaluation.selection import DETECTION
from fedgca.evaluation.signals import ENSEMBLE_ROUNDS, FEDERATION_VAL_ERROR
from fedgca.flower.records import (
    ARRAYS,
    CONFIG,
    METRICS,
    array_record,
    config_record,
    from_json_record,
    json_record,
    numpy_dict,
)
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import slot_model

log = logging.getLogger("fedgca.flower")

STATE = "fedgca.selection"  # context.state: the candidates' values / standardisation (JSON)
STATE_MODELS = "fedgca.selection.models"  # context.state: the best model so far, or every member
VALUE = "selection-value"  # an evaluation's signal value (MetricRecord key)
CANDIDATE, DEPLOY = "query.candidate", "query.deploy"
CHOSEN = "chosen-round"  # query.deploy's config: the shared model's round
DETECTOR_DIR = "detector-dir"  # node config: where the client writes its detector (client_<id>/)


def active(cfg) -> bool:
    return cfg.selection != FEDERATION_VAL_ERROR


def shared(cfg, method) -> bool:
    """Whether every client deploys one model (the federation then chooses one candidate for all)."""
    return bool(method.deploys_global or cfg.spec.pooled)


# ---------------------------------------------------------------------------- the client


def _view(clients, node, cfg):
    """What the candidates' classes read: this client's stack and its validation rows."""
    return SimpleNamespace(clients=clients, val_shards=ClientShards.from_arrays(
        [node.val], device=devices.resolve(cfg.device)))


def _load(context, cfg, node, clients, is_shared: bool):
    view = _view(clients, node, cfg)
    sel = (candidates.RoundsEnsemble(cfg, view) if cfg.selection == ENSEMBLE_ROUNDS
           else candidates.ClientSelection(cfg, view, is_shared, client_ids=[node.client_id]))
    if STATE in context.state.config_records:
        doc = from_json_record(context.state.config_records[STATE])
        arrays = {k: torch.as_tensor(np.array(v, copy=True)) for k, v in
                  numpy_dict(context.state.array_records[STATE_MODELS]).items()}
        if isinstance(sel, candidates.RoundsEnsemble):
            sel.load_state_dict({"members": [
                {"params": {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(f"{j}/")},
                 "standardise": st} for j, st in enumerate(doc["standardise"])]})
        else:
            sel.load_state_dict({"history": doc["history"], "best": arrays})
    return sel


def _save(context, sel) -> None:
    if isinstance(sel, candidates.RoundsEnsemble):
        doc = {"standardise": [[list(s) for s in st] for _, st in sel.members]}
        arrays = {f"{j}/{k}": v for j, (params, _) in enumerate(sel.members) for k, v in params.items()}
    else:
        doc, arrays = {"history": sel.history}, dict(sel.best or {})
    context.state[STATE] = json_record(doc)
    context.state[STATE_MODELS] = array_record(arrays)


def observe(context, cfg, node, clients, candidate: int, is_shared: bool) -> dict:
    """Measure this client's deployed model ``clients`` as candidate ``candidate`` (0 = untrained); returns what its
    evaluation reports (the signal value; nothing for an ensemble)."""
    if not active(cfg) or node.val is None:
        return {}
    sel = _load(context, cfg, node, clients, is_shared)
    seen = len(sel.members) if isinstance(sel, candidates.RoundsEnsemble) else len(sel.history)
    if candidate < seen:  # measured already (a repeated message): the same value again
        return {} if isinstance(sel, candidates.RoundsEnsemble) else {VALUE: float(sel.history[candidate][0])}
    if isinstance(sel, candidates.RoundsEnsemble):
        sel.observe(candidate)
        _save(context, sel)
        return {}
    value = sel.observe(candidate)[0]
    _save(context, sel)
    return {VALUE: float(value)}


def deploy(context, cfg, node, clients, template, chosen_global: int | None, preprocessor=None, schema=None) -> dict:
    """The client's deployed detector (its choice, the shared model the server chose, or its ensemble), threshold on
    its own rows; its metrics on the test rows and its record, for the query.deploy reply. ``clients``: the server's
    chosen model where shared (``chosen_global`` its round), else this client's own stack."""
    from fedgca.detector import AnomalyDetector

    if node.val is None:
        raise RuntimeError("--selection needs a validation split on every client (--val-fraction > 0)")
    sel = _load(context, cfg, node, clients, chosen_global is not None)
    members = standardise = None
    out: dict = {}
    if isinstance(sel, candidates.RoundsEnsemble):
        members = [slot_model(params, 0, template) for params, _ in sel.members]
        standardise = [st[0] for _, st in sel.members]
        model, rounds = members[-1], len(members) - 1
        out.update({"standardise-mean": [float(m) for m, _ in standardise],
                    "standardise-std": [float(s) for _, s in standardise]})
    else:
        if chosen_global is None:
            rounds = sel.apply()[0]
        else:
            rounds = int(chosen_global)
        model = clients.client_model(0, template)
        out["selection-values"] = [float(v[0]) for v in sel.history]
    det = AnomalyDetector(model, quantile=cfg.quantile, preprocessor=preprocessor, dataset=cfg.dataset,
                          kind=node.kind, schema=schema,
                          meta={"client": node.client_id, "method": cfg.method, "round": int(rounds),
                                "input_shape": list(node.input_shape),
                                "threshold_rows": "validation" if cfg.threshold == "val-quantile" else "training"},
                          members=members, standardise=standardise)
    det.fit(node.val if cfg.threshold == "val-quantile" else node.train)
    if node.test_x is not None and node.test_y is not None and len(np.unique(node.test_y)) == 2:
        out.update(candidates.deployed_metrics(det.decision_function(node.test_x), node.test_y, det.threshold_))
    else:
        out.update({m: float("nan") for m in DETECTION})
    out["round"] = int(rounds)
    where = context.node_config.get(DETECTOR_DIR)
    if where:
        from fedgca.detector import client_dir

        det.save(client_dir(where, node.client_id))
    return out


# ---------------------------------------------------------------------------- the server


class ServerChoice:
    """The server's side: candidate 0, each round's values, the shared model's choice, the deploy query."""

    def __init__(self, server, cfg, method):
        self.server, self.cfg, self.method = server, cfg, method
        self.shared = shared(cfg, method)
        self.values: list[dict[int, float]] = []  # [candidate] {client id: value}
        self.best_global = None  # a shared model's chosen candidate so far: (round, arrays)

    def _history(self) -> np.ndarray:
        ids = [c.client_id for c in self.server.clients]
        return np.array([[v.get(i, np.nan) for i in ids] for v in self.values])

    def _keep(self, candidate: int) -> None:
        """A shared model: keep the global model if the federation's choice is now this candidate."""
        if not self.shared or self.cfg.selection == ENSEMBLE_ROUNDS:
            return
        if int(signals.choose(self._history(), signals.signal_of(self.cfg.selection), True)[0]) == candidate:
            self.best_global = (candidate, {k: v.detach().clone() if isinstance(v, torch.Tensor) else np.array(v, copy=True)
                                            for k, v in self.method.deployed().items()})

    def start(self) -> None:
        """Candidate 0: every client measures its untrained (or the initial global) model."""
        server = self.server
        records = {CONFIG: config_record(self.cfg, round=-1)}
        if self.method.deploys_global:
            records[ARRAYS] = array_record(self.method.deployed())
        msgs = [server.message_to(c.node_id, CANDIDATE, -1, **records) for c in server.clients]
        replies, _ = server.exchange(CANDIDATE, -1, msgs)
        self.values.append({server.client_id_of(n): float(rep.content[METRICS].get(VALUE, np.nan))
                            for n, rep in replies.items() if METRICS in rep.content.metric_records})
        self._keep(0)

    def observe(self, r: int, evals: dict) -> None:
        """Round ``r``'s evaluations: candidate r + 1's values."""
        self.values.append({cid: float(v.get("selection_value", np.nan)) for cid, v in evals.items()})
        self._keep(r + 1)

    def deploy(self) -> dict:
        """query.deploy to every client; summary.json's ``selected`` and ``selection`` from the replies."""
        server, cfg = self.server, self.cfg
        records = {CONFIG: config_record(cfg, round=cfg.rounds)}
        if self.best_global is not None:
            records[CONFIG] = config_record(cfg, round=cfg.rounds, **{CHOSEN: int(self.best_global[0])})
            records[ARRAYS] = array_record(self.best_global[1])
        replies, lost = server.exchange(DEPLOY, cfg.rounds, [server.message_to(c.node_id, DEPLOY, cfg.rounds, **records)
                                                            for c in server.clients])
        got = {server.client_id_of(n): dict(rep.content[METRICS]) for n, rep in replies.items()
               if METRICS in rep.content.metric_records}
        ids = [c.client_id for c in server.clients if c.client_id in got]
        if len(ids) < len(server.clients):
            log.warning("query.deploy: %d of %d clients reported their deployed detector; the selected metrics are "
                        "over those", len(ids), len(server.clients))
        if not ids:
            return {}
        per_client = [{m: float(got[i][m]) for m in DETECTION} for i in ids]
        if cfg.selection == ENSEMBLE_ROUNDS:
            k = max(len(got[i]["standardise-mean"]) for i in ids)  # a client that missed a round has fewer
            standardise = [[(got[i]["standardise-mean"][j], got[i]["standardise-std"][j])
                            if j < len(got[i]["standardise-mean"]) else (float("nan"), float("nan")) for i in ids]
                           for j in range(k)]
            record, fields = candidates.ensemble_record(cfg.selection, standardise), candidates.ensemble_fields(k)
        else:
            k = max(len(got[i]["selection-values"]) for i in ids)  # a client that missed rounds: NaN, never chosen
            history = np.array([list(got[i]["selection-values"]) + [np.nan] * (k - len(got[i]["selection-values"]))
                                for i in ids]).T  # [candidate][client]
            if self.shared:  # the server's own view: the values each round's evaluations reported
                history = self._history()[:, [k for k, c in enumerate(server.clients) if c.client_id in got]]
            record = candidates.choice_record(cfg.selection, history.tolist(), self.shared)
            fields = candidates.choice_fields(cfg.selection, history.tolist(), self.shared)
        return candidates.deployed_summary(per_client, fields, record)
