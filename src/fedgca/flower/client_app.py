"""The fedgca Flower ClientApp: ``fedgca.flower.client_app:app``.

A Flower client is the simulator's client with C = 1: one ``StackedModels``
holding one autoencoder, trained by the same functions
(``fedgca.training.gca``, ``fedgca.training.local``)
with the same random draws (``fedgca.seeding``, keyed by the client's global
id). Its parameters and Adam state persist in ``context.state`` between
messages and never travel in one (with the node config ``state-dir``, also on the node's disk, so a restarted
SuperNode continues its client: ``fedgca.flower.nodestate``).

Message types handled (see :mod:`fedgca.flower.records` for the layout):
``query.info``, ``query.stats``, ``query.setup``, ``train`` and ``train.<step>``
(a step of the run's method, ``fedgca.algorithms``: GCA's ``train`` is Phase 1 +
upload, its ``train.align`` Phase 3; a baseline's ``train`` its local training),
``evaluate``.

Its handlers are plain functions (``info``, ``stats``, ``setup``, ``train``,
``evaluate``): another ClientApp can register them with its own mods or
wrappers (the tests wrap ``train`` to inject faulty uploads).
"""
from __future__ import annotations

import json
import logging

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedgca import devices, privacy
from fedgca.algorithms import ClientWork, later_step_names, method_for, secure_rounds
from fedgca.config import evaluated_clients
from fedgca.data.encoding import released_stats
from fedgca.evaluation import candidates
from fedgca.evaluation.metrics import evaluate_clients, shard_scores
from fedgca.evaluation.selection import DETECTION, METRIC_KEYS
from fedgca.evaluation.threshold import quantile_threshold
from fedgca.flower import choice, masks, owndata
from fedgca.flower import data as node_data
from fedgca.flower.nodestate import DONE, node_defaults, persist_state
from fedgca.flower.records import (
    ARRAYS,
    CONFIG,
    EVALUATION,
    INFO,
    METRICS,
    SETUP,
    STATE_CONTRIBUTED,
    STATE_EVALS,
    STATE_MODEL,
    STATE_SETUP,
    STATS,
    array_record,
    from_json_record,
    json_record,
    model_state,
    numpy_dict,
    run_config_from_record,
    stacked_state_from_record,
    stacked_state_record,
    step_of_message,
)
from fedgca.flower.secagg import (
    DEPLOYED,
    LEGACY_CONFIG,
    legacy_reply,
    legacy_step,
    secure_aggregation,
)
from fedgca.models import init_model
from fedgca.protocol import secagg
from fedgca.runrecord import row_contribution, row_part
from fedgca.threads import DEFAULT_TORCH_THREADS
from fedgca.training.loop import ClientShards
from fedgca.training.stacked import AdamConfig, StackedModels

log = logging.getLogger("fedgca.flower")


def torch_threads(msg: Message, context: Context, call_next) -> Message:
    """Flower mod: compute with the node's ``torch-threads`` (default: as ``fedgca run``).

    Flower gives each message its own process, and a node's processes share its cores with other
    nodes' and messages': torch's default, a thread per core each, oversubscribes them. One thread
    also computes exactly what the simulator computes.
    """
    value = context.node_config.get("torch-threads", DEFAULT_TORCH_THREADS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"node config torch-threads must be an integer ≥ 1, got {value!r}")
    torch.set_num_threads(value)
    return call_next(msg, context)


app = ClientApp(mods=[node_defaults, persist_state, torch_threads, secure_aggregation])  # state: around the rest


# ---------------------------------------------------------------------------- helpers


def _node(msg: Message, context: Context, cfgrec=None):
    """The run's config (from the message, or ``cfgrec``) and this node's data."""
    cfg = run_config_from_record(msg.content[CONFIG] if cfgrec is None else cfgrec)
    nc = dict(context.node_config)
    cid = node_data.client_id_of(nc, context.node_id)
    if node_data.source_of(nc) == "builtin":
        return cfg, node_data.builtin_data(cfg, nc, cid)
    return cfg, node_data.csv_data(cfg, nc, cid, _own_preprocessor(context))


def _own_preprocessor(context: Context):
    """An own-data node's federatedly fitted preprocessing (the server sends it in query.setup)."""
    if STATE_SETUP not in context.state.config_records:
        raise RuntimeError("own-data node has no preprocessor yet (the server sends it in query.setup)")
    from fedgca.data.encoding import TabularPreprocessor

    return TabularPreprocessor.from_dict(from_json_record(context.state.config_records[STATE_SETUP]))


