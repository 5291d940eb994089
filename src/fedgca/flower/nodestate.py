"""A ClientApp's state on its node's disk (node config ``state-dir``): a SuperNode restarted mid-run continues its
client where it stopped, instead of from the initial model.

Everything a fedgca client keeps between messages lives in ``context.state`` (its model and Adam state, its
evaluations, own data's preprocessing, ``--selection``'s candidates), which Flower holds in the SuperNode's memory
and a restart loses. The ClientApp mod :func:`persist_state` writes it after every message to
``<state-dir>/client_<id>/run_<run id>.state`` — Flower's own protobuf encoding of the ``RecordDict``, as one
uint8 tensor of a tensors-only file, swapped in atomically and listed in that directory's manifest
(``fedgca.rundir``) — and, when a message finds the state empty and the file there, restores it first. After the
run's last message (``query.deploy``, once the client's detector is written) it deletes the file. Flower
SecAgg+'s per-round secrets (``secaggplus_state``) are never written: a round interrupted by a restart fails
for that client as before.

A file that fails its manifest or does not decode is one warning line, and the client starts fresh, as without
``state-dir``. The file is the node operator's, on the node's own disk: nothing of it travels.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from flwr.app import Context, Message, RecordDict

from fedgca import rundir
from fedgca.devices import to_numpy
from fedgca.flower.choice import DEPLOY
from fedgca.flower.data import client_id_of

log = logging.getLogger(__name__)

STATE_DIR = "state-dir"  # node config: where the ClientApp keeps its state between messages ("" = in memory only)
NOT_KEPT = ("secaggplus_state",)  # Flower SecAgg+'s key pairs and shares of the running round: never on disk
KEY = "recorddict"


def state_file(context: Context) -> tuple[Path, str] | None:
    """(the client's directory, the file's name) of this run's state, or None without ``state-dir``."""
    where = context.node_config.get(STATE_DIR)
    if not where:
        return None
    cid = client_id_of(dict(context.node_config), context.node_id)
    return Path(str(where)) / f"client_{cid:03d}", f"run_{context.run_id}.state"


def save(directory: Path, name: str, state: RecordDict) -> None:
    """Write ``state`` less ``NOT_KEPT``; nothing when that leaves nothing (a registration query's state)."""
    from flwr.common.serde import recorddict_to_proto

    kept = RecordDict({k: v for k, v in state.items() if k not in NOT_KEPT})
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


def persist_state(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: restore a restarted client's state before the message, save it after (``state-dir``)."""
    where = state_file(context)
    if where is None:
        return call_next(msg, context)
    directory, name = where
    if not len(context.state) and (directory / name).exists():
        try:
            restored = load(directory, name)
        except rundir.RunFileError as err:
            log.warning("%s; client starts again from its initial state", err)
        else:
            for k, v in restored.items():
                context.state[k] = v
            log.info("restored client state from %s (%d records)", directory / name, len(restored))
    reply = call_next(msg, context)
    if msg.metadata.message_type == DEPLOY:  # the run's last message: it is over for this client
        rundir.forget(directory, name)
    else:
        save(directory, name, context.state)
    return reply


__all__ = ["NOT_KEPT", "STATE_DIR", "load", "persist_state", "save", "state_file"]
