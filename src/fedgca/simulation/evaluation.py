"""The simulator's evaluation of deployed models: one metric row over every client (SPEC §5), the computation
each Flower node makes for itself (``fedgca.flower.client_app._metrics``), so both drivers write the same
metrics.csv."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from fedgca import devices, runrecord
from fedgca.config import evaluated_clients
from fedgca.evaluation import candidates
from fedgca.evaluation.metrics import evaluate_clients, shard_scores


@dataclass
class Deployed:
    """What a run's clients deploy and are evaluated on: their models, the rows τ is set on (a pooled method's:
    all clients' rows), whether every slot holds one model (the test set is then scored once)."""

    fed: object  # simulation.federation.Federation
    clients: object  # training.stacked.StackedModels
    shards: object
    val_shards: object
    one_model: bool


def metric_row(d: Deployed, r: int, phase: str, epoch: int) -> dict:
    """A metric row: every client's deployed model, τ on its training or validation rows."""
    fed, cfg = d.fed, d.fed.cfg
    clients, shards, val_shards = d.clients, d.shards, d.val_shards
    ids = evaluated_clients(cfg, phase)
    if ids is not None:  # one client alone: its slot's view
        (cid,) = ids
        clients, shards = clients.slot_view(cid), shards.only(cid)
        val_shards = val_shards.only(cid) if val_shards is not None else None
    if fed.client_tests is None:  # one shared test set
        one_model = d.one_model and phase == "round"  # "local": the pre-aggregation models differ
        res = evaluate_clients(clients, shards, fed.test_x, fed.dataset.test_y, cfg.quantile, one_model=one_model,
                               val_shards=val_shards, tau_on_val=cfg.threshold == "val-quantile")
        per_client, val = dict(res["per_client"]), res["val_scores"]  # validation rows scored once: τ, val_error
    else:  # per-site test sets: each client on its own rows, as a Flower node
        val = shard_scores(clients, val_shards) if val_shards is not None else None
        tau_scores = val if cfg.threshold == "val-quantile" else None
        per_client = {}
        for slot, i in enumerate(ids or range(shards.num_clients)):
            x, y = fed.client_tests[i]
            res = evaluate_clients(clients.slot_view(slot), shards.only(slot), x, y, cfg.quantile,
                                   None if tau_scores is None else [tau_scores[slot]])
            for k, v in res["per_client"].items():
                per_client.setdefault(k, []).append(v[0])
    per_client["val_error"] = [float(s.mean()) for s in val] if val is not None else [float("nan")]
    return runrecord.metric_row(r, phase, epoch, per_client, paper_phase=cfg.paper_phase, client_ids=ids,
                                summed=cfg.spec.secure)


def record(d: Deployed, r: int, rows: list[dict], progress, phase: str, epoch: int) -> None:
    """Round ``r``'s evaluation at (phase, epoch) appended to ``rows``; ``progress(r, phase, epoch)`` told."""
    rows.append(metric_row(d, r, phase, epoch))
    if progress is not None:
        progress(r, phase, epoch)


def recorder(d: Deployed, r: int, rows: list[dict], progress=None):
    """``evaluate(phase, epoch)`` for round ``r`` (what a method calls where it evaluates): ``record``."""
    return functools.partial(record, d, r, rows, progress)


def deployed(fed, detectors, selection) -> dict:
    """summary.json's ``selected`` and ``selection`` under ``--selection``: the saved detectors themselves (each
    client's chosen model, or its ensemble of rounds; τ from its own rows) scoring its test rows — what ``score``
    and ``predict`` will use — and the selection's own record (``selection.selected_fields``: the round(s), the
    rule). A Flower client computes the same (``fedgca.flower.choice.deploy``)."""
    per_client = []
    for i, det in enumerate(detectors):
        x, y = fed.client_tests[i] if fed.client_tests is not None else (fed.test_x, fed.dataset.test_y)
        per_client.append(candidates.deployed_metrics(det.decision_function(devices.to_numpy(x)), y, det.threshold_))
    if fed.cfg.spec.secure:  # what the secure server reads: sums over the clients (fedgca.flower.choice alike)
        return candidates.summed_deployed_summary(candidates.summed_deployed(per_client),
                                                  *candidates.summed_selection(selection, fed.cfg.rounds))
    return candidates.deployed_summary(per_client, selection.selected_fields(), selection.record())