def _clients(context: Context, cfg, node) -> StackedModels:
    """This client's model: its initial model (seed, id), or its state from context.state."""
    model = init_model(cfg.seed, node.input_shape, node.client_id)
    clients = StackedModels([model], AdamConfig(lr=cfg.lr, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma),
                            devices.resolve(cfg.device))  # this node's device (auto: its own CUDA, if any)
    if STATE_MODEL in context.state.array_records:
        clients.load_state_dict(stacked_state_from_record(context.state.array_records[STATE_MODEL]))
    return clients


ONE = torch.ones(1, dtype=torch.bool, device="cpu")  # a lone client's participation mask (bookkeeping: CPU)


def _save(context: Context, clients: StackedModels) -> None:
    context.state[STATE_MODEL] = stacked_state_record(clients.state_dict())


def _shards(node, cfg) -> ClientShards:
    return ClientShards.from_arrays([node.train], device=devices.resolve(cfg.device))


def _metrics(clients: StackedModels, node, cfg) -> dict:
    """SPEC §5 for this client: τ on its own training rows (or validation rows), metrics on its test rows."""
    shards = _shards(node, cfg)
    val = shard_scores(clients, ClientShards.from_arrays([node.val], device=shards.device)) if node.val is not None \
        else None
    tau_scores = val if cfg.threshold == "val-quantile" else None
    if node.test_x is not None and node.test_y is not None and len(np.unique(node.test_y)) == 2:
        res = evaluate_clients(clients, shards, torch.as_tensor(node.test_x, dtype=torch.float32, device=shards.device), node.test_y,
                               cfg.quantile, tau_scores)
        out = {m: float(res["per_client"][m][0]) for m in DETECTION}
        out.update(train_error=float(res["train_error"]), threshold=float(res["thresholds"][0]))
    else:  # no labelled test rows on this node: detector threshold and training error only
        train = shard_scores(clients, shards)
        out = {"accuracy": float("nan"), "auroc": float("nan"), "auprc": float("nan"),
               "train_error": float(train[0].mean()),
               "threshold": quantile_threshold((train if tau_scores is None else tau_scores)[0], cfg.quantile)}
    out["val_error"] = float(val[0].mean()) if val is not None else float("nan")
    if privacy.is_record_dp(cfg):  # figures of the protected training rows do not leave a DP client
        out["train_error"] = float("nan")
    return out


def _reply(msg: Message, **records) -> Message:
    return Message(RecordDict(records), reply_to=msg)


def _round(msg: Message) -> int:
    return int(msg.content[CONFIG]["round"])


# ---------------------------------------------------------------------------- queries


@app.query("info")
def info(msg: Message, context: Context) -> Message:
    """Who this client is: its global id, N_i, input shape (what the server checks replies against)."""
    nc = dict(context.node_config)
    source = node_data.source_of(nc)
    cid = node_data.client_id_of(nc, context.node_id)
    values = {"client-id": cid, "source": source, "secagg-masks": _mask_generator()}
    if source == "csv" and STATE_SETUP not in context.state.config_records:
        schema, _ = node_data.csv_encoded_training_rows(run_config_from_record(msg.content[CONFIG]), nc, cid)
        values.update({"schema-digest": schema.digest(), "schema": json.dumps(schema.to_dict()), "ready": False})
    else:
        cfg, node = _node(msg, context)
        values.update({"num-examples": int(len(node.train)), "input-shape": [int(s) for s in node.input_shape],
                       "num-partitions": int(node.num_partitions), "schema-digest": node.schema_digest,
                       "has-test-set": node.test_x is not None, "ready": True})
    return _reply(msg, **{INFO: ConfigRecord(values)})


def _mask_generator() -> str:
    """The generator this node's SecAgg+ would mask with (fedgca's, once in force), or why not."""
    try:
        return masks.in_force()
    except masks.MaskGeneratorError as e:
        return f"unavailable: {e}"


