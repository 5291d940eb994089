"""The model each Flower client deploys after the run, written as its detector on its own machine: the round the
federation selected (the default rule), or under ``--selection`` (issue #47) its own choice without test labels.

Under ``--selection`` the simulator's classes do the work (``fedgca.evaluation.candidates``): a Flower client keeps its own
``ClientSelection`` or ``RoundsEnsemble`` over its one-model stack in ``context.state`` between messages.

* Before round 1 the server sends ``query.candidate`` (with the initial global model where the server's model is
  deployed): each client measures its untrained model, candidate 0.
* Every round's evaluation of a client's deployed model (the last step's reply, or ``evaluate``) measures it as the
  next candidate; where the model is shared it reports its signal value (``selection-value``: one scalar).
* Per-client models (Single-Client, GCA): each client keeps its best model so far. A shared model (FedAvg, ...):
  the server chooses one candidate by the mean of the reported values and keeps that global model.
* After the last round ``query.deploy`` (with the chosen global model, where shared) asks each client to deploy its
  choice — or its ensemble of rounds — as a detector (threshold on its own rows; written under the node's
  ``detector-dir`` if it has one) and to report the detector's metrics on its test rows and its record.

Under the default rule (``federation-val-error``) the detectors are written too, on nodes whose config has a
``detector-dir``: the federation's round is chosen by the server from the metric rows (``validation_selected``, as the
summary's ``selected``). Each message of a round names the round chosen so far (``selected-round``); a client keeps
that round's model (and its latest, until the server's next message says whether it was chosen), and ``query.deploy``
names the final choice. A shared model's chosen round the server keeps and sends.

These queries are bookkeeping of the deployment, as in the simulator; they are in messages.jsonl, not comm.json.
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from fedgca import devices
from fedgca.evaluation import candidates, signals
from fedgca.evaluation.selection import DETECTION, validation_selected
from fedgca.evaluation.signals import ENSEMBLE_ROUNDS, FEDERATION_VAL_ERROR
from fedgca.flower.records import (
    ARRAYS,
    CONFIG,
    METRICS,
    array_record,
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
CHOSEN = "chosen-round"  # query.deploy's config: the shared model's round (the default rule: every client's)
SELECTED = "selected-round"  # the default rule: a round's messages name the round the federation has chosen so far
DETECTOR_DIR = "detector-dir"  # node config: where the client writes its detector (client_<id>/)


def active(cfg) -> bool:
    return cfg.selection != FEDERATION_VAL_ERROR


def shared(cfg, method) -> bool:
    """Whether every client deploys one model (the federation then chooses one candidate for all)."""
    return bool(method.deploys_global or cfg.spec.pooled)


# ---------------------------------------------------------------------------- the client


def _load(context, cfg, node, clients, is_shared: bool):
    """This client's candidates (``clients``: its deployed model, a one-model stack), restored from its state."""
    val = ClientShards.from_arrays([node.val], device=devices.resolve(cfg.device))
    sel = (candidates.RoundsEnsemble(cfg, clients, val) if cfg.selection == ENSEMBLE_ROUNDS
           else candidates.ClientSelection(cfg, clients, val, is_shared, client_ids=[node.client_id]))
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


def _keeps_selected_round(context, cfg, node, is_shared: bool) -> bool:
    """The default rule: a per-client model on a node that writes its detector keeps the chosen round's model."""
    return (not active(cfg) and not is_shared and node.val is not None
            and bool(context.node_config.get(DETECTOR_DIR)))


def _kept(context) -> tuple[dict, dict]:
    """The default rule's state: ({"kept": round, "pending": round}, arrays "kept/<name>", "pending/<name>")."""
    if STATE not in context.state.config_records:
        return {"kept": None, "pending": None}, {}
    return (from_json_record(context.state.config_records[STATE]),
            numpy_dict(context.state.array_records[STATE_MODELS]))


def _resolve(doc: dict, arrays: dict, selected) -> tuple[dict, dict]:
    """The server's word on the federation's round so far: a pending model of that round becomes the kept one."""
    if selected is not None and doc["pending"] is not None and int(selected) == doc["pending"]:
        arrays = {f"kept/{k.split('/', 1)[1]}": v for k, v in arrays.items() if k.startswith("pending/")}
        doc = {"kept": doc["pending"], "pending": None}
    return doc, arrays


def _keep_round(context, clients, candidate: int, selected) -> None:
    doc, arrays = _resolve(*_kept(context), selected)
    arrays = {k: v for k, v in arrays.items() if k.startswith("kept/")}
    arrays.update({f"pending/{k}": v for k, v in clients.params.items()})
    context.state[STATE] = json_record({"kept": doc["kept"], "pending": candidate})
    context.state[STATE_MODELS] = array_record(arrays)


