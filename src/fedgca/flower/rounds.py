"""The Flower ServerApp's driver of a method (``fedgca.algorithms``): its steps as message exchanges.

Each round: the method's first step goes to the sampled clients (message type ``train``), each later step
(``train.<step>``) to the clients whose reply the previous step accepted; every reply is decoded
(``validation.decode_reply``) and checked by the method, a late or failed reply drops its node, a rejected one
is recorded; the method aggregates the accepted replies in client-id order, as the simulator's driver
(``fedgca.simulation.driver``) does. The clients that deploy their own models send their evaluation with the
last step's reply; the others (and every client when the server's model is deployed) get an ``evaluate``.
"""
from __future__ import annotations

import logging
import time

from flwr.serverapp import Grid

from fedgca import methods, privacy, rundir, runrecord
from fedgca.algorithms import Reply, method_for
from fedgca.algorithms.base import SUMMED
from fedgca.config import RunConfig
from fedgca.flower.config import FlowerOptions
from fedgca.flower.records import (
    CONFIG,
    EVALUATION,
    array_record,
    config_record,
    payload_bytes,
    step_message_type,
)
from fedgca.flower.secagg_server import summed_exchange
from fedgca.flower.server import FlowerServer
from fedgca.flower.validation import decode_reply
from fedgca.protocol import secagg
from fedgca.protocol.gca import UploadError

log = logging.getLogger("fedgca.flower")


def run_rounds(server: FlowerServer) -> dict:
    """Every round of the run's method; returns the method's summary blocks."""
    sizes = [c.num_examples for c in server.clients]
    cfg = privacy.message_config(server.cfg, sizes)  # a calibrated DP σ written out for the clients
    method = method_for(cfg, server.kind, sizes)
    method.start(server.template.state_dict(), len(server.clients))
    dz, last = int(server.template.latent_dim), method.steps[-1]
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r)
        targets, failures, rejected, accepted_by_step, evals = part, {}, {}, {}, {}
        comm = {"bytes_up": 0, "bytes_down": 0, "uploads": 0}
        phase_seconds, took_part = {}, []
        for i, step in enumerate(method.steps):
            ts, kind = time.perf_counter(), step_message_type(method, step)
            sent = method.send(step, r)
            if step.summed:  # SecAgg+: the server receives masked vectors and their mean, no client's reply
                mean, summed, lost = summed_exchange(server, r, targets, sent, dict(cfgrec), method.secagg)
                failures.update(lost)
                comm["bytes_down"] += len(targets) * Reply(sent).nbytes
                comm["bytes_up"] += len(summed) * secagg.masked_bytes(sent)
                comm["uploads"] += len(summed)
                accepted_by_step[step.name] = summed
                took_part = took_part if i else summed
                targets = [c for c in targets if c.client_id in summed]
                if mean is not None:
                    method.aggregate(step, r, {SUMMED: Reply(mean, {"clients": len(summed)})})
                phase_seconds[step.name] = round(time.perf_counter() - ts, 4)
                if mean is None:
                    log.warning("round %d %s: secure aggregation did not complete (fewer clients than its threshold); "
                                "the global model is unchanged", r + 1, step.name)
                    break
                continue
            records = {CONFIG: cfgrec} if sent is None else {CONFIG: cfgrec, step.sends: array_record(sent)}
            msgs = [server.message_to(c.node_id, kind, r, **records) for c in targets]
            comm["bytes_down"] += sum(payload_bytes(m.content) for m in msgs)
            replies, lost = server.exchange(kind, r, msgs)
            failures.update(lost)
            rides = step is last and not method.deploys_global  # the client's evaluation came along
            accepted = {}
            for c in targets:
                if c.node_id not in replies:
                    continue
                try:
                    reply = decode_reply(replies[c.node_id].content, step, evaluation=rides)
                    accepted[c.client_id] = method.check(step, reply, c.num_examples, dz)
                except UploadError as e:
                    rejected[c.client_id] = str(e)
                    server.reject(kind, r, c, str(e))
            comm["bytes_up"] += sum(rep.nbytes for rep in accepted.values())
            comm["uploads"] += method.uploads(step, accepted)
            accepted_by_step[step.name] = sorted(accepted)
            took_part = took_part if i else sorted(accepted)
            targets = [c for c in targets if c.client_id in accepted]
            if rides:
                evals = server.read_evaluations(kind, r, targets, {c.node_id: replies[c.node_id] for c in targets},
                                                EVALUATION, method)
            if accepted:
                method.aggregate(step, r, accepted)
            phase_seconds[step.name] = round(time.perf_counter() - ts, 4)
            if not accepted:
                log.warning("round %d %s: no valid reply; the rest of the round is skipped", r + 1, step.name)
                break
        te = time.perf_counter()
        gone = {server.client_id_of(n) for n in failures} | set(rejected)
        rest = [c for c in server.clients if c.client_id not in gone and c.client_id not in evals]
        deployed = array_record(method.deployed()) if method.deploys_global else None
        if rest:  # clients that did not finish the round, or everyone when the server's model is deployed
            evals.update(server.evaluate(r, rest, method, deployed))
        evals = {cid: evals[cid] for cid in sorted(evals)}
        t1 = time.perf_counter()
        server.finish_round(r, server.metric_rows(r, evals, method), {
            "round": r + 1, **comm,
            "participants": [c.client_id for c in part],
            "took_part": took_part,
            "accepted": accepted_by_step,
            "evaluated": sorted(evals),
            "dropped": {str(server.client_id_of(n)): why for n, why in failures.items()},
            "rejected": {str(k): v for k, v in rejected.items()},
            **method.round_record(),
            "exchanges": len(phase_seconds) + bool(rest),
            "wall_seconds": round(t1 - t0, 4),
            "phase_seconds": {**phase_seconds, "evaluate": round(t1 - te, 4)},
        })
    return method.summary_extra()


def run_server(grid: Grid, cfg: RunConfig, opts: FlowerOptions, data=None) -> dict:
    """Register the clients, run the rounds, write the files; returns the summary. Nothing is written before the
    clients are registered, so a run refused at registration leaves no file. ``data``: see ``make_server_app``."""
    if not cfg.spec.flower:
        raise ValueError(f"method {cfg.method!r} does not run on Flower ({', '.join(methods.names(flower=True))} do)")
    if cfg.paper_phase == "local":
        raise ValueError("--baseline-eval local runs in the in-process simulator only (the Flower apps evaluate "
                         "the global model)")
    if cfg.eval_local_epochs:
        raise ValueError("--eval-local-epochs (a diagnostic) runs in the in-process simulator only")
    if privacy.is_record_dp(cfg) and cfg.threshold != "val-quantile":
        raise ValueError(f"--method {cfg.method} on Flower needs --threshold val-quantile (with --val-fraction > 0): "
                         "a threshold set on the protected training rows would leave the client unaccounted")
    t0 = time.perf_counter()
    server = FlowerServer(grid, cfg, opts)
    server.register()
    server.rec.open()
    server.rec.write("config.json", {**cfg.to_dict(), "flower": opts.__dict__})
    extra = run_rounds(server)
    if data is not None:
        extra = {"data": runrecord.data_record(cfg, data), **(extra or {})}
        test_rows = runrecord.test_rows_text(data)
        if test_rows is not None:
            server.rec.write_text(rundir.TEST_ROWS, test_rows)
    summary = server.summary(time.perf_counter() - t0, extra)
    server.rec.write("summary.json", summary)
    server.summary_ = summary
    return summary