@app.query("stats")
def stats(msg: Message, context: Context) -> Message:
    """Own data: n_i, means and centred scatter of the encoded training rows (nothing per record), or their DP
    release under --dp-stats-sigma (the simulator's per-site fit calls the same function)."""
    nc = dict(context.node_config)
    cfg = run_config_from_record(msg.content[CONFIG])
    cid = node_data.client_id_of(nc, context.node_id)
    schema, X = node_data.csv_encoded_training_rows(cfg, nc, cid)
    min_rows = int(nc.get("stats-min-rows", owndata.DEFAULT_STATS_MIN_ROWS))
    if len(X) < min_rows:
        raise RuntimeError(f"refusing to share statistics of {len(X)} rows (stats-min-rows = {min_rows})")
    return _reply(msg, **{STATS: array_record(released_stats(X, schema, stats_sigma=privacy.stats_noise(cfg),
                                                             seed=cfg.seed, site=cid, where=f"node {cid}"))})


@app.query("setup")
def setup(msg: Message, context: Context) -> Message:
    """Own data: store the federatedly fitted preprocessor, then answer as query.info does."""
    context.state[STATE_SETUP] = ConfigRecord(dict(msg.content[SETUP]))
    return info(msg, context)


# ---------------------------------------------------------------------------- training


def _method(cfg, node):
    """The run's method on this node: its noise as the server sent it (``privacy.message_config``)."""
    return method_for(cfg, node.kind, [len(node.train)])


def train(msg: Message, context: Context) -> Message:
    """One step of the run's method (``fedgca.algorithms``) on this client: the server's payload in, the step's
    reply out — nothing else leaves the node. The last step of a method whose clients deploy their own models
    carries this round's evaluation (a GCA round is two exchanges, not three). A secure method's exchange (SecAgg+'s
    collect stage) is ``secure_exchange``."""
    if LEGACY_CONFIG in msg.content.config_records:
        return secure_exchange(msg, context)
    cfg, node = _node(msg, context)
    method = _method(cfg, node)
    step = step_of_message(method, msg.metadata.message_type)
    r = _round(msg)
    clients = _clients(context, cfg, node)
    evals = _pending(context, r) if step != method.steps[0] else {"round": r}
    received = None
    if step.sends:  # writable copies: the method trains on them
        received = {k: np.array(v, copy=True) for k, v in numpy_dict(msg.content[step.sends]).items()}
    work = ClientWork(cfg, clients, _shards(node, cfg), ONE, [node.client_id], _recorder(cfg, node, clients, evals))
    replies = method.client(step, r, work, received)
    if not replies:
        raise RuntimeError(f"client {node.client_id} refused to send its {step.name} reply (not finite)")
    reply = replies[0]
    _save(context, clients)
    context.state[STATE_EVALS] = json_record(evals)
    records = {}
    if step.reply:
        records[step.reply] = array_record(reply.arrays)
    if step.metrics:
        records[METRICS] = MetricRecord(reply.metrics)
    if step == method.steps[-1] and not method.deploys_global:
        records[EVALUATION] = MetricRecord(_evaluation(clients, node, cfg, evals, method, context, r,
                                                       msg.content[CONFIG].get(choice.SELECTED)))
    return _reply(msg, **records)


def _recorder(cfg, node, clients, evals: dict):
    """``work.evaluate``: this client's metrics at a method's evaluation point, kept in ``evals``."""
    def evaluate(phase: str, epoch: int) -> None:
        if evaluated_clients(cfg, phase) not in (None, (node.client_id,)):
            return  # this phase evaluates another client alone
        evals.setdefault(phase, []).append(_metrics(clients, node, cfg))

    return evaluate


def _payload(payload: dict, prefix: str) -> dict:
    """The arrays of one payload prefix (a step's name, or ``deployed``), writable: the method trains on them."""
    return {k.split("/", 1)[1]: np.array(v, copy=True) for k, v in payload.items() if k.startswith(prefix + "/")}


