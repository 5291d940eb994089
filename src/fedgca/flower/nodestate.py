"""A ClientApp's state on its node's disk (node config ``state-dir``): a SuperNode restarted mid-run continues its
client where it stopped, and a run whose server was restarted (``resume``) finds every client where the server's
checkpoint left it.

Everything a fedgca client keeps between messages lives in ``context.state`` (its model and Adam state, its
evaluations, own data's preprocessing, ``--selection``'s candidates), which Flower holds in the SuperNode's memory,
per Flower run: a restarted SuperNode, or a new Flower run resuming the same fedgca run, starts empty. The ClientApp
mod :func:`persist_state` writes the state after every message to
``<state-dir>/client_<id>/<run name>.r<round>.state`` — keyed by the fedgca run the server names in its messages
(``run-name``: the run's key and the nonce of its first start, kept in the server's checkpoint), not by Flower's run
id, and by the round the message belongs to (its group id). Flower's protobuf encoding of the ``RecordDict``, one
uint8 tensor of a tensors-only file, swapped in atomically and listed in that directory's manifest
(``fedgca.rundir``). The files of the last two rounds are kept; a round played again (after a resume) overwrites its
old file, and a registration query writes nothing (a refused resume leaves every file as it was).

When a message finds the state empty it restores the latest file first — of a resumed run (``resume-round`` in the
message), the latest of a round the server's checkpoint completed, since a later round is one the server will
play again. After the run's last message (``query.deploy``) the client's files of the run are deleted. Flower
SecAgg+'s per-round secrets (``secaggplus_state``) are never written: an exchange interrupted by a restart fails for
that client, as before.

Pruning: files of other runs not written for ``state-ttl-days`` (node config, default 7) are deleted whenever the
client saves — a run that never reached ``query.deploy`` (abandoned, or killed for good) leaves its state that long.

A file that fails its manifest or does not decode is one warning line, and the client starts fresh, as without
``state-dir``. The files are the node operator's, on the node's own disk: nothing of them travels.
"""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedgca import rundir
from fedgca.devices import to_numpy
from fedgca.flower.choice import DEPLOY
from fedgca.flower.data import client_id_of

log = logging.getLogger(__name__)

STATE_DIR = "state-dir"  # node config: where the ClientApp keeps its state between messages ("" = in memory only)
STATE_TTL_DAYS = "state-ttl-days"  # node config: other runs' files older than this are pruned (default 7)
DEFAULT_TTL_DAYS = 7.0
RUN_NAME, RESUME_ROUND = "run-name", "resume-round"  # in every config a fedgca server sends
NOT_KEPT = ("secaggplus_state",)  # Flower SecAgg+'s key pairs and shares of the running round: never on disk
RUN = "fedgca.run"  # context.state: the run this state belongs to (a SecAgg+ stage message names none)
DONE = "fedgca.done"  # context.state: the client deployed its detector (a secure run's deploy is a summed exchange)
NODE_DEFAULTS_ENV = "FEDGCA_NODE_DEFAULTS"  # JSON node config for nodes that have none (Flower's Ray engine)
KEY = "recorddict"
KEEP_ROUNDS = 2
READ_ONLY = ("query.info", "query.stats")  # registration: they change no client state, so save nothing
_FILE = re.compile(r"^(?P<run>[A-Za-z0-9_-]+)\.r(?P<round>-?\d+)\.state$")


def client_dir(context: Context) -> Path | None:
    where = context.node_config.get(STATE_DIR)
    if not where:
        return None
    return Path(str(where)) / f"client_{client_id_of(dict(context.node_config), context.node_id):03d}"


def _files(directory: Path, run: str) -> dict[int, str]:
    """{round: file name} of a run's saved states."""
    out = {}
    for p in directory.glob(f"{run}.r*.state") if directory.is_dir() else ():
        m = _FILE.match(p.name)
        if m and m["run"] == run:
            out[int(m["round"])] = p.name
    return out


def _message_round(msg: Message) -> int:
    """The round a message belongs to: its group id is round + 1 (registration 0: round −1)."""
    try:
        return int(msg.metadata.group_id) - 1
    except (TypeError, ValueError):
        return -1


