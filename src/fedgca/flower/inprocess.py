"""Run a Flower ServerApp and ClientApp in this process, without Ray or a SuperLink.

``InProcessGrid`` is a :class:`flwr.serverapp.Grid` that delivers each message
to the ClientApp of its destination node, with that node's own persistent
``Context`` (``node_config``, ``state``), and returns the reply — the same
objects a Flower deployment hands the apps, one node at a time. Messages
and replies are deep-copied on the way (nothing is shared between the
server and a client), a client exception becomes an error reply as in
Flower, and the apps are called exactly as the Flower runtime calls them:
``server_app(grid, context)`` and ``client_app(message, context)``.

This is fedgca's default local engine: deterministic and fast on a laptop. Like Flower's
Simulation Engine (one CPU per ClientApp by default), it runs each ClientApp call with one torch
thread (``client_threads``), so both engines produce the same numbers.
``fedgca.flower.simulation.simulate(engine="ray")`` runs the same apps in
Flower's Simulation Engine instead (needs ``pip install "flwr[simulation]"``).
"""
from __future__ import annotations

import copy
import itertools
import traceback
from uuid import uuid4

import torch
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

SERVER_NODE_ID = 1


class InProcessGrid(Grid):
    def __init__(self, client_app: ClientApp, node_configs: list[dict], run_config: dict | None = None,
                 run_id: int = 1, client_threads: int | None = 1):
        self.client_app = client_app
        self.client_threads = client_threads
        self._run = Run.create_empty(run_id=run_id)
        self.contexts: dict[int, Context] = {}
        for i, nc in enumerate(node_configs):
            node_id = 1000 + i
            self.contexts[node_id] = Context(run_id=run_id, node_id=node_id, node_config=dict(nc),
                                             state=RecordDict(), run_config=dict(run_config or {}))
        self.down: set[int] = set()  # nodes that behave as disconnected (tests)
        self._replies: dict[str, Message] = {}
        self._counter = itertools.count()

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return [n for n in self.contexts if n not in self.down]

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            mid = f"{next(self._counter)}-{uuid4().hex}"
            msg.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if node not in self.contexts or node in self.down:
                continue  # never answered: the server's reply timeout drops it
            self._replies[mid] = self._deliver(copy.deepcopy(msg), self.contexts[node])
        return ids

    def _deliver(self, msg: Message, context: Context) -> Message:
        saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = self._run.run_id, context.node_id, 0
        threads = torch.get_num_threads()
        if self.client_threads:
            torch.set_num_threads(self.client_threads)
        try:
            reply = self.client_app(msg, context)
        except Exception as e:  # noqa: BLE001 - Flower turns a ClientApp exception into an error reply
            reason = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
        finally:
            torch.set_num_threads(threads)
            TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
        reply.metadata.__dict__["_message_id"] = uuid4().hex
        return copy.deepcopy(reply)

    def pull_messages(self, message_ids):
        return [self._replies.pop(mid) for mid in list(message_ids) if mid in self._replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def run_inprocess(server_app: ServerApp, client_app: ClientApp, node_configs: list[dict],
                  run_config: dict | None = None, grid_class: type[InProcessGrid] = InProcessGrid
                  ) -> tuple[Context, InProcessGrid]:
    """Run ``server_app`` against one ``client_app`` per node config; returns the server context and the grid."""
    grid = grid_class(client_app, node_configs, run_config)
    context = Context(run_id=grid.run.run_id, node_id=SERVER_NODE_ID, node_config={}, state=RecordDict(),
                      run_config=dict(run_config or {}))
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = grid.run.run_id, SERVER_NODE_ID, 0
    try:
        server_app(grid, context)
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
    return context, grid
