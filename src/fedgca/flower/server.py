"""Server-side orchestration of the fedgca Flower apps (the body of ``server_app.main``).

One round of GCA over the Message API (SPEC §1):

1. ``train`` to the sampled clients → each replies with its ⌊ρ·N_i⌋ codes;
   a reply that is late, an error, or not exactly one finite float32 array of
   shape (≤ ⌊ρ·N_i⌋, d_z) is dropped or rejected, with a log line;
2. the server pools the accepted codes in client-id order and clusters them
   (``gca.aggregate_codes``, seed ``int_seed(seed, "cluster", r)``);
3. ``train.align`` with the centroids and counts to the clients whose upload
   was accepted;
4. ``evaluate`` to every registered client not dropped in this round.

Parameter-sharing baselines use Flower's strategies (``FedAvg``,
``FedProx``, ``DifferentialPrivacyServerSideFixedClipping``) and a
``FedNova`` strategy whose rule is ``fedgca.protocol.fednova.aggregate``,
driven by the same robust exchange loop.

Everything the server sees is recorded under ``out-dir``: ``messages.jsonl``
(every message sent and every reply received: records, array names,
dtypes, shapes, bytes, and what happened to it), ``rounds.jsonl`` (one line
per finished round, written as it finishes), ``comm.json``, ``metrics.csv``,
``summary.json`` and ``config.json``.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fedgca import seeding
from fedgca.config import RunConfig
from fedgca.flower import owndata
from fedgca.flower.config import FlowerOptions
from fedgca.flower.records import (
    ARRAYS, BROADCAST, CODES, CODES_ARRAY, CONFIG, INFO, METRICS, SETUP, STATS, array_record, config_record,
    describe, numpy_dict, payload_bytes,
)
from fedgca.models import param_count
from fedgca.protocol import dpfedavg, gca, sampling
from fedgca.protocol.gca import UploadError
from fedgca.provenance import code_version
from fedgca import methods, rundir
from fedgca.evaluation.selection import protocol_results

log = logging.getLogger("fedgca.flower")
METRICS_KEYS = ("accuracy", "auroc", "auprc", "train_error", "val_error")
POLL_SECONDS = 0.2
PARAMETER_METHODS = methods.names("parameter-sharing", flower=True)


@dataclass(frozen=True)
class Client:
    node_id: int
    client_id: int
    num_examples: int
    input_shape: tuple[int, ...]
    has_val: bool = False


class Recorder:
    """The server's files. Without an out-dir it only keeps things in memory."""

    def __init__(self, out_dir: str):
        self.out = Path(out_dir) if out_dir else None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            for name in ("messages.jsonl", "rounds.jsonl"):
                (self.out / name).write_text("")
        self.messages: list[dict] = []
        self.rounds: list[dict] = []

    def _append(self, name: str, entry: dict) -> None:
        if self.out is not None:
            with (self.out / name).open("a") as f:
                f.write(json.dumps(entry, default=_jsonable) + "\n")

    def message(self, entry: dict) -> None:
        self.messages.append(entry)
        self._append("messages.jsonl", entry)

    def round(self, entry: dict) -> None:
        self.rounds.append(entry)
        self._append("rounds.jsonl", entry)

    def write(self, name: str, value) -> None:
        if self.out is not None:
            tmp = self.out / (name + ".tmp")
            tmp.write_text(json.dumps(value, indent=2, default=_jsonable))
            os.replace(tmp, self.out / name)

    def metrics_csv(self, rows: list[dict]) -> None:
        if self.out is None:
            return
        rundir.write_metrics(self.out, rows)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


