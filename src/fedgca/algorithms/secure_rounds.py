"""A secure method's round as SecAgg+ exchanges, once for both drivers: what each summed exchange carries and costs.

A SecAgg+ aggregation is four exchanges (setup, key shares, masked vectors, unmask), so a secure round is built
around one: exchange r carries the summed step of round r and everything round r − 1 still owes — its later steps
that need no reply (GCA's alignment: their payload rides along) and its evaluation, summed (``evaluation_layout``:
every metric row of the round and, where the server chooses a shared model under ``--selection``, the candidate's
signal value). After the last round one more exchange carries the last round's rest. A round is then four
exchanges where a plain one is two (train, then alignment or evaluation), and nothing per client reaches the
server: not a model, a statistic, a metric or a selection value (``fedgca.flower.secure_rounds`` runs it; the
simulator computes the same sums and counts the same traffic with ``step_traffic``/``evaluation_traffic``).

Traffic is counted for the round it belongs to: a step's payload and vector part, a round's evaluation, whichever
exchange carries them (each client's vector also carries SecAgg+'s weight element, counted with the step).
"""
from __future__ import annotations

from fedgca import runrecord
from fedgca.algorithms.base import Step, arrays_nbytes
from fedgca.evaluation import candidates
from fedgca.evaluation.signals import ENSEMBLE_ROUNDS, FEDERATION_VAL_ERROR
from fedgca.protocol import secagg


def selection_active(cfg) -> bool:
    return cfg.selection != FEDERATION_VAL_ERROR


def server_chooses(cfg, method) -> bool:
    """``--selection client-*`` over a shared model: the server chooses a candidate from the clients' summed values."""
    return (selection_active(cfg) and cfg.selection != ENSEMBLE_ROUNDS
            and bool(method.deploys_global or cfg.spec.pooled))


def owes_evaluation(cfg, method, r: int) -> bool:
    """Whether exchange ``r`` carries round r − 1's rest (every round after the first; the first under
    ``--selection``: every client measures its untrained model, candidate 0)."""
    return r > 0 or selection_active(cfg)


def evaluation_rows(method) -> list[tuple[str, int]]:
    """A round's metric rows in metrics.csv's order: the method's evaluation points, then the round's."""
    return [(phase, e) for phase, n in method.evaluation_points() for e in range(n)] + [("round", -1)]


def evaluation_layout(method, cfg, candidate: int) -> secagg.Layout:
    """What a client sends for the evaluation that makes ``candidate`` (the model after ``candidate`` rounds):
    every metric row of round candidate − 1 (none for the untrained model) and, where the server chooses, the
    candidate's signal value."""
    rows = [runrecord.row_part(p, e) for p, e in evaluation_rows(method)] if candidate > 0 else []
    return (*rows, *([candidates.selection_part(candidate)] if server_chooses(cfg, method) else []))


def step_traffic(method, step: Step, r: int, sent, addressed: int, clients: int) -> tuple[int, int]:
    """(bytes down, bytes up) of a step of secure round ``r``: the summed step goes to the ``addressed`` clients of
    exchange r and each sends its vector (and SecAgg+'s weight element); a later step's payload rides with the
    next exchange, which reaches every client (``clients``)."""
    down = 0 if sent is None else arrays_nbytes(sent)
    if step.summed:
        return addressed * down, addressed * 8 * (1 + secagg.width(method.summed_layout(step, r)))
    return clients * down, 0


def evaluation_traffic(method, cfg, r: int, clients: int) -> tuple[int, int]:
    """(bytes down, bytes up) of round r's evaluation: every client's summed rows (in round 0 also the untrained
    candidate's); after the last round the exchange that carries it also brings the deployed model, where shared."""
    up = clients * 8 * secagg.width(evaluation_layout(method, cfg, r + 1))
    if r == 0 and owes_evaluation(cfg, method, 0):
        up += clients * 8 * secagg.width(evaluation_layout(method, cfg, 0))
    last = r == cfg.rounds - 1 and method.deploys_global
    return (clients * arrays_nbytes(method.deployed()) if last else 0), up


# What each kind of part tells the server (the part's name up to its first "/"): summary.json's ``server_learns``.
PART_MEANINGS = {
    "row": "per metric row, the mean over the clients that sent it of accuracy, AUROC, AUPRC, training and "
           "validation error, and how many sent it",
    "selection": "per candidate model, the mean over the clients of its --selection signal value",
    "deployed": "the mean over the clients of the deployed detectors' accuracy, AUROC and AUPRC",
    "chosen": "how many clients chose each candidate round (a sum of one-hot rows)",
}
REGISTRATION = ("registration: each client's id, N_i, input shape, partition count, schema digest, whether it has a "
                "test set, and its mask generator (public: the protocol needs them)")
PARTICIPATION = "per exchange: which clients answered (SecAgg+'s survivors) and how many contributed to each sum"


def server_learns(method, cfg) -> dict[str, str]:
    """Everything a secure run's server learns, by kind: the sums it reads (the method's step parts, the metric
    rows, --selection's values and deployment), registration and participation. Tested against what a ServerApp
    actually receives (tests/test_secagg.py)."""
    kinds = {**method.summed_parts, "row": PART_MEANINGS["row"]}
    if server_chooses(cfg, method):
        kinds["selection"] = PART_MEANINGS["selection"]
    if selection_active(cfg):
        kinds["deployed"] = PART_MEANINGS["deployed"]
        if not (method.deploys_global or cfg.spec.pooled) and cfg.selection != ENSEMBLE_ROUNDS:
            kinds["chosen"] = PART_MEANINGS["chosen"]
    return {**kinds, "registration": REGISTRATION, "participation": PARTICIPATION}


def part_kind(name: str) -> str:
    return name.split("/", 1)[0]
