"""A summed step on a Flower client: Flower's ``secaggplus_mod`` masks the step's reply, which never leaves unmasked
(the server side: ``flower/secagg_server.py``).

``secure_aggregation`` routes the protocol's messages through ``secaggplus_mod``, seeding its stochastic rounding
as the simulator does (``protocol.secagg``); ``legacy_step``/``legacy_reply`` translate the collect stage's legacy
FitIns/FitRes (what the mod and the workflow speak) to and from the step's payload and reply.
"""
from __future__ import annotations

import json
import logging

import numpy as np
from flwr.app import Message, RecordDict
from flwr.common import (
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.common.typing import Code
from flwr.compat.common import recorddict_compat as compat

log = logging.getLogger("fedgca.flower")

SECAGG = RECORD_KEY_CONFIGS  # the protocol's ConfigRecord
LEGACY_CONFIG = "fitins.config"  # the collect stage's FitIns config
NAMES = "secagg-names"  # array names (JSON), in the order of the legacy parameters (payload and reply)
CONFIG_JSON = "fedgca-config"  # the step's config record (JSON): legacy configs hold scalars only


# ---------------------------------------------------------------------------- client side


def secure_aggregation(msg: Message, context, call_next) -> Message:
    """ClientApp mod: a SecAgg+ message goes through Flower's ``secaggplus_mod``; any other message passes by.
    NumPy's global generator, which the mod's stochastic rounding draws from, is restored afterwards."""
    if msg.metadata.message_type != "train" or SECAGG not in msg.content.config_records:
        return call_next(msg, context)
    from flwr.client.mod import secaggplus_mod

    saved = np.random.get_state()
    try:
        return secaggplus_mod(msg, context, call_next)
    finally:
        np.random.set_state(saved)


def legacy_step(content: RecordDict):
    """The collect stage's FitIns as the step's config record and payload {name: array}."""
    from flwr.app import ConfigRecord

    fitins = compat.recorddict_to_fitins(content, keep_input=True)
    names = json.loads(fitins.config[NAMES])
    return (ConfigRecord(json.loads(fitins.config[CONFIG_JSON])),
            dict(zip(names, parameters_to_ndarrays(fitins.parameters))))


def legacy_reply(msg: Message, arrays: dict, metrics: dict, rounding_seed: int) -> Message:
    """The step's reply as the FitRes ``secaggplus_mod`` masks (its arrays never leave unmasked). The mod
    quantises it next, drawing its stochastic rounding from NumPy's global generator: seeded here, as the
    simulator seeds it (``protocol.secagg.seeded_rounding``)."""
    from fedgca.devices import as_numpy

    np.random.seed(rounding_seed)
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([as_numpy(a) for a in arrays.values()]),
                    int(metrics["num-examples"]),
                    {**{k: v for k, v in metrics.items() if k != "num-examples"}, NAMES: json.dumps(list(arrays))})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)
