"""The Flower ServerApp's driver of a secure method: one SecAgg+ aggregation per round, nothing per client in the clear.

Exchange r (``algorithms.secure_rounds``) goes to round r's participants and to every client that owes round r − 1's
rest. Each client gets the payload (the step's, the previous round's later steps', and after the last round the
deployed model) and its own instructions: which step of round r it runs (participants), which later steps of round
r − 1 it runs (those that contributed to that round's sum; each client knows whether it did), whether it evaluates
round r − 1 (or measures its untrained model, candidate 0). Every client answers with one vector laid out by the
server (the step's parts, the evaluation's rows), masked by SecAgg+; the server reads the sums: first round
r − 1's metric rows (and the candidate's summed value), then round r's step (refused below two contributions, as
the simulator refuses). After the last round one more exchange carries its rest. ``--selection``'s deployment is a
summed exchange of its own (the detectors' metrics, the histogram of the clients' choices).

A sum that fails (fewer clients than SecAgg+'s threshold remained) loses what that exchange carried: round r's step
(the server keeps its state) and round r − 1's evaluation (no metric row) — with fewer than two clients alive there
is nothing the server may learn.
"""
from __future__ import annotations

import logging
import time

from fedgca.algorithms import secure_rounds
from fedgca.algorithms.base import SUMMED, arrays_nbytes
from fedgca.flower import checkpoint, masks
from fedgca.flower.secagg import DEPLOYED
from fedgca.flower.secagg_server import summed_exchange
from fedgca.protocol import secagg
from fedgca.runrecord import row_part, summed_metric_row

log = logging.getLogger("fedgca.flower")


def _prefixed(prefix: str, arrays: dict | None) -> dict:
    return {f"{prefix}/{k}": v for k, v in (arrays or {}).items()}


class _Owed:
    """What the next exchange carries of the previous round: its later steps' payload and who runs them, its
    evaluation (or candidate 0), and the traffic record it completes."""

    def __init__(self, r: int, evaluators: list, deferred_steps=(), deferred_clients=(), record=None):
        self.r, self.evaluators = r, list(evaluators)
        self.deferred_steps, self.deferred_clients = list(deferred_steps), set(deferred_clients)
        self.record = record  # round r's comm record, finished when its evaluation arrives

    def to_dict(self) -> dict:
        """What a server checkpoint keeps of it (``flower.checkpoint``): ids and names, the pending record."""
        return {"r": self.r, "evaluators": [c.client_id for c in self.evaluators],
                "deferred_steps": [st.name for st in self.deferred_steps],
                "deferred_clients": sorted(self.deferred_clients), "record": self.record}

    @classmethod
    def from_dict(cls, d: dict | None, method, clients) -> "_Owed":
        if d is None:
            return cls(-1, [])
        ids = set(d["evaluators"])
        return cls(int(d["r"]), [c for c in clients if c.client_id in ids],
                   [method.step_named(n) for n in d["deferred_steps"]], d["deferred_clients"], d["record"])


def require_masks(clients) -> None:
    """Both ends mask with fedgca's generator, or the secure run is refused in one line (``flower.masks``)."""
    name = masks.in_force()  # MaskGeneratorError: this server's Flower would regenerate masks with its own
    other = [c for c in clients if c.masks != name]
    if other:
        c = other[0]
        raise masks.MaskGeneratorError(
            f"client {c.client_id} (node {c.node_id}) masks with {c.masks or 'Flower own 32-bit-seeded generator'!r}, "
            f"not {name!r}: a secure run needs every node on fedgca's SecAgg+ masks; refused")