class FlowerServer:
    """State shared by the GCA and the baseline loops: the grid, the clients, the files."""

    def __init__(self, grid: Grid, cfg: RunConfig, opts: FlowerOptions):
        self.grid, self.cfg, self.opts = grid, cfg, opts
        self.rec = Recorder(opts.out_dir)
        self.clients: list[Client] = []
        self.kind = "tabular"
        self.rows: list[dict] = []
        self.comm: list[dict] = []
        self.template = None

    # ------------------------------------------------------------------ messaging

    def _message(self, node_id: int, message_type: str, r: int, **records) -> Message:
        ttl = self.opts.reply_timeout + 60.0  # a message a node never picked up expires instead of lingering
        return Message(RecordDict(records), dst_node_id=int(node_id), message_type=message_type,
                       group_id=str(r + 1), ttl=ttl)

    def _cid(self, node_id: int):
        return next((c.client_id for c in self.clients if c.node_id == node_id), None)

    def exchange(self, phase: str, r: int, messages) -> tuple[dict[int, Message], dict[int, str]]:
        """Push, then pull until every reply is in or ``reply-timeout`` passes (then the node is dropped)."""
        messages = list(messages)
        for m in messages:
            self.rec.message({"round": r + 1, "phase": phase, "direction": "down", "node_id": m.metadata.dst_node_id,
                              "client_id": self._cid(m.metadata.dst_node_id), "payload_bytes": payload_bytes(m.content),
                              "records": describe(m.content)})
        dst = [int(m.metadata.dst_node_id) for m in messages]
        ids = list(self.grid.push_messages(messages)) if messages else []
        failures: dict[int, str] = {}
        pending: dict[str, int] = {}
        for node, mid in zip(dst, ids + [None] * (len(dst) - len(ids))):
            if mid:
                pending[str(mid)] = node
            else:
                failures[node] = "message could not be pushed to the SuperLink"
        replies: dict[int, Message] = {}
        deadline = time.monotonic() + self.opts.reply_timeout
        while pending:
            for rep in self.grid.pull_messages(list(pending)):
                node = pending.pop(str(rep.metadata.reply_to_message_id), None)
                if node is None:
                    continue
                if rep.has_error():
                    failures[node] = f"client error {rep.error.code}: {_first_line(rep.error.reason)}"
                else:
                    replies[node] = rep
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        for node in pending.values():
            failures[node] = f"no reply within {self.opts.reply_timeout:g} s"
        for node, rep in replies.items():
            self.rec.message({"round": r + 1, "phase": phase, "direction": "up", "node_id": node,
                              "client_id": self._cid(node), "status": "received",
                              "payload_bytes": payload_bytes(rep.content), "records": describe(rep.content)})
        for node, why in failures.items():
            log.warning("round %d %s: dropping node %d (client %s): %s", r + 1, phase, node, self._cid(node), why)
            self.rec.message({"round": r + 1, "phase": phase, "direction": "up", "node_id": node,
                              "client_id": self._cid(node), "status": "dropped", "reason": why})
        return replies, failures

    def reject(self, phase: str, r: int, client: Client, why: str) -> None:
        log.warning("round %d %s: rejected reply of client %d (node %d): %s", r + 1, phase, client.client_id,
                    client.node_id, why)
        self.rec.message({"round": r + 1, "phase": phase, "direction": "up", "node_id": client.node_id,
                          "client_id": client.client_id, "status": "rejected", "reason": why})

    # ------------------------------------------------------------------ registration

    def wait_for_nodes(self) -> list[int]:
        deadline = time.monotonic() + self.opts.wait_timeout
        while True:
            nodes = sorted(int(n) for n in self.grid.get_node_ids())
            if len(nodes) >= self.opts.min_nodes or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not nodes:
            raise RuntimeError(f"no SuperNode connected within {self.opts.wait_timeout:g} s")
        if len(nodes) < self.opts.min_nodes:
            log.warning("only %d of %d nodes connected after %g s; starting with them", len(nodes),
                        self.opts.min_nodes, self.opts.wait_timeout)
        return nodes

    def register(self) -> None:
        """Ask every node who it is (and, for own data, fit the preprocessing federatedly)."""
        nodes = self.wait_for_nodes()
        cfgrec = config_record(self.cfg, round=-1)
        replies, _ = self.exchange("query.info", -1, [self._message(n, "query.info", -1, **{CONFIG: cfgrec})
                                                      for n in nodes])
        infos = {n: dict(rep.content[INFO]) for n, rep in replies.items() if INFO in rep.content.config_records}
        sources = {i["source"] for i in infos.values()}
        if len(sources) > 1:
            raise RuntimeError("nodes mix built-in partitions and own CSV data; use one kind per federation")
        if sources == {"csv"}:
            infos = self._fit_own_preprocessing(infos, cfgrec)
        clients: dict[int, Client] = {}
        for node, i in sorted(infos.items()):
            cid = int(i["client-id"])
            if cid in clients:
                log.warning("node %d claims client id %d, already taken by node %d: ignored", node, cid,
                            clients[cid].node_id)
                continue
            clients[cid] = Client(node, cid, int(i["num-examples"]), tuple(int(s) for s in i["input-shape"]))
        shapes = {c.input_shape for c in clients.values()}
        if len(shapes) != 1:
            raise RuntimeError(f"clients disagree on the input shape: {sorted(shapes)}")
        if not clients:
            raise RuntimeError("no client answered the registration query")
        self.clients = [clients[k] for k in sorted(clients)]
        from fedgca.models import init_model

        self.template = init_model(self.cfg.seed, self.clients[0].input_shape, 0)
        self.kind = "tabular" if len(self.clients[0].input_shape) == 1 else "vision"
        log.info("registered %d clients: %s", len(self.clients),
                 ", ".join(f"{c.client_id} (node {c.node_id}, N={c.num_examples})" for c in self.clients))

    def _fit_own_preprocessing(self, infos: dict, cfgrec: ConfigRecord) -> dict:
        digests = [i["schema-digest"] for i in infos.values()]
        common = max(set(digests), key=digests.count)
        for node in [n for n, i in infos.items() if i["schema-digest"] != common]:
            log.warning("node %d uses a different schema file (digest %s ≠ %s): excluded", node,
                        infos[node]["schema-digest"], common)
            infos.pop(node)
        replies, _ = self.exchange("query.stats", -1, [self._message(n, "query.stats", -1, **{CONFIG: cfgrec})
                                                       for n in infos])
        stats, contributors = [], []
        d = None
        for node, rep in sorted(replies.items()):
            try:
                s = numpy_dict(rep.content[STATS])
                d = d or len(s["mean"])
                ok = (s["n"].shape == (1,) and s["n"][0] > 0 and s["mean"].shape == (d,) and s["m2"].shape == (d, d)
                      and all(np.isfinite(v).all() for v in s.values()))
            except (KeyError, TypeError, ValueError):
                ok = False
            if not ok:
                log.warning("node %d sent malformed or non-finite statistics: excluded", node)
                continue
            stats.append(s)
            contributors.append(node)
        if not stats:
            raise RuntimeError("no node shared preprocessing statistics")
        node = next(iter(infos))
        schema = owndata.Schema.from_dict(json.loads(infos[node]["schema"]), f"schema of node {node}")
        pre = owndata.fit_from_stats(schema, stats)
        self.preprocessor = pre.to_dict()
        self.rec.write("preprocessor.json", self.preprocessor)
        setup = ConfigRecord({"json": json.dumps(self.preprocessor)})
        replies, _ = self.exchange("query.setup", -1, [self._message(n, "query.setup", -1, **{CONFIG: cfgrec, SETUP: setup})
                                                       for n in contributors])
        return {n: dict(rep.content[INFO]) for n, rep in replies.items()}

    # ------------------------------------------------------------------ rounds

    def participants(self, r: int) -> list[Client]:
        """The simulator's sampling (``fedgca.protocol.sampling``) over the registered clients in id order."""
        mask = sampling.participants(self.cfg.seed, r, len(self.clients), self.cfg.participation)
        return [c for c, m in zip(self.clients, mask.tolist()) if m]

    def evaluate(self, r: int, targets: list[Client], arrays: ArrayRecord | None = None, strategy=None) -> dict:
        """Per-client metrics of the deployed models {client_id: MetricRecord-as-dict}."""
        cfgrec = config_record(self.cfg, round=r)
        if strategy is None:
            msgs = [self._message(c.node_id, "evaluate", r, **{CONFIG: cfgrec}) for c in targets]
        else:
            msgs = list(strategy.configure_evaluate(r + 1, arrays, cfgrec, SubsetGrid(self.grid, targets)))
        replies, _ = self.exchange("evaluate", r, msgs)
        by_node = {c.node_id: c for c in targets}
        out = {}
        for node, rep in replies.items():
            c = by_node[node]
            try:
                m = dict(rep.content[METRICS])
                out[c.client_id] = {k: m[k.replace("_", "-")] for k in METRICS_KEYS} | {
                    f"{p}_{k}": list(m.get(f"{p}-{k.replace('_', '-')}", [])) for p in ("recon", "align")
                    for k in METRICS_KEYS}
            except (KeyError, TypeError) as e:
                self.reject("evaluate", r, c, f"malformed metrics ({e})")
        return out

    def metric_rows(self, r: int, evals: dict, gcfg=None) -> list[dict]:
        """Rows as the simulator's runner writes them; GCA adds one per reconstruction (alignment) epoch."""
        if not evals:
            return []
        rows = []
        # the paper evaluates GCA after every reconstruction epoch; without those evaluations, per round
        paper = methods.get(self.cfg.method).paper_phase if self.opts.eval_recon_epochs else "round"
        if self.cfg.method == "gca" and self.opts.eval_recon_epochs:
            for e in range(gcfg.recon_epochs):
                rows.append(_row(r, "recon", e, {c: _epoch(v, "recon", e) for c, v in evals.items()}, paper))
        if self.cfg.method == "gca" and self.cfg.eval_align_epochs:
            for e in range(gcfg.align_epochs):
                rows.append(_row(r, "align", e, {c: _epoch(v, "align", e) for c, v in evals.items()}, paper))
        rows.append(_row(r, "round", -1, evals, paper))
        return rows

    def finish_round(self, r: int, rows: list[dict], comm: dict) -> None:
        self.rows.extend(rows)
        self.comm.append(comm)
        self.rec.metrics_csv(self.rows)
        self.rec.write("comm.json", self.comm)
        last = rows[-1] if rows else {}
        self.rec.round({**comm, **{m: last.get(m) for m in ("accuracy", "auroc", "auprc")}})
        log.info("round %d/%d done in %.2f s: %s", r + 1, self.cfg.rounds, comm["wall_seconds"],
                 ", ".join(f"{m} {last[m]:.4f}" for m in ("accuracy", "auroc", "auprc") if m in last))
        if self.opts.round_pause > 0 and r + 1 < self.cfg.rounds:
            time.sleep(self.opts.round_pause)

    def summary(self, wall: float, extra: dict | None = None) -> dict:
        cfg = self.cfg
        has_val = cfg.val_fraction > 0 and all(r.get("val_error") == r.get("val_error") for r in self.rows
                                                if r["phase"] == "round")
        counts = [c["uploads"] for c in self.comm] or [0]
        s = {
            "engine": "flower", "dataset": cfg.dataset, "method": cfg.method, "seed": cfg.seed,
            "rounds": cfg.rounds, "clients": len(self.clients), "k": cfg.k, "rho": cfg.rho,
            "backend": cfg.backend, "weights": cfg.weights, "partition": cfg.partition,
            "input_dim": int(math.prod(self.clients[0].input_shape)), "input_shape": list(self.clients[0].input_shape),
            "latent_dim": int(self.template.latent_dim), "param_count": param_count(self.template),
            "client_ids": [c.client_id for c in self.clients], "client_sizes": [c.num_examples for c in self.clients],
            "uploads_per_round": _per_round(counts),
            "bytes_up_per_round": _per_round([c["bytes_up"] for c in self.comm] or [0]),
            "bytes_down_per_round": _per_round([c["bytes_down"] for c in self.comm] or [0]),
            "bytes_total": int(sum(c["bytes_up"] + c["bytes_down"] for c in self.comm)),
            "wall_seconds": round(wall, 3),
            "round_wall_seconds": [c["wall_seconds"] for c in self.comm],
            "code": code_version(),  # the server's; each client runs its own install
            "participation": [{"round": c["round"], "sampled": c["participants"], "took_part": c["took_part"],
                               "dropped": c["dropped"], "rejected": c["rejected"]} for c in self.comm],
        }
        if self.rows:
            s.update(protocol_results(self.rows, has_val))
        s.update(extra or {})
        return s