def secure_exchange(msg: Message, context: Context) -> Message:
    """A secure method's exchange (``fedgca.flower.secure_rounds``): this client runs what the server's instructions
    say — the previous round's later steps (if it contributed to that round's sum), its evaluation of the previous
    round (or of its untrained model), this round's summed step, or the deployment — and answers with ONE vector in
    the server's layout, which ``secaggplus_mod`` masks: nothing of this client reaches the server alone."""
    config, todo, payload = legacy_step(msg.content)
    cfgrec = ConfigRecord(config)
    cfg, node = _node(msg, context, cfgrec)
    method = _method(cfg, node)
    layout = tuple(secagg.Part.from_dict(p) for p in todo["layout"])
    clients = _clients(context, cfg, node)
    r, cid = int(todo["round"]), node.client_id
    shards = _shards(node, cfg)
    parts: dict = {}
    if todo.get("deploy"):
        parts = _secure_deploy(msg, context, cfg, node, payload, cfgrec)
    done = todo.get("deferred")
    if done and context.state.config_records.get(STATE_CONTRIBUTED, {}).get("round") == done["round"]:
        evals = _pending(context, done["round"])  # the previous round's later steps (GCA: its alignment)
        for name in done["steps"]:
            work = ClientWork(cfg, clients, shards, ONE, [cid], _recorder(cfg, node, clients, evals))
            method.client(method.step_named(name), done["round"], work, _payload(payload, name))
        context.state[STATE_EVALS] = json_record(evals)
    if todo.get("candidate") is not None:  # the previous round's evaluation makes this candidate
        evaluated = _secure_evaluated(clients, cfg, node, method, payload)
        prev = todo.get("evaluate")
        if prev is None:  # candidate 0: the untrained model
            values = choice.observe(context, cfg, node, evaluated, 0, choice.shared(cfg, method))
        else:
            values = _evaluation(evaluated, node, cfg, _pending(context, prev), method, context, prev,
                                 cfgrec.get(choice.SELECTED))
        parts.update(_evaluation_parts(values, method, int(todo["candidate"]), prev is not None))
    if todo.get("step"):  # this round's summed step
        method.secure_settings(float(todo["weight-scale"]))  # W: the federation's largest weight, from the server
        step, evals = method.step_named(todo["step"]), {"round": r}
        work = ClientWork(cfg, clients, shards, ONE, [cid], _recorder(cfg, node, clients, evals))
        replies = method.client(step, r, work, _payload(payload, step.name))
        mine = method.contributions(step, replies[0]) if replies else {}
        parts.update(mine)
        context.state[STATE_CONTRIBUTED] = ConfigRecord({"round": r if mine else -1})
        context.state[STATE_EVALS] = json_record(evals)
    _save(context, clients)
    levels = secagg.encode(layout, parts, method.secagg, secagg.rounding(cfg.seed, r, cid))
    return legacy_reply(msg, levels, method.secagg)


def _secure_evaluated(own: StackedModels, cfg, node, method, payload: dict) -> StackedModels:
    """The model a secure exchange evaluates: the server's — the summed step's payload, which every addressee gets
    (a non-participant too), or after the last round the deployed model — or this client's own (``own``: after the
    previous round's later steps)."""
    if not method.deploys_global:
        return own
    arrays = _payload(payload, DEPLOYED) or _payload(payload, method.steps[0].name)
    clients = StackedModels([init_model(cfg.seed, node.input_shape, node.client_id)])
    clients.set_all(model_state(arrays))
    return clients


def _evaluation_parts(values: dict, method, candidate: int, rows: bool) -> dict:
    """A client's evaluation as the parts of the secure vector: each metric row of the round (an evaluation point it
    missed: its round's figures, as the plain server fills it) and the candidate's signal value."""
    out = {}
    if rows:
        final = {k: values[k.replace("_", "-")] for k in METRIC_KEYS}
        for phase, e in secure_rounds.evaluation_rows(method):
            listed = values.get(f"{phase}-accuracy", [])
            m = final if phase == "round" or len(listed) <= e else \
                {k: values[f"{phase}-{k.replace('_', '-')}"][e] for k in METRIC_KEYS}
            out[row_part(phase, e).name] = row_contribution(m)
    if choice.VALUE in values:
        out[candidates.selection_part(candidate).name] = secagg.Contribution(np.array([values[choice.VALUE]]))
    return out


def _secure_deploy(msg, context, cfg, node, payload: dict, cfgrec) -> dict:
    """A secure run's deployment under --selection: this client's detector, and its metrics and choice as parts."""
    chosen = cfgrec.get(choice.CHOSEN)
    arrays = _payload(payload, DEPLOYED)
    clients = _clients(context, cfg, node)
    if arrays:
        clients = StackedModels([init_model(cfg.seed, node.input_shape, node.client_id)])
        clients.set_all(model_state(arrays))
    pre, schema = _deploy_encoding(context, cfg)
    out = choice.deploy(context, cfg, node, clients, init_model(cfg.seed, node.input_shape, node.client_id),
                        None if chosen is None else int(chosen), bool(arrays), pre, schema)
    context.state[DONE] = ConfigRecord({"round": int(out["round"])})  # its run is over (flower.nodestate)
    return {candidates.DEPLOYED_PART.name: secagg.Contribution(np.array([out[m] for m in DETECTION])),
            "chosen": secagg.Contribution(candidates.one_hot(out["round"], cfg.rounds))}