def _identity(msg: Message, context: Context) -> tuple[str | None, int | None]:
    """(run name, resume round) from the message's config, else the run this state already belongs to."""
    config = msg.content.config_records.get("config") if "config" in msg.content.config_records else None
    if config is not None and RUN_NAME in config:
        name = str(config[RUN_NAME])
        resume = config.get(RESUME_ROUND)
        if re.fullmatch(r"[A-Za-z0-9_-]+", name):
            return name, None if resume is None or int(resume) < 0 else int(resume)
    if RUN in context.state.config_records:
        return str(context.state.config_records[RUN]["name"]), None
    return None, None


def save(directory: Path, name: str, state: RecordDict) -> None:
    """Write ``state`` less ``NOT_KEPT``; nothing when that leaves nothing (a registration query's state)."""
    from flwr.common.serde import recorddict_to_proto

    kept = RecordDict({k: v for k, v in state.items() if k not in NOT_KEPT and k != RUN})
    if not len(kept):
        return
    directory.mkdir(parents=True, exist_ok=True)
    data = bytearray(recorddict_to_proto(kept).SerializeToString())
    # as a uint8 tensor: stored as raw bytes (a Python bytes object would be pickled as a latin-1 string, ~1.3×)
    rundir.save_checkpoint(directory, {KEY: torch.frombuffer(data, dtype=torch.uint8)}, name)


def load(directory: Path, name: str) -> RecordDict:
    """The state saved there; a RunFileError (one line naming the file) if it fails its manifest or its decoding."""
    from flwr.common.serde import recorddict_from_proto
    from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto

    data = rundir.load_tensors(rundir.verify(directory, name), expect_keys=(KEY,))[KEY]
    try:
        proto = RecordDictProto()
        proto.ParseFromString(to_numpy(data).tobytes())
        return recorddict_from_proto(proto)
    except Exception as err:  # noqa: BLE001 — protobuf's DecodeError and whatever a foreign payload raises
        raise rundir.RunFileError(f"{directory / name}: not a saved ClientApp state ({type(err).__name__})") from None


def prune(directory: Path, keep_run: str, ttl_days: float, now: float | None = None) -> list[str]:
    """Delete the states of other runs last written more than ``ttl_days`` ago; returns the files deleted."""
    now = time.time() if now is None else now
    gone = []
    for p in directory.glob("*.state") if directory.is_dir() else ():
        m = _FILE.match(p.name)
        if m and m["run"] != keep_run and now - p.stat().st_mtime > ttl_days * 86400:
            rundir.forget(directory, p.name)
            gone.append(p.name)
    return gone


def _restore(context: Context, directory: Path, run: str, resume: int | None) -> None:
    rounds = sorted((r for r in _files(directory, run) if resume is None or r <= resume), reverse=True)
    for r in rounds[:1]:
        name = _files(directory, run)[r]
        try:
            restored = load(directory, name)
        except rundir.RunFileError as err:
            log.warning("%s; client starts again from its initial state", err)
            return
        for k, v in restored.items():
            context.state[k] = v
        log.info("restored client state from %s (%d records)", directory / name, len(restored))


def node_defaults(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: node-config keys this node lacks, from ``$FEDGCA_NODE_DEFAULTS`` (JSON) — how Flower's Ray
    engine, which gives its nodes no node configs, gets ``detector-dir`` and ``state-dir`` (``flower.simulation``)."""
    import json
    import os

    extra = os.environ.get(NODE_DEFAULTS_ENV)
    if extra:
        for k, v in json.loads(extra).items():
            if k not in context.node_config:
                context.node_config[k] = v
    return call_next(msg, context)


def persist_state(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: restore a client's state (restarted node, resumed run) before the message, save it after."""
    directory = client_dir(context)
    run, resume = _identity(msg, context) if directory is not None else (None, None)
    if run is None:
        return call_next(msg, context)
    if not len(context.state):
        _restore(context, directory, run, resume)
    context.state[RUN] = ConfigRecord({"name": run})
    reply = call_next(msg, context)
    if msg.metadata.message_type == DEPLOY or DONE in context.state.config_records:  # the run is over for it
        for name in _files(directory, run).values():
            rundir.forget(directory, name)
        return reply
    if msg.metadata.message_type in READ_ONLY:
        return reply
    r = _message_round(msg)
    save(directory, f"{run}.r{r}.state", context.state)  # a round played again overwrites its old file
    for old, name in _files(directory, run).items():
        if old < r - KEEP_ROUNDS + 1:
            rundir.forget(directory, name)
    prune(directory, run, float(context.node_config.get(STATE_TTL_DAYS, DEFAULT_TTL_DAYS)))
    return reply


__all__ = ["NOT_KEPT", "STATE_DIR", "load", "persist_state", "prune", "save"]