class SubsetGrid(Grid):
    """A view of a Grid whose ``get_node_ids`` is a given set: lets a Flower strategy address exactly
    the clients fedgca's (seeded) sampling chose."""

    def __init__(self, grid: Grid, clients: list[Client]):
        self._grid, self._ids = grid, [c.node_id for c in clients]

    def set_run(self, run) -> None:
        self._grid.set_run(run)

    @property
    def run(self):
        return self._grid.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self):
        return list(self._ids)

    def push_messages(self, messages):
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids):
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages, *, timeout=None):
        return self._grid.send_and_receive(messages, timeout=timeout)


def _first_line(text) -> str:
    lines = [ln for ln in str(text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _per_round(values: list[int]):
    return values[0] if len(set(values)) == 1 else float(np.mean(values))


def _epoch(v: dict, phase: str, e: int) -> dict:
    """A client's metrics after epoch e of a phase; a client that did not train this round has its round metrics."""
    if len(v[f"{phase}_accuracy"]) > e:
        return {k: v[f"{phase}_{k}"][e] for k in METRICS_KEYS}
    return {k: v[k] for k in METRICS_KEYS}


def _row(r: int, phase: str, epoch: int, per_client: dict[int, dict], paper_phase: str) -> dict:
    ids = sorted(per_client)
    vals = {k: [float(per_client[i][k]) for i in ids] for k in METRICS_KEYS}
    return {
        "round": r + 1, "phase": phase, "epoch": epoch + 1 if epoch >= 0 else "",
        **{k: float(np.mean(vals[k])) for k in METRICS_KEYS},
        "paper": int(phase == paper_phase),
        "per_client": {"client_id": ids, **{k: vals[k] for k in ("accuracy", "auroc", "auprc")}},
    }


# ============================================================================ GCA


def check_codes(content: RecordDict, *, max_rows: int, latent_dim: int) -> np.ndarray:
    """A GCA train reply must be exactly one ArrayRecord holding exactly one valid code array."""
    records = list(content.keys())
    if records != [CODES] or not isinstance(content[CODES], ArrayRecord):
        raise UploadError(f"reply must hold exactly one ArrayRecord {CODES!r}, got records {records}")
    arrays = list(content[CODES].keys())
    if arrays != [CODES_ARRAY]:
        raise UploadError(f"reply must hold exactly one array {CODES_ARRAY!r}, got {arrays}")
    arr = content[CODES][CODES_ARRAY]
    try:
        codes = arr.numpy()
    except Exception as e:  # noqa: BLE001 - any undecodable payload is a rejected upload
        raise UploadError(f"undecodable array ({type(e).__name__}: {e})") from None
    if str(codes.dtype) != arr.dtype or list(codes.shape) != list(arr.shape):
        raise UploadError(f"array metadata ({arr.dtype}, {list(arr.shape)}) does not match its data "
                          f"({codes.dtype}, {list(codes.shape)})")
    return gca.validate_upload(codes, max_rows=max_rows, latent_dim=latent_dim)


def run_gca(server: FlowerServer) -> None:
    from fedgca.training.gca import gca_config

    cfg = server.cfg
    gcfg = gca_config(cfg, server.kind)
    dz = int(server.template.latent_dim)
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r, **{"eval-recon-epochs": server.opts.eval_recon_epochs})
        replies, failures = server.exchange("train", r, [server._message(c.node_id, "train", r, **{CONFIG: cfgrec})
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
        if accepted:
            uploads = [accepted[i] for i in sorted(accepted)]  # pooled in client-id order, as the simulator does
            payload = gca.broadcast_payload(gca.aggregate_codes(uploads, gcfg, seeding.int_seed(cfg.seed, "cluster", r)))
            broadcast_k = int(len(payload["counts"]))
            t2 = time.perf_counter()
            targets = [c for c in part if c.client_id in accepted]
            msgs = [server._message(c.node_id, "train.align", r, **{CONFIG: cfgrec, BROADCAST: array_record(payload)})
                    for c in targets]
            bytes_down = sum(payload_bytes(m.content) for m in msgs)
            areplies, align_failures = server.exchange("train.align", r, msgs)
            aligned = [c.client_id for c in targets if c.node_id in areplies]
        else:
            t2 = t1
            log.warning("round %d: no valid upload; clustering and alignment skipped", r + 1)
        t3 = time.perf_counter()
        gone = {server._cid(n) for n in (*failures, *align_failures)} | set(rejected)
        evals = server.evaluate(r, [c for c in server.clients if c.client_id not in gone])
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
            "dropped": {str(server._cid(n)): why for n, why in {**failures, **align_failures}.items()},
            "rejected": {str(k): v for k, v in rejected.items()},
            "broadcast_k": broadcast_k,
            "wall_seconds": round(t4 - t0, 4),
            "phase_seconds": {"train": round(t1 - t0, 4), "cluster": round(t2 - t1, 4), "align": round(t3 - t2, 4),
                              "evaluate": round(t4 - t3, 4)},
        })


# ============================================================================ baselines


def make_strategy(cfg: RunConfig, num_sampled: int):
    """Flower's strategies where they are SPEC §2's rule; FedNova with fedgca's rule."""
    from flwr.serverapp.strategy import FedAvg, FedProx

    common = dict(fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=1, min_evaluate_nodes=1,
                  min_available_nodes=1, arrayrecord_key=ARRAYS, configrecord_key=CONFIG)
    if cfg.method == "fedavg":
        return FedAvg(**common)
    if cfg.method == "fedprox":
        # Flower's FedProx only forwards μ to the clients ("proximal-mu"); fedgca's client adds
        # c·||θ − θ^(r)||² with the effective coefficient c = fedprox_coef (see fedgca.protocol.fedprox).
        return FedProx(proximal_mu=cfg.fedprox_mu, **common)
    if cfg.method == "dpfedavg":
        return SeededDPFixedClipping(FedAvg(**common), noise_multiplier=cfg.dp_sigma, clipping_norm=cfg.dp_clip,
                                     num_sampled_clients=num_sampled, seed=cfg.seed)
    if cfg.method == "fednova":
        return FedNovaStrategy(**common)
    raise ValueError(f"method {cfg.method!r} does not run on Flower (GCA, fedavg, fedprox, fednova, dpfedavg do)")


def _dp_class():
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping

    return DifferentialPrivacyServerSideFixedClipping


class SeededDPFixedClipping(_dp_class()):
    """Flower's server-side fixed-clipping DP wrapper with its Gaussian noise drawn from a seeded stream.

    Flower draws the noise from NumPy's global generator; this wrapper seeds it
    with ``int_seed(seed, "dp-noise", r)`` for the aggregation call only (and
    restores it), so runs are reproducible. The rule itself is Flower's, which
    is SPEC §2's: clip each client's full delta to global L2 norm S, N_i-weighted
    FedAvg of the clipped models, N(0, (σS/m)²) per entry with m = the number of
    sampled clients.
    """

    def __init__(self, strategy, *, noise_multiplier: float, clipping_norm: float, num_sampled_clients: int,
                 seed: int):
        super().__init__(strategy, noise_multiplier, clipping_norm, num_sampled_clients)
        self.seed = seed

    def aggregate_train(self, server_round, replies):
        state = np.random.get_state()
        np.random.seed(seeding.int_seed(self.seed, "dp-noise", server_round - 1))
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            np.random.set_state(state)


def _fedavg_class():
    from flwr.serverapp.strategy import FedAvg

    return FedAvg


class FedNovaStrategy(_fedavg_class()):
    """FedNova (SPEC §2) as a Flower strategy: clients report τ_i ("local-steps") next to their model;
    the rule is ``fedgca.protocol.fednova.aggregate``."""

    def configure_train(self, server_round, arrays, config, grid):
        self.current_arrays = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

        from fedgca.flower.records import model_state
        from fedgca.protocol import fednova

        valid, _ = self._check_and_log_replies(list(replies), is_train=True)
        if not valid:
            return None, None
        global_params = model_state(numpy_dict(self.current_arrays))
        stacked = {k: torch.stack([torch.as_tensor(m.content[ARRAYS][k].numpy()) for m in valid]) for k in global_params}
        metrics = [next(iter(m.content.metric_records.values())) for m in valid]
        sizes = [float(mr["num-examples"]) for mr in metrics]
        tau = torch.tensor([float(mr["local-steps"]) for mr in metrics], dtype=torch.float64)
        new = fednova.aggregate(global_params, stacked, sizes, tau)
        return array_record(new), aggregate_metricrecords([m.content for m in valid], self.weighted_by_key)


def check_params(content: RecordDict, reference: ArrayRecord, num_examples: int) -> None:
    """A baseline train reply: the model (same names, shapes, dtypes as the global one, finite) and its metrics."""
    if set(content.keys()) != {ARRAYS, METRICS} or not isinstance(content[ARRAYS], ArrayRecord) \
            or not isinstance(content[METRICS], MetricRecord):
        raise UploadError(f"reply must hold ArrayRecord {ARRAYS!r} and MetricRecord {METRICS!r}, got {list(content.keys())}")
    got, ref = content[ARRAYS], reference
    if list(got.keys()) != list(ref.keys()):
        raise UploadError("model tensors differ in names from the global model")
    for k in ref.keys():
        try:
            a = got[k].numpy()
        except Exception as e:  # noqa: BLE001
            raise UploadError(f"undecodable tensor {k!r} ({type(e).__name__})") from None
        if a.shape != tuple(ref[k].shape) or str(a.dtype) != ref[k].dtype:
            raise UploadError(f"tensor {k!r} is {a.dtype}{list(a.shape)}, expected {ref[k].dtype}{list(ref[k].shape)}")
        if not np.isfinite(a).all():
            raise UploadError(f"tensor {k!r} contains NaN or inf")
    m = content[METRICS]
    if m.get("num-examples") != num_examples:
        raise UploadError(f"num-examples {m.get('num-examples')} ≠ the {num_examples} rows the client registered")
    tau = m.get("local-steps")
    if not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise UploadError(f"local-steps must be a positive number, got {tau!r}")


def run_baseline(server: FlowerServer) -> dict:
    cfg = server.cfg
    m = sampling.num_participants(cfg.participation, len(server.clients))
    strategy = make_strategy(cfg, m)
    arrays = array_record(server.template.state_dict())  # θ^(0): client 0's initial model, as in the simulator
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        part = server.participants(r)
        cfgrec = config_record(cfg, round=r)
        msgs = list(strategy.configure_train(r + 1, arrays, cfgrec, SubsetGrid(server.grid, part)))
        bytes_down = sum(payload_bytes(msg.content) for msg in msgs)
        replies, failures = server.exchange("train", r, msgs)
        valid, rejected = [], {}
        for c in part:
            if c.node_id not in replies:
                continue
            try:
                check_params(replies[c.node_id].content, arrays, c.num_examples)
                valid.append(replies[c.node_id])
            except UploadError as e:
                rejected[c.client_id] = str(e)
                server.reject("train", r, c, str(e))
        if valid:
            new, _ = strategy.aggregate_train(r + 1, valid)
            if new is not None:
                arrays = ArrayRecord({k: new[k] for k in arrays.keys()})
        else:
            log.warning("round %d: no valid model update; the global model is unchanged", r + 1)
        t1 = time.perf_counter()
        gone = {server._cid(n) for n in failures} | set(rejected)
        evals = server.evaluate(r, [c for c in server.clients if c.client_id not in gone], arrays, strategy)
        t2 = time.perf_counter()
        took = sorted(server._cid(v.metadata.src_node_id) for v in valid)
        server.finish_round(r, server.metric_rows(r, evals), {
            "round": r + 1,
            "bytes_up": int(sum(payload_bytes(v.content) for v in valid)),
            "bytes_down": int(bytes_down),
            "uploads": len(valid),
            "participants": [c.client_id for c in part],
            "took_part": took,
            "evaluated": sorted(evals),
            "dropped": {str(server._cid(n)): why for n, why in failures.items()},
            "rejected": {str(k): v for k, v in rejected.items()},
            "wall_seconds": round(t2 - t0, 4),
            "phase_seconds": {"train": round(t1 - t0, 4), "evaluate": round(t2 - t1, 4)},
        })
    extra = {"strategy": type(strategy).__name__}
    if cfg.method == "dpfedavg":
        dp = dpfedavg.accounting_record(sigma=cfg.dp_sigma, clip=cfg.dp_clip, delta=cfg.dp_delta, rounds=cfg.rounds,
                                        clients=cfg.clients, participants=sampling.num_participants(cfg.participation, cfg.clients))
        dp["noise_std"] = "σ·S/m with m = sampled clients (Flower's DifferentialPrivacyServerSideFixedClipping)"
        extra["dp"] = dp
    if cfg.method == "fedprox":
        extra["fedprox"] = {"mu": cfg.fedprox_mu, "effective_coef": cfg.fedprox_coef,
                            "relation": "c = μ / (2B) (fedgca.protocol.fedprox); the client adds c·||θ − θ^(r)||²"}
    return extra


# ============================================================================ entry


def run_server(grid: Grid, cfg: RunConfig, opts: FlowerOptions) -> dict:
    """Register the clients, run the rounds, write the files; returns the summary."""
    if not methods.get(cfg.method).flower:
        raise ValueError(f"method {cfg.method!r} does not run on Flower ({', '.join(methods.names(flower=True))} do)")
    t0 = time.perf_counter()
    server = FlowerServer(grid, cfg, opts)
    server.rec.write("config.json", {**cfg.to_dict(), "flower": opts.__dict__})
    server.register()
    extra = run_gca(server) if cfg.method == "gca" else run_baseline(server)
    summary = server.summary(time.perf_counter() - t0, extra)
    server.rec.write("summary.json", summary)
    server.summary_ = summary
    return summary
