"""What the fedgca Flower apps put in messages and in a ClientApp's ``context.state``.

Message layout (``RecordDict`` keys):

============  ==========================  =========================================
message        server → client             client → server
============  ==========================  =========================================
query.info     ``config``                  ``info`` (ConfigRecord: client id, N_i, input shape)
query.stats    ``config``                  ``stats`` (ArrayRecord: n, mean, m2) — own data only
query.setup    ``config``, ``setup``       ``info``
train[.step]   ``config`` [, the step's    the step's reply (``algorithms.Step``): an ArrayRecord under its
               ``sends``]                  ``reply`` name, ``metrics`` if it has them, and on a method's
                                           last step, when clients deploy their own models, ``evaluation``
  GCA train    ``config``                  ``codes`` (ArrayRecord with ONE array ``z``: ⌊ρ·N_i⌋ × d_z)
  train.align  ``config``, ``broadcast``   ``evaluation``
  FL train     ``config``, ``arrays``      ``arrays`` (model), ``metrics`` (num-examples, local-steps)
train (SecAgg+ ``secagg`` (the stage) [,   ``secagg`` (keys, encrypted shares, the MASKED vector,
 a summed     ``fitins.*``: the step's    unmask shares) and an emptied FitRes: a summed step's reply
 step)        config and payload]         never leaves the node unmasked (flower/secagg*.py)
evaluate       ``config`` [, ``arrays``]   ``metrics`` (accuracy, auroc, auprc, ... per client)
============  ==========================  =========================================

``config`` carries the resolved ``RunConfig`` (field names as keys) plus the
round index. A GCA client's model and Adam state live in ``context.state``
under ``fedgca.model`` and never enter a message.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from fedgca.config import RunConfig
from fedgca.devices import to_numpy

CONFIG = "config"
INFO = "info"
STATS = "stats"
SETUP = "setup"
ARRAYS = "arrays"  # Flower strategies' default ArrayRecord key
METRICS = "metrics"
EVALUATION = "evaluation"  # a client's evaluation carried by its last step's reply

STATE_MODEL = "fedgca.model"
STATE_EVALS = "fedgca.evals"
STATE_SETUP = "fedgca.setup"
STATE_CONTRIBUTED = "fedgca.secagg.contributed"  # a secure client: the round whose sum it last contributed to


# ---------------------------------------------------------------------------- steps


def step_message_type(method, step) -> str:
    """A method's first step travels as ``train``, each later one as ``train.<name>``."""
    return "train" if step == method.steps[0] else f"train.{step.name}"


def step_of_message(method, message_type: str):
    """The step a ``train[.<name>]`` message asks for."""
    action = message_type.partition(".")[2]
    return method.steps[0] if not action else method.step_named(action)


# ---------------------------------------------------------------------------- config


def config_record(cfg: RunConfig, **extra) -> ConfigRecord:
    """The resolved run config (+ round, phase, ...) as a ConfigRecord."""
    values = {k: v for k, v in cfg.resolved().to_dict().items() if v is not None}  # None: the field's default
    values.update(extra)
    return ConfigRecord(values)


def run_config_from_record(record: ConfigRecord) -> RunConfig:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig(**{k: v for k, v in record.items() if k in names}).resolved()


def json_record(value) -> ConfigRecord:
    return ConfigRecord({"json": json.dumps(value)})


def from_json_record(record: ConfigRecord):
    return json.loads(str(record["json"]))


# ---------------------------------------------------------------------------- arrays


def array_record(arrays: dict[str, np.ndarray | torch.Tensor]) -> ArrayRecord:
    out = ArrayRecord()
    for k, v in arrays.items():
        out[k] = Array(to_numpy(v) if isinstance(v, torch.Tensor) else np.asarray(v))
    return out


def numpy_dict(record: ArrayRecord) -> dict[str, np.ndarray]:
    """A message's arrays as NumPy, by name: Flower's own decoding (never unpickles); tensors use devices.to_numpy."""
    return dict(zip(record.keys(), record.to_numpy_ndarrays()))


def model_state(params: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.array(v, copy=True), device="cpu") for k, v in params.items()}  # server side


# A StackedModels state (params + Adam moments + step counts + StepLR epochs), flattened.
def stacked_state_record(state: dict) -> ArrayRecord:
    flat: dict[str, torch.Tensor] = {}
    for k, v in state["params"].items():
        flat[f"params/{k}"] = v
    for part in ("step", "m", "v"):
        for k, v in state["optim"][part].items():
            flat[f"optim.{part}/{k}"] = v
    flat["optim.epochs"] = state["optim"]["epochs"]
    return array_record(flat)


def stacked_state_from_record(record: ArrayRecord) -> dict:
    params, optim = {}, {"step": {}, "m": {}, "v": {}}
    for key, arr in numpy_dict(record).items():
        t = torch.as_tensor(np.array(arr, copy=True), device="cpu")  # copied onto the node's device on load
        if key == "optim.epochs":
            optim["epochs"] = t
        elif key.startswith("params/"):
            params[key[len("params/"):]] = t
        else:
            head, name = key.split("/", 1)
            optim[head[len("optim."):]][name] = t
    return {"params": params, "optim": optim}


# ---------------------------------------------------------------------------- accounting


def describe(content: RecordDict) -> list[dict]:
    """Every record of a message and, for arrays, name, dtype, shape and bytes.

    ``nbytes`` is the tensor payload (∏shape × itemsize, what SPEC §7 counts);
    ``serialized_bytes`` is what Flower ships for it (numpy .npy bytes,
    i.e. the payload plus a header of about 128 bytes).
    """
    out = []
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            arrays = []
            for key, arr in record.items():
                itemsize = np.dtype(arr.dtype).itemsize if _known_dtype(arr.dtype) else 0
                arrays.append({"name": key, "dtype": arr.dtype, "shape": list(arr.shape),
                               "nbytes": int(np.prod(arr.shape, dtype=np.int64)) * itemsize,
                               "serialized_bytes": len(arr.data)})
            out.append({"record": name, "type": "array", "arrays": arrays})
        elif isinstance(record, ConfigRecord):
            out.append({"record": name, "type": "config", "keys": sorted(record.keys())})
        else:
            out.append({"record": name, "type": "metric", "keys": sorted(record.keys())})
    return out


def _known_dtype(dtype: str) -> bool:
    try:
        np.dtype(dtype)
        return True
    except TypeError:
        return False


def payload_bytes(content: RecordDict) -> int:
    """Σ tensor bytes over every array of a message (SPEC §7's β·#entries)."""
    return sum(a["nbytes"] for r in describe(content) if r["type"] == "array" for a in r["arrays"])


def reply_summary(msg: Message) -> dict:
    if msg.has_error():
        return {"error": f"{msg.error.code}: {msg.error.reason}"}
    return {"records": describe(msg.content)}
