"""A secure exchange on the Flower ServerApp: Flower's own SecAgg+ (``SecAggPlusWorkflow``) carries the clients'
vectors, and the ServerApp receives only masked vectors and their sum.

The workflow is Flower's legacy-strategy one: it asks a strategy which clients to train (``_Summed`` answers with the
exchange's clients, each with its own instructions, and the payload as legacy ``FitIns``) and hands the strategy the
unmasked mean at the end, from which the exact integer sum is read back (``protocol.secagg.recover_sums``). Its
four stages (setup, share keys, collect masked vectors, unmask) travel through ``FlowerServer.exchange``, so every
message is recorded (messages.jsonl) and a node that does not answer in time is dropped; the protocol recovers the
masks of clients that dropped after sharing their keys while ``reconstruction_threshold`` shares remain. fedgca's
mask generator is put in force (and checked) before the first stage.
"""
from __future__ import annotations

import json
import logging

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import Key
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from fedgca.devices import as_numpy
from fedgca.flower import masks
from fedgca.flower.secagg import CONFIG_JSON, EXCHANGE, NAMES, SECAGG
from fedgca.protocol import secagg

log = logging.getLogger("fedgca.flower")


class _Summed(Strategy):
    """The legacy strategy SecAggPlusWorkflow asks: the exchange's clients, each its FitIns; it keeps the mean."""

    def __init__(self, fitins: dict):
        self.fitins = fitins  # proxy → FitIns
        self.mean, self.summed_nodes = None, []

    def configure_fit(self, server_round, parameters, client_manager):
        return list(self.fitins.items())

    def aggregate_fit(self, server_round, results, failures):
        self.summed_nodes = [proxy.node_id for proxy, _ in results]
        if results:  # the workflow put the unmasked mean in every result's parameters
            self.mean = parameters_to_ndarrays(results[0][1].parameters)
        return None, {}

    # the workflow calls nothing else of a strategy
    def initialize_parameters(self, client_manager):
        return None

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class _Workflow(SecAggPlusWorkflow):
    """Flower's SecAggPlusWorkflow, less one defect of flwr 1.41: a node lost in the setup stage (it never received a
    key or a share) stays among the sampled nodes, so the unmask stage lists it as dropped and asks every survivor
    for shares of its key, which none holds — every survivor fails and the whole sum with them (seen on a 10-node
    deployment whose 3 killed nodes were still sampled the next round). Here such a node leaves the exchange after
    setup; a node lost later is recovered by the protocol as before."""

    def setup_stage(self, grid, context, state) -> bool:
        ok = super().setup_stage(grid, context, state)
        if state.sampled_node_ids - state.active_node_ids:
            state.sampled_node_ids = set(state.active_node_ids)
            state.nid_to_neighbours = {n: nb & state.active_node_ids for n, nb in state.nid_to_neighbours.items()
                                       if n in state.active_node_ids}
        return ok


class _RecordedGrid:
    """The grid as the workflow sees it: each stage's messages through the server's recorded exchange."""

    def __init__(self, server, r: int):
        self.server, self.r = server, r
        self.failures: dict[int, str] = {}  # node → why it left the exchange (an error, no reply in time)
        self.exchanges = 0  # the protocol's stages that went out

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        stage = messages[0].content.config_records[SECAGG][Key.STAGE] if messages else "none"
        replies, failures = self.server.exchange(f"secagg.{stage}", self.r, messages)
        self.failures.update(failures)
        self.exchanges += 1
        return list(replies.values())


def summed_exchange(server, r: int, targets, payload: dict, config: dict, instructions: dict, layout,
                    s: secagg.SecAggSettings):
    """Run SecAgg+ over ``targets`` (registered clients) for round ``r``: the payload, the round's ``config`` and each
    client's ``instructions`` (client id → dict, with the vector's ``layout``) go out as legacy FitIns. Returns the
    exact integer sum of the vectors (None: fewer than 2 clients to sum, or fewer than the threshold remained), the
    client ids summed, {node: why} for the nodes that left, and the number of exchanges (4 when it completes)."""
    if len(targets) < secagg.MIN_CONTRIBUTIONS:  # Flower's setup refuses it too: send nothing at all
        return None, [], {}, 0
    masks.in_force()
    run_id = server.grid.run.run_id
    params = ndarrays_to_parameters([as_numpy(v) for v in payload.values()])
    shared = {CONFIG_JSON: json.dumps(config), NAMES: json.dumps(list(payload))}
    strategy = _Summed({GridClientProxy(c.node_id, server.grid, run_id):
                        FitIns(params, {**shared, EXCHANGE: json.dumps({**instructions[c.client_id],
                                                                        "layout": [p.to_dict() for p in layout]})})
                        for c in targets})
    context = LegacyContext(Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                            strategy=strategy)
    context.state[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: r + 1})
    context.state[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = _Workflow(**s.flower(), timeout=server.opts.reply_timeout)
    grid = _RecordedGrid(server, r)
    workflow(grid, context)
    summed = sorted(c.client_id for c in targets if c.node_id in strategy.summed_nodes)
    if strategy.mean is None:
        return None, summed, grid.failures, grid.exchanges
    sums = secagg.recover_sums(np.concatenate([np.asarray(a).ravel() for a in strategy.mean]), len(summed), s)
    return sums, summed, grid.failures, grid.exchanges
