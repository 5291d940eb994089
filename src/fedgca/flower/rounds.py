"""The Flower ServerApp's driver of a method (``fedgca.algorithms``): its steps as message exchanges.

Each round: the method's first step goes to the sampled clients (message type ``train``), each later step
(``train.<step>``) to the clients whose reply the previous step accepted; every reply is decoded
(``validation.decode_reply``) and checked by the method, a late or failed reply drops its node, a rejected one
is recorded; the method aggregates the accepted replies in client-id order, as the simulator's driver
(``fedgca.simulation.driver``) does. The clients that deploy their own models send their evaluation with the
last step's reply; the others (and every client when the server's model is deployed) get an ``evaluate``.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from flwr.serverapp import Grid

from fedgca import methods, privacy, rundir, runrecord
from fedgca.algorithms import method_for
from fedgca.config import RunConfig
from fedgca.flower import checkpoint
from fedgca.flower.choice import ServerChoice
from fedgca.flower.config import FlowerOptions
from fedgca.flower.records import (
    CONFIG,
    EVALUATION,
    array_record,
    payload_bytes,
    step_message_type,
)
from fedgca.flower.secure_rounds import require_masks, run_secure_rounds
from fedgca.flower.server import FlowerServer
from fedgca.flower.validation import decode_reply
from fedgca.protocol.gca import UploadError

log = logging.getLogger("fedgca.flower")


@dataclass
class _Round:
    """What one round has gathered so far: who is still in, who left or was rejected, bytes, timings."""

    r: int
    cfgrec: object
    targets: list  # the clients the next step goes to
    failures: dict = field(default_factory=dict)  # node → why it dropped out
    rejected: dict = field(default_factory=dict)  # client → why its reply was refused
    accepted: dict = field(default_factory=dict)  # step → the client ids it accepted
    evals: dict = field(default_factory=dict)  # client → its evaluation
    comm: dict = field(default_factory=lambda: {"bytes_up": 0, "bytes_down": 0, "uploads": 0})
    seconds: dict = field(default_factory=dict)  # step → wall seconds
    exchanges: int = 0


def _exchange_step(server: FlowerServer, method, rnd: _Round, step, dz: int) -> dict:
    """A step over messages: the payload to the step's clients, each reply decoded and checked by the method;
    returns the accepted replies {client id: Reply}."""
    kind, sent = step_message_type(method, step), method.send(step, rnd.r)
    records = {CONFIG: rnd.cfgrec} if sent is None else {CONFIG: rnd.cfgrec, step.sends: array_record(sent)}
    msgs = [server.message_to(c.node_id, kind, rnd.r, **records) for c in rnd.targets]
    rnd.comm["bytes_down"] += sum(payload_bytes(m.content) for m in msgs)
    replies, lost = server.exchange(kind, rnd.r, msgs)
    rnd.failures.update(lost)
    rides = step == method.steps[-1] and not method.deploys_global  # the client's evaluation came along
    accepted = {}
    for c in rnd.targets:
        if c.node_id not in replies:
            continue
        try:
            accepted[c.client_id] = method.check(step, decode_reply(replies[c.node_id].content, step, evaluation=rides),
                                                 c.num_examples, dz)
        except UploadError as e:
            rnd.rejected[c.client_id] = str(e)
            server.reject(kind, rnd.r, c, str(e))
    rnd.comm["bytes_up"] += sum(rep.nbytes for rep in accepted.values())
    rnd.comm["uploads"] += method.uploads(step, accepted)
    rnd.exchanges += 1
    rnd.targets = [c for c in rnd.targets if c.client_id in accepted]
    if rides:
        rnd.evals = server.read_evaluations(kind, rnd.r, rnd.targets,
                                            {c.node_id: replies[c.node_id] for c in rnd.targets}, EVALUATION, method)
    return accepted


def run_rounds(server: FlowerServer, ckpt: dict | None = None) -> dict:
    """Every round of the run's method — from the checkpoint ``ckpt``'s next round when resuming — with a server
    checkpoint after each (``flower.checkpoint``); returns the method's summary blocks."""
    sizes = [c.num_examples for c in server.clients]
    cfg = privacy.message_config(server.cfg, sizes)  # a calibrated DP σ written out for the clients
    method = method_for(cfg, server.kind, sizes)
    dz = method.latent_dim = int(server.template.latent_dim)
    note = method.size_note(sizes)  # it may refuse the federation (a secure method: fewer than 2 a round)
    if note:
        log.warning("%s", note)
    method.start(server.template.state_dict(), len(server.clients))
    selection = ServerChoice(server, cfg, method)  # the deployed models: --selection's, or the federation's round
    if ckpt is None:
        selection.start()
    else:
        method.load_state_dict(ckpt["method"])
        selection.load_state_dict(ckpt["selection"])
    if cfg.spec.secure:  # one SecAgg+ aggregation a round, nothing per client in the clear
        require_masks(server.clients)
        run_secure_rounds(server, cfg, method, selection, ckpt)
        return {**(method.summary_extra() or {}), **selection.deploy()}
    for r in range(0 if ckpt is None else ckpt["round"] + 1, cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        server.round_extra = selection.round_config()
        rnd = _Round(r, server.config(r, cfg, **server.round_extra), part)
        for step in method.steps:
            ts = time.perf_counter()
            accepted = _exchange_step(server, method, rnd, step, dz)
            rnd.accepted[step.name] = sorted(c.client_id for c in rnd.targets)
            if accepted:
                method.aggregate(step, r, accepted)
            rnd.seconds[step.name] = round(time.perf_counter() - ts, 4)
            if not accepted:
                log.warning("round %d %s: no valid reply; the rest of the round is skipped", r + 1, step.name)
                break
        te = time.perf_counter()
        gone = {server.client_id_of(n) for n in rnd.failures} | set(rnd.rejected)
        rest = [c for c in server.clients if c.client_id not in gone and c.client_id not in rnd.evals]
        deployed = array_record(method.deployed()) if method.deploys_global else None
        if rest:  # clients that did not finish the round, or everyone when the server's model is deployed
            rnd.evals.update(server.evaluate(r, rest, method, deployed))
        evals = {cid: rnd.evals[cid] for cid in sorted(rnd.evals)}
        t1 = time.perf_counter()
        server.finish_round(r, server.metric_rows(r, evals, method), {
            "round": r + 1, **rnd.comm,
            "participants": [c.client_id for c in part],
            "took_part": rnd.accepted.get(method.steps[0].name, []),
            "accepted": rnd.accepted,
            "evaluated": sorted(evals),
            "dropped": {str(server.client_id_of(n)): why for n, why in rnd.failures.items()},
            "rejected": {str(k): v for k, v in rnd.rejected.items()},
            **method.round_record(),
            "exchanges": rnd.exchanges + bool(rest),
            "wall_seconds": round(t1 - t0, 4),
            "phase_seconds": {**rnd.seconds, "evaluate": round(t1 - te, 4)},
        })
        selection.observe(r, evals)
        checkpoint.save(server, r, method, selection)
    return {**(method.summary_extra() or {}), **selection.deploy()}


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
    server = FlowerServer(grid, cfg, opts)
    out = Path(opts.out_dir) if opts.out_dir else None
    ckpt = None
    if opts.resume:  # the run in out-dir, with its options and federation, from its checkpoint (reads only)
        checkpoint.check_config(out, cfg)
        ckpt = checkpoint.load(out)
    if ckpt is not None:
        server.run_name, server.resume_round, server.wall_before = ckpt["run_name"], ckpt["round"], ckpt["wall"]
        log.info("resuming %s after round %d", out, ckpt["round"] + 1)
    else:
        server.run_name = checkpoint.new_run_name(cfg)
    server.register()
    if ckpt is not None:
        checkpoint.check_federation(ckpt["clients"], server.clients)
        if json.dumps(server.preprocessor) != (ckpt["preprocessor"] or "null"):
            raise checkpoint.ResumeRefused("resume: the nodes' data give another preprocessing than the run's")
        server.rows, server.comm = list(ckpt["rows"]), list(ckpt["comm"])
        server.rec.open(rounds=list(ckpt["rounds_log"]))
    else:
        server.rec.open()
        server.rec.write("config.json", {**cfg.to_dict(), "flower": {**opts.__dict__, "resume": False}})
    extra = run_rounds(server, ckpt)
    if data is not None:
        extra = {"data": runrecord.data_record(cfg, data), **(extra or {})}
        test_rows = runrecord.test_rows_text(data)
        if test_rows is not None:
            server.rec.write_text(rundir.TEST_ROWS, test_rows)
    summary = server.summary(server.elapsed(), extra)
    server.rec.write("summary.json", summary)
    server.summary_ = summary
    return summary
