"""The per-method round loops of the Flower ServerApp: GCA, Single-Client, and parameter sharing.

Each loop drives the clients through ``FlowerServer.exchange`` and applies the
same protocol functions as the simulator: GCA's server rule
(``gca.aggregate_codes``, seed ``int_seed(seed, "cluster", r)``), and the
parameter-sharing rules of ``fedgca.protocol.server_rules`` (DP-FedAvg's
seeded noise included).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import torch
from flwr.serverapp import Grid

from fedgca import methods, privacy, rundir, runrecord, seeding
from fedgca.config import RunConfig
from fedgca.flower.config import FlowerOptions
from fedgca.flower.records import (
    ARRAYS,
    BROADCAST,
    CONFIG,
    METRICS,
    array_record,
    config_record,
    model_state,
    numpy_dict,
    payload_bytes,
)
from fedgca.flower.server import FlowerServer
from fedgca.flower.validation import check_codes, check_params
from fedgca.protocol import dpfedavg, gca, sampling, server_rules
from fedgca.protocol.clustering import ClusterSummary
from fedgca.protocol.gca import UploadError

log = logging.getLogger("fedgca.flower")


def run_gca(server: FlowerServer) -> None:
    from fedgca.training.gca import gca_config

    cfg = privacy.message_config(server.cfg, [c.num_examples for c in server.clients])
    gcfg = gca_config(cfg, server.kind)
    dz = int(server.template.latent_dim)
    previous = None  # the last broadcast (--gmm-warm-start starts the EM there)
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r)  # carries eval_recon_epochs, a RunConfig option
        replies, failures = server.exchange("train", r, [server.message_to(c.node_id, "train", r, **{CONFIG: cfgrec})
                                                         for c in part])
        accepted: dict[int, np.ndarray] = {}
        rejected: dict[int, str] = {}
        for c in part:
            if c.node_id not in replies:
                continue
            try:
                accepted[c.client_id] = check_codes(replies[c.node_id].content,
                                                    max_rows=gca.upload_size(c.num_examples, cfg.rho), latent_dim=dz)
            except UploadError as e:
                rejected[c.client_id] = str(e)
                server.reject("train", r, c, str(e))
        t1 = time.perf_counter()
        aligned, broadcast_k, bytes_down = [], 0, 0
        align_failures: dict[int, str] = {}
        evals: dict[int, dict] = {}
        if accepted:
            uploads = [accepted[i] for i in sorted(accepted)]  # pooled in client-id order, as the simulator does
            payload = gca.broadcast_payload(gca.aggregate_codes(uploads, gcfg, seeding.int_seed(cfg.seed, "cluster", r),
                                                                previous))
            previous = ClusterSummary(payload["centroids"], payload["counts"]) if gcfg.warm_start else None
            broadcast_k = int(len(payload["counts"]))
            t2 = time.perf_counter()
            targets = [c for c in part if c.client_id in accepted]
            msgs = [server.message_to(c.node_id, "train.align", r, **{CONFIG: cfgrec, BROADCAST: array_record(payload)})
                    for c in targets]
            bytes_down = sum(payload_bytes(m.content) for m in msgs)
            areplies, align_failures = server.exchange("train.align", r, msgs)
            aligned = [c.client_id for c in targets if c.node_id in areplies]
            evals = server.read_evaluations("train.align", r, targets, areplies)  # the evaluation came along
        else:
            t2 = t1
            log.warning("round %d: no valid upload; clustering and alignment skipped", r + 1)
        t3 = time.perf_counter()
        gone = {server.client_id_of(n) for n in (*failures, *align_failures)} | set(rejected)
        rest = [c for c in server.clients if c.client_id not in gone and c.client_id not in evals]
        if rest:  # clients not aligned this round (φ < 1, or no valid upload): a third exchange, for them only
            evals.update(server.evaluate(r, rest))
        evals = {cid: evals[cid] for cid in sorted(evals)}
        t4 = time.perf_counter()
        server.finish_round(r, server.metric_rows(r, evals, gcfg), {
            "round": r + 1,
            "bytes_up": int(sum(u.nbytes for u in accepted.values())),
            "bytes_down": int(bytes_down),
            "uploads": int(sum(len(u) for u in accepted.values())),
            "participants": [c.client_id for c in part],
            "took_part": sorted(accepted),
            "aligned": aligned,
            "evaluated": sorted(evals),
            "dropped": {str(server.client_id_of(n)): why for n, why in {**failures, **align_failures}.items()},
            "rejected": {str(k): v for k, v in rejected.items()},
            "broadcast_k": broadcast_k,
            "exchanges": 1 + bool(accepted) + bool(rest),  # train, train.align (+ evaluate for the others)
            "wall_seconds": round(t4 - t0, 4),
            "phase_seconds": {"train": round(t1 - t0, 4), "cluster": round(t2 - t1, 4), "align": round(t3 - t2, 4),
                              "evaluate": round(t4 - t3, 4)},
        })


def run_single(server: FlowerServer) -> dict:
    """Single-Client on a deployment: each sampled node trains its own model; no parameters or codes travel."""
    cfg = server.cfg
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r)
        replies, failures = server.exchange("train", r, [server.message_to(c.node_id, "train", r, **{CONFIG: cfgrec})
                                                         for c in part])
        t1 = time.perf_counter()
        gone = {server.client_id_of(n) for n in failures}
        evals = server.evaluate(r, [c for c in server.clients if c.client_id not in gone])
        t2 = time.perf_counter()
        server.finish_round(r, server.metric_rows(r, evals), {
            "round": r + 1, "bytes_up": 0, "bytes_down": 0, "uploads": 0,
            "participants": [c.client_id for c in part],
            "took_part": sorted(server.client_id_of(n) for n in replies),
            "evaluated": sorted(evals),
            "dropped": {str(server.client_id_of(n)): why for n, why in failures.items()},
            "rejected": {},
            "wall_seconds": round(t2 - t0, 4),
            "phase_seconds": {"train": round(t1 - t0, 4), "evaluate": round(t2 - t1, 4)},
        })
    return {}


def run_baseline(server: FlowerServer) -> dict:
    """Parameter-sharing rounds with fedgca's own server rule (``fedgca.protocol.server_rules``), as the simulator."""
    cfg = privacy.message_config(server.cfg, [c.num_examples for c in server.clients])
    rule_opts = server_rules.RuleOptions.of(cfg)
    arrays = array_record(server.template.state_dict())  # θ^(0): client 0's initial model, as in the simulator
    clip_norms: list[list[float]] = []
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r)
        msgs = [server.message_to(c.node_id, "train", r, **{ARRAYS: arrays, CONFIG: cfgrec}) for c in part]
        bytes_down = sum(payload_bytes(msg.content) for msg in msgs)
        replies, failures = server.exchange("train", r, msgs)
        valid, decoded, rejected = [], [], {}
        for c in part:
            if c.node_id not in replies:
                continue
            try:
                decoded.append(check_params(replies[c.node_id].content, arrays, c.num_examples))
                valid.append(replies[c.node_id])
            except UploadError as e:
                rejected[c.client_id] = str(e)
                server.reject("train", r, c, str(e))
        if valid:
            global_params = model_state(numpy_dict(arrays))
            stacked = {k: torch.stack([torch.as_tensor(d[k], device="cpu") for d in decoded]) for k in global_params}
            sizes = [int(v.content[METRICS]["num-examples"]) for v in valid]
            tau = torch.tensor([float(v.content[METRICS]["local-steps"]) for v in valid], dtype=torch.float64,
                               device="cpu")  # the server aggregates on the CPU
            new, norms = server_rules.aggregate(cfg.spec.server_rule, r, global_params, stacked, sizes, rule_opts, tau)
            if norms is not None:
                clip_norms.append(norms.tolist())
            arrays = array_record(new)
        else:
            log.warning("round %d: no valid model update; the global model is unchanged", r + 1)
        t1 = time.perf_counter()
        gone = {server.client_id_of(n) for n in failures} | set(rejected)
        targets = [c for c in server.clients if c.client_id not in gone]
        evals = server.evaluate(r, targets, arrays)
        t2 = time.perf_counter()
        took = sorted(server.client_id_of(v.metadata.src_node_id) for v in valid)
        server.finish_round(r, server.metric_rows(r, evals), {
            "round": r + 1,
            "bytes_up": int(sum(payload_bytes(v.content) for v in valid)),
            "bytes_down": int(bytes_down),
            "uploads": len(valid),
            "participants": [c.client_id for c in part],
            "took_part": took,
            "evaluated": sorted(evals),
            "dropped": {str(server.client_id_of(n)): why for n, why in failures.items()},
            "rejected": {str(k): v for k, v in rejected.items()},
            "wall_seconds": round(t2 - t0, 4),
            "phase_seconds": {"train": round(t1 - t0, 4), "evaluate": round(t2 - t1, 4)},
        })
    extra = {"server_rule": "fedgca.protocol.server_rules (the simulator's)"}
    spec = cfg.spec
    if spec.server_rule == "dpfedavg":
        extra["dp"] = dpfedavg.accounting_record(
            sigma=cfg.dp_sigma, clip=cfg.dp_clip, delta=cfg.dp_delta, rounds=cfg.rounds, clients=cfg.clients,
            participants=sampling.num_participants(cfg.participation, cfg.clients), clip_norms=clip_norms)
    if spec.client_term == "proximal":
        extra["fedprox"] = {"mu": cfg.fedprox_mu, "effective_coef": cfg.fedprox_coef,
                            "relation": "c = μ / (2B) (fedgca.protocol.fedprox); the client adds c·||θ − θ^(r)||²"}
    return extra


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
    loop = {"gca": run_gca, "single-site": run_single}.get(cfg.spec.family, run_baseline)
    extra = loop(server)
    if data is not None:
        extra = {"data": runrecord.data_record(cfg, data), **(extra or {})}
        test_rows = runrecord.test_rows_text(data)
        if test_rows is not None:
            server.rec.write_text(rundir.TEST_ROWS, test_rows)
    summary = server.summary(time.perf_counter() - t0, extra)
    server.rec.write("summary.json", summary)
    server.summary_ = summary
    return summary
