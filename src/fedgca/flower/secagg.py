"""A secure exchange on a Flower client: Flower's ``secaggplus_mod`` masks the client's vector, which never leaves
unmasked (the server side: ``flower/secagg_server.py``; what the vector holds: ``algorithms.secure_rounds``).

``secure_aggregation`` routes the protocol's messages through ``secaggplus_mod`` after putting fedgca's mask
generator in force (``flower.masks``: a node whose Flower would mask with its 32-bit-seeded generator refuses);
``legacy_step``/``legacy_reply`` translate the collect stage's legacy FitIns/FitRes (what the mod and the workflow
speak) to and from the exchange's instructions, payload and the client's vector. The FitRes carries the vector on
SecAgg+'s grid (``protocol.secagg.to_flower``: Flower's rounding of it is exact), the weight 1 and nothing else —
no metric, no name: what the server may learn is in the sum.
"""
from __future__ import annotations

import json
import logging

import numpy as np
from flwr.app import Message, RecordDict
from flwr.common import FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.common.typing import Code
from flwr.compat.common import recorddict_compat as compat

from fedgca.flower import masks
from fedgca.protocol import secagg

log = logging.getLogger("fedgca.flower")

SECAGG = RECORD_KEY_CONFIGS  # the protocol's ConfigRecord
LEGACY_CONFIG = "fitins.config"  # the collect stage's FitIns config
NAMES = "secagg-names"  # the payload's array names (JSON), in the order of the legacy parameters
CONFIG_JSON = "fedgca-config"  # the round's config record (JSON): legacy configs hold scalars only
EXCHANGE = "fedgca-exchange"  # what this client does in the exchange and the vector's layout (JSON)
DEPLOYED = "deployed"  # the payload prefix of the server's model a client evaluates or deploys (no step carries it)


# ---------------------------------------------------------------------------- client side


def secure_aggregation(msg: Message, context, call_next) -> Message:
    """ClientApp mod: a SecAgg+ message goes through Flower's ``secaggplus_mod`` with fedgca's masks in force; any
    other message passes by. NumPy's global generator, which the mod's (here exact) rounding draws from, is
    restored afterwards."""
    if msg.metadata.message_type != "train" or SECAGG not in msg.content.config_records:
        return call_next(msg, context)
    from flwr.client.mod import secaggplus_mod

    masks.in_force()  # MaskGeneratorError: this node sends no masked vector
    saved = np.random.get_state()
    try:
        return secaggplus_mod(msg, context, call_next)
    finally:
        np.random.set_state(saved)


def legacy_step(content: RecordDict):
    """The collect stage's FitIns: the round's config (a dict), the exchange's instructions, the payload
    {name: array}."""
    fitins = compat.recorddict_to_fitins(content, keep_input=True)
    names = json.loads(fitins.config[NAMES])
    return (json.loads(fitins.config[CONFIG_JSON]), json.loads(fitins.config[EXCHANGE]),
            dict(zip(names, parameters_to_ndarrays(fitins.parameters))))


def legacy_reply(msg: Message, levels: np.ndarray, s: secagg.SecAggSettings) -> Message:
    """The client's vector as the FitRes ``secaggplus_mod`` masks: one array on the grid, weight 1, no metric."""
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([secagg.to_flower(levels, s)]), 1, {})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)