def observe(context, cfg, node, clients, candidate: int, is_shared: bool, selected=None) -> dict:
    """Measure this client's deployed model ``clients`` as candidate ``candidate`` (0 = untrained); returns what its
    evaluation reports: the signal value where the model is shared (the server chooses), else nothing (the client
    chooses; its values travel once, in its query.deploy reply). The default rule: keep the model if it may become
    the federation's round (``selected``: the round chosen so far, as the message says)."""
    if _keeps_selected_round(context, cfg, node, is_shared):
        if candidate > 0:
            _keep_round(context, clients, candidate, selected)
        return {}
    if not active(cfg) or node.val is None:
        return {}
    sel = _load(context, cfg, node, clients, is_shared)
    ensemble = isinstance(sel, candidates.RoundsEnsemble)
    if candidate >= (len(sel.members) if ensemble else len(sel.history)):  # evaluated twice in a round: once
        sel.observe(candidate)
        _save(context, sel)
    return {} if ensemble or not is_shared else {VALUE: float(sel.history[candidate][0])}


def _default_model(context, cfg, node, clients, template, chosen: int, chosen_is_global: bool):
    """The default rule's model: the federation's round ``chosen`` (kept by this client, or the server's model)."""
    if chosen_is_global or not _keeps_selected_round(context, cfg, node, False):
        return clients.client_model(0, template), chosen  # the server's model, or the final round (no validation)
    doc, arrays = _resolve(*_kept(context), chosen)
    if doc["kept"] != chosen:  # this client missed that round's evaluation: its latest model, said so
        log.warning("client %s has no model of round %s (it missed that round); deploying its latest",
                    node.client_id, chosen)
        return clients.client_model(0, template), cfg.rounds
    kept = {k.split("/", 1)[1]: torch.as_tensor(np.array(v, copy=True)) for k, v in arrays.items()
            if k.startswith("kept/")}
    return slot_model(kept, 0, template), chosen


def deploy(context, cfg, node, clients, template, chosen: int | None, chosen_is_global: bool,
           preprocessor=None, schema=None) -> dict:
    """The client's deployed detector — its choice, the shared model the server chose, its ensemble, or (the
    default rule) the federation's round ``chosen`` — threshold on its own rows, written under the node's
    ``detector-dir``. Returns the query.deploy reply: the round, and under ``--selection`` the detector's metrics on
    the test rows and the client's record. ``clients``: the server's chosen model where shared
    (``chosen_is_global``), else this client's own stack."""
    from fedgca.detector import AnomalyDetector, client_dir

    members = standardise = None
    out: dict = {}
    if not active(cfg):  # (a node without a detector-dir has nothing to do: fedgca.flower.client_app.deploy)
        model, rounds = _default_model(context, cfg, node, clients, template, int(chosen), chosen_is_global)
    elif node.val is None:
        raise RuntimeError("--selection needs a validation split on every client (--val-fraction > 0)")
    else:
        sel = _load(context, cfg, node, clients, chosen_is_global)
        if isinstance(sel, candidates.RoundsEnsemble):
            members = [slot_model(params, 0, template) for params, _ in sel.members]
            standardise = [st[0] for _, st in sel.members]
            model, rounds = members[-1], len(members) - 1
            out.update({"standardise-mean": [float(m) for m, _ in standardise],
                        "standardise-std": [float(s) for _, s in standardise]})
        else:
            rounds = int(chosen) if chosen_is_global else sel.apply()[0]
            model = clients.client_model(0, template)
            out["selection-values"] = [float(v[0]) for v in sel.history]
    det = AnomalyDetector(model, quantile=cfg.quantile, preprocessor=preprocessor, dataset=cfg.dataset,
                          kind=node.kind, schema=schema,
                          meta={"client": node.client_id, "method": cfg.method, "round": int(rounds),
                                "input_shape": list(node.input_shape),
                                "threshold_rows": "validation" if cfg.threshold == "val-quantile" else "training"},
                          members=members, standardise=standardise)
    det.fit(node.val if cfg.threshold == "val-quantile" else node.train)
    if active(cfg):
        labelled = node.test_x is not None and node.test_y is not None and len(np.unique(node.test_y)) == 2
        out.update(candidates.deployed_metrics(det.decision_function(node.test_x), node.test_y, det.threshold_)
                   if labelled else {m: float("nan") for m in DETECTION})
    out["round"] = int(rounds)
    where = context.node_config.get(DETECTOR_DIR)
    if where:
        det.save(client_dir(where, node.client_id))
    return out