app.train()(train)
for _action in later_step_names():  # ``train.<step>``: the later steps of the built-in methods
    app.train(_action)(train)


# ---------------------------------------------------------------------------- evaluation


def _pending(context: Context, r: int) -> dict:
    """The evaluations this client made in round ``r``'s earlier steps."""
    if STATE_EVALS in context.state.config_records:
        evals = from_json_record(context.state.config_records[STATE_EVALS])
        if evals.get("round") == r:
            return evals
    return {"round": r}


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Metrics of this client's deployed model (its own, or the server's model the message carries)."""
    cfg, node = _node(msg, context)
    r = _round(msg)
    clients = _global_or_own(msg, context, cfg, node)
    return _reply(msg, **{METRICS: MetricRecord(_evaluation(clients, node, cfg, _pending(context, r),
                                                            _method(cfg, node), context, r,
                                                            msg.content[CONFIG].get(choice.SELECTED)))})


def _evaluation(clients: StackedModels, node, cfg, evals: dict, method, context: Context, r: int,
                selected=None) -> dict:
    """What an evaluation carries: the deployed model's metrics and this round's evaluations at the method's
    evaluation points (one list over the epochs per metric). The model is also round ``r``'s candidate for the
    deployed detector (``fedgca.flower.choice``; ``selected``: the round the federation has chosen so far)."""
    values = {"client-id": node.client_id, "num-examples": int(len(node.train))}
    values.update(choice.observe(context, cfg, node, clients, r + 1, choice.shared(cfg, method), selected))
    values.update({k.replace("_", "-"): v for k, v in _metrics(clients, node, cfg).items()})
    for phase, _ in method.evaluation_points():
        for m in METRIC_KEYS:
            values[f"{phase}-{m.replace('_', '-')}"] = [float(e[m]) for e in evals.get(phase, [])]
    return values


# ---------------------------------------------------------------------------- the deployed model (fedgca.flower.choice)


def _global_or_own(msg: Message, context: Context, cfg, node) -> StackedModels:
    """The server's model the message carries, or this client's own."""
    if ARRAYS not in msg.content:
        return _clients(context, cfg, node)
    clients = StackedModels([init_model(cfg.seed, node.input_shape, node.client_id)])
    clients.set_all(model_state(numpy_dict(msg.content[ARRAYS])))
    return clients


@app.query("candidate")
def candidate(msg: Message, context: Context) -> Message:
    """Candidate 0 of ``--selection``: this client's untrained model (or the initial global one), measured."""
    cfg, node = _node(msg, context)
    clients = _global_or_own(msg, context, cfg, node)
    return _reply(msg, **{METRICS: MetricRecord(choice.observe(context, cfg, node, clients, 0,
                                                               choice.shared(cfg, _method(cfg, node))))})


@app.query("deploy")
def deploy(msg: Message, context: Context) -> Message:
    """The end of a run: deploy this client's choice (or the server's chosen model, or the ensemble of rounds, or the
    federation's round) as a detector, written under the node's ``detector-dir``; reply the round and, under
    ``--selection``, the detector's metrics on the test rows and the selection's record (a secure run: nothing —
    its --selection deployment is a summed exchange, ``secure_exchange``)."""
    cfg, node = _node(msg, context)
    chosen = msg.content[CONFIG].get(choice.CHOSEN)
    if not choice.active(cfg) and not context.node_config.get(choice.DETECTOR_DIR):
        return _reply(msg, **{METRICS: MetricRecord({} if cfg.spec.secure else {"round": int(chosen)})})
    clients = _global_or_own(msg, context, cfg, node)
    pre, schema = _deploy_encoding(context, cfg)
    out = choice.deploy(context, cfg, node, clients, init_model(cfg.seed, node.input_shape, node.client_id),
                        None if chosen is None else int(chosen), ARRAYS in msg.content, pre, schema)
    return _reply(msg, **{METRICS: MetricRecord({} if cfg.spec.secure else out)})


def _deploy_encoding(context: Context, cfg):
    """The detector reads raw records as this node's rows were read: (preprocessor, schema)."""
    nc = dict(context.node_config)
    if node_data.source_of(nc) == "csv":
        return _own_preprocessor(context), node_data.csv_frame(nc)[0]
    return node_data.builtin_encoding(cfg, nc)
