"""Server-side orchestration of the fedgca Flower apps (the body of ``server_app.main``).

What the ServerApp does for every method: registers the nodes (and, for own
data, fits the preprocessing from their statistics), exchanges messages with a
reply timeout (a late or failed reply drops its node for the round, with a log
line), takes restarted nodes back, samples each round's clients as the
simulator does, collects evaluations and writes the files. What a round is —
its steps, what the server sends and does with the replies — is the method's
(``fedgca.algorithms``), driven by ``fedgca.flower.rounds``.

Everything the server sees is recorded under ``out-dir``: ``messages.jsonl``
(every message sent and every reply received: records, array names,
dtypes, shapes, bytes, and what happened to it), ``rounds.jsonl`` (one line
per finished round, written as it finishes), ``comm.json``, ``metrics.csv``,
``summary.json`` and ``config.json``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedgca import privacy, runrecord
from fedgca.config import RunConfig, evaluated_clients
from fedgca.data.encoding import fit_from_stats, private_bounds
from fedgca.evaluation.selection import DETECTION, METRIC_KEYS
from fedgca.flower import owndata
from fedgca.flower.choice import VALUE as SELECTION_VALUE
from fedgca.flower.config import FlowerOptions
from fedgca.flower.nodestate import RESUME_ROUND, RUN_NAME
from fedgca.flower.recorder import Recorder
from fedgca.flower.records import (
    ARRAYS,
    CONFIG,
    INFO,
    METRICS,
    SETUP,
    STATS,
    config_record,
    describe,
    numpy_dict,
    payload_bytes,
)
from fedgca.models import param_count
from fedgca.protocol import sampling

log = logging.getLogger("fedgca.flower")
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Client:
    node_id: int
    client_id: int
    num_examples: int
    input_shape: tuple[int, ...]
    has_val: bool = False
    masks: str = ""  # the SecAgg+ mask generator the node announced (fedgca.flower.masks)
    digest: str = ""  # what data it holds: its schema digest and partition count (a resume checks it)


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
        self.preprocessor: dict | None = None
        self._seen_nodes: set[int] = set()  # every node asked to register (so none is asked twice)
        self._rejoined: dict[int, dict[int, int]] = {}
        self.round_extra: dict = {}  # what the current round's messages carry besides the run config
        self.run_name = ""  # every message names the run (nodes key their saved state by it: flower.nodestate)
        self.resume_round = -1  # a resumed run: the last round the checkpoint completed (nodes restore to it)
        self.wall_before, self._t0 = 0.0, time.perf_counter()

    def elapsed(self) -> float:
        """The run's wall seconds so far (a resumed run's include those before its checkpoint)."""
        return self.wall_before + time.perf_counter() - self._t0

    def config(self, r: int, cfg: RunConfig | None = None, **extra) -> ConfigRecord:
        """A message's config record: the run config (``cfg``: the clients' copy, DP σ written out), the round, the
        run's name and resume point, and ``extra``."""
        return config_record(cfg or self.cfg, round=r, **{RUN_NAME: self.run_name, RESUME_ROUND: self.resume_round},
                             **extra)

    # ------------------------------------------------------------------ messaging

    def message_to(self, node_id: int, message_type: str, r: int, **records) -> Message:
        ttl = self.opts.reply_timeout + 60.0  # a message a node never picked up expires instead of lingering
        return Message(RecordDict(records), dst_node_id=int(node_id), message_type=message_type,
                       group_id=str(r + 1), ttl=ttl)

    def client_id_of(self, node_id: int):
        return next((c.client_id for c in self.clients if c.node_id == node_id), None)

    def exchange(self, phase: str, r: int, messages) -> tuple[dict[int, Message], dict[int, str]]:
        """Push, then pull until every reply is in or ``reply-timeout`` passes (then the node is dropped)."""
        messages = list(messages)
        for m in messages:
            self.rec.message({"round": r + 1, "phase": phase, "direction": "down", "node_id": m.metadata.dst_node_id,
                              "client_id": self.client_id_of(m.metadata.dst_node_id), "payload_bytes": payload_bytes(m.content),
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
                              "client_id": self.client_id_of(node), "status": "received",
                              "payload_bytes": payload_bytes(rep.content), "records": describe(rep.content)})
        for node, why in failures.items():
            log.warning("round %d %s: dropping node %d (client %s): %s", r + 1, phase, node, self.client_id_of(node), why)
            self.rec.message({"round": r + 1, "phase": phase, "direction": "up", "node_id": node,
                              "client_id": self.client_id_of(node), "status": "dropped", "reason": why})
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
        self._seen_nodes.update(nodes)
        cfgrec = self.config(-1)
        replies, _ = self.exchange("query.info", -1, [self.message_to(n, "query.info", -1, **{CONFIG: cfgrec})
                                                      for n in nodes])
        infos = {n: dict(rep.content[INFO]) for n, rep in replies.items() if INFO in rep.content.config_records}
        sources = {i["source"] for i in infos.values()}
        if len(sources) > 1:
            raise RuntimeError("nodes mix built-in partitions and own CSV data; use one kind per federation")
        if sources == {"csv"}:
            infos = self._fit_own_preprocessing(infos, cfgrec)
        elif privacy.stats_noise(self.cfg) is not None:
            raise ValueError("--dp-stats-sigma releases the per-site statistics own-data nodes fit the shared encoding "
                             "from; these nodes hold a built-in dataset, encoded without them")
        clients: dict[int, Client] = {}
        for node, i in sorted(infos.items()):
            cid = int(i["client-id"])
            if cid in clients:
                log.warning("node %d claims client id %d, already taken by node %d: ignored", node, cid,
                            clients[cid].node_id)
                continue
            clients[cid] = Client(node, cid, int(i["num-examples"]), tuple(int(s) for s in i["input-shape"]),
                                  masks=str(i.get("secagg-masks", "")),
                                  digest=f"{i.get('schema-digest', '')}/{i.get('num-partitions', '')}")
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
        node = next(iter(infos))
        schema = owndata.require_category_lists(
            owndata.Schema.from_dict(json.loads(infos[node]["schema"]), f"schema of node {node}"), f"schema of node {node}")
        privacy.refuse_plain_statistics(self.cfg)  # before any statistic leaves a node
        if privacy.stats_noise(self.cfg) is not None:  # what the nodes' release needs, checked before any is asked
            private_bounds(schema, f"schema of node {node}")
        replies, _ = self.exchange("query.stats", -1, [self.message_to(n, "query.stats", -1, **{CONFIG: cfgrec})
                                                       for n in infos])
        stats, contributors = [], []
        d = None
        # pooled in client-id order (not node-id order, which Flower draws at random): the same float sums as the
        # simulator's per-site fit, and a preprocessing that does not depend on who got which node id
        for node, rep in sorted(replies.items(), key=lambda kv: (int(infos[kv[0]]["client-id"]), kv[0])):
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
        pre = fit_from_stats(schema, stats)
        self.preprocessor = pre.to_dict()
        self.rec.write("preprocessor.json", self.preprocessor)
        setup = ConfigRecord({"json": json.dumps(self.preprocessor)})
        replies, _ = self.exchange("query.setup", -1, [self.message_to(n, "query.setup", -1, **{CONFIG: cfgrec, SETUP: setup})
                                                       for n in contributors])
        return {n: dict(rep.content[INFO]) for n, rep in replies.items()}

    # ------------------------------------------------------------------ rounds

    def rejoin(self, r: int) -> dict[int, int]:
        """Let restarted SuperNodes take their client's place: {client id: new node id}.

        A node that connected after registration and claims a registered client id (with the same
        row count and input shape) replaces that client's old node from this round on. A node with a
        ``state-dir`` restores its ClientApp state from its disk and goes on (``fedgca.flower.nodestate``);
        without one the state did not survive the restart: a GCA client starts again from its initial
        model, a baseline client with a fresh Adam.
        """
        known = {c.node_id for c in self.clients} | self._seen_nodes
        new = [n for n in sorted(int(x) for x in self.grid.get_node_ids()) if n not in known]
        if not new:
            return {}
        self._seen_nodes.update(new)
        cfgrec = self.config(-1)
        if self.preprocessor is not None:  # own data: the node needs the fitted preprocessing first
            setup = ConfigRecord({"json": json.dumps(self.preprocessor)})
            msgs = [self.message_to(n, "query.setup", r, **{CONFIG: cfgrec, SETUP: setup}) for n in new]
            replies, _ = self.exchange("query.setup", r, msgs)
        else:
            replies, _ = self.exchange("query.info", r, [self.message_to(n, "query.info", r, **{CONFIG: cfgrec})
                                                         for n in new])
        by_id = {c.client_id: i for i, c in enumerate(self.clients)}
        joined = {}
        for node, rep in sorted(replies.items()):
            try:
                info = dict(rep.content[INFO])
                cid, n = int(info["client-id"]), int(info["num-examples"])
                shape = tuple(int(v) for v in info["input-shape"])
            except (KeyError, TypeError, ValueError):
                log.warning("round %d: new node %d sent no usable registration info: ignored", r + 1, node)
                continue
            old = self.clients[by_id[cid]] if cid in by_id else None
            if old is None or (old.num_examples, old.input_shape) != (n, shape):
                log.warning("round %d: new node %d claims client %d, which is not a registered client with "
                            "N=%d and this input shape: ignored", r + 1, node, cid, n)
                continue
            self.clients[by_id[cid]] = dataclasses.replace(old, node_id=node)
            joined[cid] = node
            log.info("round %d: client %d rejoined on node %d (was node %d)", r + 1, cid, node, old.node_id)
        return joined

    def participants(self, r: int) -> list[Client]:
        """The simulator's sampling (``fedgca.protocol.sampling``) over the registered clients in id order.

        Restarted nodes are taken back first (``rejoin``); who rejoined is recorded with the round.
        """
        self._rejoined[r] = self.rejoin(r)
        mask = sampling.participants(self.cfg.seed, r, len(self.clients), self.cfg.participation)
        return [c for c, m in zip(self.clients, mask.tolist()) if m]

    def evaluate(self, r: int, targets: list[Client], method, arrays: ArrayRecord | None = None) -> dict:
        """Per-client metrics of the deployed models {client_id: metrics} (the server's model: ``arrays``)."""
        cfgrec = self.config(r, **self.round_extra)
        records = {CONFIG: cfgrec} if arrays is None else {ARRAYS: arrays, CONFIG: cfgrec}
        msgs = [self.message_to(c.node_id, "evaluate", r, **records) for c in targets]
        replies, _ = self.exchange("evaluate", r, msgs)
        return self.read_evaluations("evaluate", r, targets, replies, METRICS, method)

    def read_evaluations(self, kind: str, r: int, targets: list[Client], replies: dict, record: str, method) -> dict:
        """{client_id: metrics} from evaluation replies (an ``evaluate`` reply's ``metrics``, or the ``evaluation``
        a last step's reply carries); a malformed one is rejected, naming the client. Besides the deployed model's
        metrics, each of the method's evaluation points (``evaluation_points``) as a list over its epochs."""
        by_node = {c.node_id: c for c in targets}
        phases = [p for p, _ in method.evaluation_points()]
        out = {}
        for node, rep in replies.items():
            c = by_node[node]
            try:
                m = dict(rep.content[record])
                out[c.client_id] = {k: m[k.replace("_", "-")] for k in METRIC_KEYS} | {
                    f"{p}_{k}": list(m.get(f"{p}-{k.replace('_', '-')}", [])) for p in phases for k in METRIC_KEYS}
                if SELECTION_VALUE in m:  # --selection: the deployed model's signal value (fedgca.flower.choice)
                    out[c.client_id]["selection_value"] = float(m[SELECTION_VALUE])
            except (KeyError, TypeError) as e:
                self.reject(kind, r, c, f"malformed metrics ({e})")
        return out

    def metric_rows(self, r: int, evals: dict, method) -> list[dict]:
        """Rows as the simulator's runner writes them: one per evaluation point and epoch of the method (GCA: its
        reconstruction and alignment epochs), then the round's."""
        if not evals:
            return []
        rows = []
        paper = self.cfg.paper_phase
        for phase, epochs in method.evaluation_points():
            only = evaluated_clients(self.cfg, phase)  # one client alone: no row if it missed the round
            chosen = {c: v for c, v in evals.items() if only is None or c in only}
            for e in range(epochs) if chosen else ():
                rows.append(_row(r, phase, e, {c: _epoch(v, phase, e) for c, v in chosen.items()}, paper))
        rows.append(_row(r, "round", -1, evals, paper))
        return rows

    def finish_round(self, r: int, rows: list[dict], comm: dict) -> None:
        comm = {**comm, "rejoined": {str(k): v for k, v in self._rejoined.pop(r, {}).items()}}
        self.rows.extend(rows)
        self.comm.append(comm)
        self.rec.metrics_csv(self.rows)
        self.rec.write("comm.json", self.comm)
        last = rows[-1] if rows else {}
        self.rec.round({**comm, **{m: last.get(m) for m in DETECTION}})
        log.info("round %d/%d done in %.2f s: %s", r + 1, self.cfg.rounds, comm["wall_seconds"],
                 ", ".join(f"{m} {last[m]:.4f}" for m in DETECTION if m in last))

    def summary(self, wall: float, extra: dict | None = None) -> dict:
        cfg = self.cfg
        has_val = cfg.val_fraction > 0 and all(r.get("val_error") == r.get("val_error") for r in self.rows
                                                if r["phase"] == "round")
        flower = {
            "engine": "flower",
            "device": cfg.device,  # as configured: each node resolves it (auto: its own CUDA, if any)
            "client_ids": [c.client_id for c in self.clients],
            "round_wall_seconds": [c["wall_seconds"] for c in self.comm],
            "participation": [{"round": c["round"], "sampled": c["participants"], "took_part": c["took_part"],
                               "dropped": c["dropped"], "rejected": c["rejected"], "rejoined": c["rejoined"]}
                              for c in self.comm],
        }
        return runrecord.summary(
            cfg, clients=len(self.clients), input_shape=self.clients[0].input_shape,
            latent_dim=int(self.template.latent_dim), param_count=param_count(self.template),
            client_sizes=[c.num_examples for c in self.clients], rows=self.rows, comm=self.comm, wall=wall,
            has_validation=has_val, extra={**flower, **(extra or {})})


def _first_line(text) -> str:
    lines = [ln for ln in str(text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _epoch(v: dict, phase: str, e: int) -> dict:
    """A client's metrics after epoch e of a phase; a client that did not train this round has its round metrics."""
    if len(v[f"{phase}_accuracy"]) > e:
        return {k: v[f"{phase}_{k}"][e] for k in METRIC_KEYS}
    return {k: v[k] for k in METRIC_KEYS}


def _row(r: int, phase: str, epoch: int, per_client: dict[int, dict], paper_phase: str) -> dict:
    ids = sorted(per_client)
    vals = {k: [float(per_client[i][k]) for i in ids] for k in METRIC_KEYS}
    return runrecord.metric_row(r, phase, epoch, vals, paper_phase=paper_phase, client_ids=ids)