# ---------------------------------------------------------------------------- the server


class ServerChoice:
    """The server's side: candidate 0, each round's values, the shared model's choice, the deploy query."""

    def __init__(self, server, cfg, method):
        self.server, self.cfg, self.method = server, cfg, method
        self.shared = shared(cfg, method)
        # --selection client-* over a shared model: the server chooses, from each round's reported values
        self.server_chooses = self.shared and active(cfg) and cfg.selection != ENSEMBLE_ROUNDS
        self.values: list[dict[int, float]] = []  # [candidate] {client id: value}, where the server chooses
        self.secure = bool(cfg.spec.secure)  # the server learns values and metrics only as sums over the clients
        self.means: list[float] = []  # [candidate] the summed mean value, where a secure server chooses
        self.best_global = None  # a shared model's chosen candidate so far: (round, arrays)
        self.selected_so_far: int | None = None  # the default rule: the federation's round so far

    def state_dict(self) -> dict:
        """What a server checkpoint keeps of the choice so far (``flower.checkpoint``)."""
        from fedgca.flower.checkpoint import as_tensors

        return {"values": [{int(k): float(v) for k, v in d.items()} for d in self.values],
                "means": [float(m) for m in self.means],
                "best_global": None if self.best_global is None else
                {"round": int(self.best_global[0]), "arrays": as_tensors(self.best_global[1])},
                "selected_so_far": self.selected_so_far}

    def load_state_dict(self, state: dict) -> None:
        self.values = [{int(k): float(v) for k, v in d.items()} for d in state["values"]]
        self.means = [float(m) for m in state["means"]]
        best = state["best_global"]
        self.best_global = None if best is None else (int(best["round"]), dict(best["arrays"]))
        self.selected_so_far = state["selected_so_far"]

    def round_config(self) -> dict:
        """What a round's messages carry besides the run config: under the default rule with per-client models,
        the round chosen so far (a client keeps that round's model for its detector)."""
        return {} if self.selected_so_far is None or self.shared else {SELECTED: self.selected_so_far}

    def _keep_global(self, candidate: int) -> None:
        self.best_global = (candidate, {k: v.detach().clone() if isinstance(v, torch.Tensor) else np.array(v, copy=True)
                                        for k, v in self.method.deployed().items()})

    def _history(self) -> np.ndarray:
        ids = [c.client_id for c in self.server.clients]
        return np.array([[v.get(i, np.nan) for i in ids] for v in self.values])

    def _keep(self, candidate: int) -> None:
        """Keep the global model if the federation's choice is now this candidate."""
        if int(signals.choose(self._history(), signals.signal_of(self.cfg.selection), True)[0]) == candidate:
            self._keep_global(candidate)

    def start(self) -> None:
        """Candidate 0: every client measures its untrained (or the initial global) model (a secure run's clients do
        it in the first exchange: ``fedgca.flower.secure_rounds``)."""
        if not active(self.cfg) or self.secure:
            return
        server = self.server
        records = {CONFIG: self.server.config(-1)}
        if self.method.deploys_global:
            records[ARRAYS] = array_record(self.method.deployed())
        msgs = [server.message_to(c.node_id, CANDIDATE, -1, **records) for c in server.clients]
        replies, _ = server.exchange(CANDIDATE, -1, msgs)
        if self.server_chooses:
            self.values.append({server.client_id_of(n): float(rep.content[METRICS].get(VALUE, np.nan))
                                for n, rep in replies.items() if METRICS in rep.content.metric_records})
            self._keep(0)

    def observe(self, r: int, evals: dict) -> None:
        """Round ``r``'s evaluations (its metric rows recorded): candidate r + 1's values; the default rule: the
        federation's round so far."""
        if not active(self.cfg):
            rows = [row for row in self.server.rows if row["phase"] == "round"]
            if self.cfg.val_fraction > 0 and rows and all(row["val_error"] == row["val_error"] for row in rows):
                self.selected_so_far = int(validation_selected(rows)["round"])
                if self.shared and self.selected_so_far == r + 1:
                    self._keep_global(r + 1)
            return
        if self.server_chooses:
            self.values.append({cid: float(v.get("selection_value", np.nan)) for cid, v in evals.items()})
            self._keep(r + 1)

    def observe_summed(self, r: int, value: float | None) -> None:
        """A secure run: round ``r``'s evaluation has arrived as sums (r = −1: candidate 0), with the candidate's
        summed mean value where the server chooses."""
        if not active(self.cfg):
            if r >= 0:
                self.observe(r, {})
        elif self.server_chooses:
            self.means.append(np.nan if value is None else float(value))
            if candidates.summed_choice(self.cfg.selection, self.means) == r + 1:
                self._keep_global(r + 1)

    def deploy(self) -> dict:
        """query.deploy to every client; under --selection, summary.json's ``selected`` and ``selection`` from the
        replies (the default rule's come from the metric rows)."""
        server, cfg = self.server, self.cfg
        if self.secure and active(cfg):
            return self._deploy_summed()
        if not active(cfg):  # the federation's round (the final one without a validation split)
            if self.shared and self.best_global is None:
                self._keep_global(cfg.rounds)
            chosen = self.selected_so_far or cfg.rounds
        else:
            chosen = None if self.best_global is None else self.best_global[0]
        records = {CONFIG: server.config(cfg.rounds, **({} if chosen is None else {CHOSEN: int(chosen)}))}
        if self.best_global is not None:
            records[ARRAYS] = array_record(self.best_global[1])
        replies, _ = server.exchange(DEPLOY, cfg.rounds, [server.message_to(c.node_id, DEPLOY, cfg.rounds, **records)
                                                         for c in server.clients])
        if not active(cfg):
            return {}
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
            standardise = _by_candidate([list(zip(got[i]["standardise-mean"], got[i]["standardise-std"])) for i in ids],
                                        (float("nan"), float("nan")))
            record, fields = (candidates.ensemble_record(cfg.selection, standardise),
                              candidates.ensemble_fields(len(standardise)))
        else:
            history = (self._history()[:, [k for k, c in enumerate(server.clients) if c.client_id in got]].tolist()
                       if self.server_chooses else _by_candidate([list(got[i]["selection-values"]) for i in ids],
                                                                 float("nan")))
            record = candidates.choice_record(cfg.selection, history, self.shared)
            fields = candidates.choice_fields(cfg.selection, history, self.shared)
        return candidates.deployed_summary(per_client, fields, record)


    def _deploy_summed(self) -> dict:
        """A secure run's deployment under --selection: one summed exchange; the server reads the detectors' mean
        metrics and, where each client chooses, how many chose each candidate."""
        from fedgca.flower.secagg import DEPLOYED
        from fedgca.flower.secagg_server import summed_exchange
        from fedgca.protocol import secagg

        server, cfg = self.server, self.cfg
        rule, rounds = cfg.selection, cfg.rounds
        per_client_choice = not self.shared and rule != ENSEMBLE_ROUNDS
        layout = (candidates.DEPLOYED_PART, *([candidates.chosen_part(rounds)] if per_client_choice else []))
        chosen = None if self.best_global is None else self.best_global[0]
        payload = {} if self.best_global is None else {f"{DEPLOYED}/{k}": v for k, v in self.best_global[1].items()}
        instructions = {c.client_id: {"round": rounds, "deploy": True} for c in server.clients}
        config = dict(server.config(rounds, **({} if chosen is None else {CHOSEN: int(chosen)})))
        sums, summed, _, _ = summed_exchange(server, rounds, server.clients, payload, config, instructions, layout,
                                             secagg.SecAggSettings())
        if sums is None:
            log.warning("the deployed detectors' summed metrics did not arrive (fewer clients than the threshold)")
            return {}
        parts = secagg.decode(layout, sums, len(summed), secagg.SecAggSettings())
        if rule == ENSEMBLE_ROUNDS:
            fields, record = candidates.ensemble_fields(rounds + 1), candidates.summed_ensemble_record(rule, rounds + 1)
        elif self.shared:
            fields = candidates.summed_choice_fields(rule, int(chosen))
            record = candidates.summed_choice_record(rule, means=self.means)
        else:
            chosen_sum = parts["chosen"]
            histogram = [int(round(v * chosen_sum.count)) for v in chosen_sum.mean]
            fields = candidates.summed_choice_fields(rule, histogram=histogram)
            record = candidates.summed_choice_record(rule, histogram=histogram)
        return candidates.summed_deployed_summary(parts[candidates.DEPLOYED_PART.name], fields, record)


def _by_candidate(per_client: list[list], missing) -> list[list]:
    """Each client's list over the candidates, as [candidate][client]; a client that missed the last rounds has
    ``missing`` there (NaN: never chosen)."""
    k = max(len(v) for v in per_client)
    return [[v[j] if j < len(v) else missing for v in per_client] for j in range(k)]