def run_secure_rounds(server, cfg, method, selection, ckpt: dict | None = None) -> None:
    """Every round of a secure method, then the last round's rest (the server's files are written as rows arrive);
    a server checkpoint after every exchange, with what the next one owes; from ``ckpt``'s next exchange when
    resuming."""
    s, clients = method.secagg, server.clients
    owed = _Owed(-1, clients if secure_rounds.owes_evaluation(cfg, method, 0) else [])
    start = 0
    if ckpt is not None:
        owed, start = _Owed.from_dict(ckpt["secure"]["owed"], method, clients), ckpt["round"] + 1
    for r in range(start, cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        server.round_extra = selection.round_config()
        step = method.steps[0]
        deferred = _prefixed_all({st.name: method.send(st, owed.r) for st in owed.deferred_steps})  # before send
        sent = method.send(step, r)
        ids = {c.client_id for c in part}
        targets = sorted({c.client_id: c for c in [*part, *owed.evaluators]}.values(), key=lambda c: c.client_id)
        step_layout = method.summed_layout(step, r)
        layout = (*step_layout, *_owed_layout(method, cfg, owed))
        instructions = {c.client_id: {**_instructions(r, step.name if c.client_id in ids else None, owed,
                                                      c.client_id), "weight-scale": method.weight_scale}
                        for c in targets}
        sums, summed, lost, stages = summed_exchange(server, r, targets, {**deferred, **_prefixed(step.name, sent)},
                                                     dict(server.config(r, cfg, **server.round_extra)),
                                                     instructions, layout, s)
        if sums is None:
            log.warning("round %d %s: secure aggregation did not complete (fewer clients than its threshold)", r + 1,
                        step.name)
        parts = None if sums is None else secagg.decode(layout, sums, len(summed), s)
        _finish_owed(server, cfg, method, selection, owed, parts, summed, len(targets) * arrays_nbytes(deferred))
        # round r's step, after round r − 1's evaluation (whose deployed model is still the method's)
        reply = None if parts is None else method.read_sums(step, r, parts)
        count = 0 if parts is None else min(parts[p.name].count for p in step_layout)
        took_part = sorted(set(summed) & ids)
        record = {"round": r + 1, "bytes_down": len(targets) * arrays_nbytes(sent or {}),
                  "bytes_up": len(summed) * 8 * (1 + secagg.width(step_layout)),
                  "uploads": method.uploads(step, dict.fromkeys(range(count))),
                  "participants": [c.client_id for c in part], "took_part": took_part,
                  "accepted": {step.name: took_part if reply is not None else []},
                  "dropped": {str(server.client_id_of(n)): why for n, why in lost.items()}, "rejected": {},
                  "exchanges": stages}
        if reply is not None:
            method.aggregate(step, r, {SUMMED: reply})
        record.update(method.round_record())
        record["wall_seconds"] = round(time.perf_counter() - t0, 4)  # this round's exchange (its rest rides the next)
        gone = {server.client_id_of(n) for n in lost}
        owed = _Owed(r, [c for c in clients if c.client_id not in gone],
                     method.steps[1:] if reply is not None else (), took_part, record)
        checkpoint.save(server, r, method, selection, {"owed": owed.to_dict()})
    if start > cfg.rounds:  # the last round's rest was carried before the server stopped
        return
    # the last round's rest: one more exchange, no step (its time is the last round's)
    t0 = time.perf_counter()
    payload = _prefixed_all({st.name: method.send(st, owed.r) for st in owed.deferred_steps})
    if method.deploys_global:
        payload.update(_prefixed(DEPLOYED, method.deployed()))
    layout = _owed_layout(method, cfg, owed)
    instructions = {c.client_id: _instructions(cfg.rounds, None, owed, c.client_id) for c in owed.evaluators}
    sums, summed, lost, stages = summed_exchange(server, cfg.rounds, owed.evaluators, payload,
                                                 dict(server.config(cfg.rounds, cfg, **selection.round_config())),
                                                 instructions, layout, s)
    if sums is None:
        log.warning("round %d: secure aggregation of its evaluation did not complete (fewer clients than its "
                    "threshold)", cfg.rounds)
    owed.record["exchanges"] += stages
    owed.record["last_rest_seconds"] = round(time.perf_counter() - t0, 4)  # the last round's rest: its own exchange
    owed.record["wall_seconds"] = round(owed.record["wall_seconds"] + owed.record["last_rest_seconds"], 4)
    _finish_owed(server, cfg, method, selection, owed, None if sums is None else secagg.decode(layout, sums, len(summed), s),
                 summed, len(owed.evaluators) * arrays_nbytes(payload))
    checkpoint.save(server, cfg.rounds, method, selection, {"owed": None})


def _prefixed_all(arrays_by_prefix: dict) -> dict:
    return {k: v for prefix, arrays in arrays_by_prefix.items() for k, v in _prefixed(prefix, arrays).items()}


def _owed_layout(method, cfg, owed: _Owed) -> secagg.Layout:
    return secure_rounds.evaluation_layout(method, cfg, owed.r + 1) if owed.evaluators else ()


def _instructions(r: int, step: str | None, owed: _Owed, client_id: int) -> dict:
    """What one client does in exchange ``r`` (the ClientApp's ``secure_exchange`` reads it)."""
    evaluates = any(c.client_id == client_id for c in owed.evaluators)
    return {"round": r, "step": step,
            "deferred": ({"round": owed.r, "steps": [st.name for st in owed.deferred_steps]}
                         if client_id in owed.deferred_clients and owed.deferred_steps else None),
            "evaluate": owed.r if evaluates and owed.r >= 0 else None,
            "candidate": owed.r + 1 if evaluates else None}


def _finish_owed(server, cfg, method, selection, owed: _Owed, parts, summed: list, deferred_down: int) -> None:
    """Round ``owed.r``'s rest has arrived (``parts``, or None when its sum failed): its metric rows, its comm record
    (with the later steps' payload and the evaluation's share of the vectors), the candidate's summed value."""
    if not owed.evaluators:
        return
    candidate = owed.r + 1
    value = None if parts is None else parts.get(f"selection/{candidate}")
    if owed.record is not None:  # candidate 0 finishes no round
        rec = owed.record
        rows = []
        for phase, e in secure_rounds.evaluation_rows(method) if parts is not None else ():
            summed_row = parts[row_part(phase, e).name]
            if secagg.refusal(summed_row.count) is None:
                rows.append(summed_metric_row(owed.r, phase, e, summed_row, paper_phase=cfg.paper_phase))
        up = secagg.width(secure_rounds.evaluation_layout(method, cfg, candidate))
        if owed.r == 0 and secure_rounds.owes_evaluation(cfg, method, 0):
            up += secagg.width(secure_rounds.evaluation_layout(method, cfg, 0))  # candidate 0's, in exchange 0
        rec = {**rec, "bytes_down": rec["bytes_down"] + deferred_down,
               "bytes_up": rec["bytes_up"] + len(summed) * 8 * up, "evaluated": sorted(summed)}
        server.finish_round(owed.r, rows, rec)
    if parts is not None:
        selection.observe_summed(owed.r, None if value is None or value.count < secagg.MIN_CONTRIBUTIONS
                                 else float(value.mean[0]))
