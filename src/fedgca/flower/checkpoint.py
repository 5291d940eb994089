"""The Flower server's checkpoint: what a killed ServerApp (or SuperLink) needs to go on from its last completed round
(run-config ``resume``).

After every round (a secure method: every exchange, and the pending rest of the round it carried) the ServerApp
writes ``checkpoint.pt`` in its out-dir through the simulator's atomic, manifest-checked writer
(``rundir.save_checkpoint``: a kill at any moment leaves a checkpoint the manifest accepts): the method's server state
(global model, GCA's last broadcast, the secure mixture), the selection's state, the metric rows, comm records and
rounds log so far, the registered clients (id, N_i, input shape, data digest, partitions) and own data's fitted
preprocessing, and the run's name (its key and the nonce of its first start, which keys every node's saved state:
``fedgca.flower.nodestate``). No protocol secret is in it: SecAgg+'s keys and shares live only in the clients'
running exchange, and an exchange interrupted by the kill is played again from its setup.

A resume reads it back only after the config in out-dir matches the run's options and the nodes that register are
the same federation; otherwise it refuses in one line and writes nothing.
"""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import torch

from fedgca import rundir
from fedgca.config import EXECUTION_ONLY, RunConfig

KEYS = ("round", "run_name", "method", "selection", "rows", "comm", "rounds_log", "clients", "preprocessor",
        "secure", "wall")


class ResumeRefused(RuntimeError):
    """A resume that would not continue the same run (other options, another federation, nothing to continue)."""


def new_run_name(cfg: RunConfig) -> str:
    """The name every message of a run carries (nodes key their saved state by it): the run's key and a nonce, so
    that a new run with the same options never restores an abandoned run's client states."""
    return f"{cfg.key()}-{secrets.token_hex(4)}"


def check_config(out: Path, cfg: RunConfig) -> None:
    """A resume continues the run in ``out`` only with that run's options (where it computes may differ)."""
    path = out / rundir.CONFIG
    if not path.exists():
        raise ResumeRefused(f"resume: {out} holds no run to continue (no {rundir.CONFIG})")
    saved = dict(rundir.load_json(rundir.verify(out, rundir.CONFIG)))
    saved.pop("flower", None)
    try:
        saved = RunConfig.from_dict(saved).resolved().to_dict()
    except (TypeError, ValueError) as err:
        raise ResumeRefused(f"resume: {path} is not a fedgca run config ({err})") from None
    mine = cfg.resolved().to_dict()
    for name in EXECUTION_ONLY:
        saved.pop(name, None)
        mine.pop(name, None)
    diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
    if diff:
        raise ResumeRefused(f"resume: {out} holds a run with other options (differs in: {', '.join(diff)})")
    if (out / rundir.SUMMARY).exists():
        raise ResumeRefused(f"resume: {out} holds a finished run")


def load(out: Path) -> dict | None:
    """The checkpoint in ``out`` (None: the run was killed before its first round completed)."""
    if not (out / rundir.CHECKPOINT).exists():
        return None
    ckpt = rundir.load_tensors(rundir.verify(out, rundir.CHECKPOINT), expect_keys=KEYS)
    if not isinstance(ckpt["rows"], list) or not isinstance(ckpt["round"], int) or not isinstance(ckpt["clients"], list):
        raise rundir.RunFileError(f"{out / rundir.CHECKPOINT}: not a fedgca Flower server checkpoint")
    return ckpt


def client_record(c) -> dict:
    return {"client_id": int(c.client_id), "num_examples": int(c.num_examples),
            "input_shape": [int(s) for s in c.input_shape], "digest": str(c.digest)}


def check_federation(saved: list[dict], clients) -> None:
    """The nodes that registered are the checkpoint's federation: the same client ids, N_i, shapes, data digests."""
    now = {c.client_id: client_record(c) for c in clients}
    before = {int(c["client_id"]): c for c in saved}
    if set(now) != set(before):
        raise ResumeRefused(f"resume: the clients that registered ({sorted(now)}) are not the run's "
                            f"({sorted(before)})")
    for cid in sorted(now):
        a, b = now[cid], before[cid]
        differs = [k for k in ("num_examples", "input_shape", "digest") if a[k] != b[k]]
        if differs:
            raise ResumeRefused(f"resume: client {cid} registered other data than the run's ({', '.join(differs)}: "
                                f"{[a[k] for k in differs]} ≠ {[b[k] for k in differs]})")


def save(server, r: int, method, selection, secure: dict | None = None) -> None:
    """The server's state after round (or exchange) ``r``, in the ServerApp's out-dir."""
    out = server.rec.out
    if out is None:
        return
    rundir.save_checkpoint(out, {
        "round": int(r), "run_name": server.run_name, "method": method.state_dict(),
        "selection": selection.state_dict(), "rows": server.rows, "comm": server.comm,
        "rounds_log": server.rec.rounds, "clients": [client_record(c) for c in server.clients],
        "preprocessor": json.dumps(server.preprocessor) if server.preprocessor is not None else "",
        "secure": secure or {}, "wall": float(server.elapsed()),
    })


def as_tensors(arrays: dict) -> dict:
    """Arrays (NumPy or torch) as CPU tensors: a checkpoint is read back with weights_only=True."""
    return {k: torch.as_tensor(v).detach().cpu().clone() for k, v in arrays.items()}
