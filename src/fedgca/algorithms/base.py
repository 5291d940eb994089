"""What a federated method is, once for both drivers: its steps, what a client computes in each, what the
server sends and does with the replies.

In the spirit of Flower's ``Strategy`` (configure / aggregate) and PyOD's ``BaseDetector``: a method object
states a round as a sequence of ``Step``\\ s. For each step the server ``send``\\ s a payload (or nothing) to
the step's clients, each client computes its ``Reply`` (``client``), the server ``check``\\ s every reply and
``aggregate``\\ s the accepted ones. The first step goes to the round's sampled clients, each later step to the
clients whose reply the previous step accepted; a step with no accepted reply ends the round.

The drivers run the same object: the in-process simulator (``fedgca.simulation.driver``) hands ``client`` all
C clients stacked, with a participation mask; the Flower apps (``fedgca.flower.rounds``, ``client_app``) hand
it one node's client (C = 1) and carry sends and replies in messages. What belongs to a driver — faults,
rejections, recording, the evaluation of the deployed models — stays there; a method only says where its
extra evaluation points are (``work.evaluate(phase, epoch)``).

A method is registered once with its ``MethodSpec`` (``register``); ``algorithms.registry.method_for(cfg, ...)``
builds the run's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np
import torch

from fedgca import methods
from fedgca.methods import MethodSpec
from fedgca.protocol.gca import UploadError

EvaluateFn = Callable[[str, int], None]  # (phase, epoch): the driver evaluates the deployed models there


@dataclass(frozen=True)
class Step:
    """One exchange of a round.

    ``sends``: the name under which the server's payload travels (None: the step's message carries only the
    configuration); ``reply``: the name of the arrays a client replies with (None: no arrays); ``metrics``: the
    reply carries scalars (sample counts, local steps); ``summed``: the server never receives a client's reply
    arrays, only their weighted mean over the clients (weights: ``num-examples``), through Flower's SecAgg+
    (``protocol.secagg``) — ``aggregate`` then gets one Reply under ``SUMMED``.
    """

    name: str
    sends: str | None = None
    reply: str | None = None
    metrics: bool = False
    summed: bool = False


SUMMED = -1  # the key of a summed step's one reply: the mean over the clients, no client's own


@dataclass
class Reply:
    """What one client sends the server in one step: arrays (NumPy or torch) and scalars."""

    arrays: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return arrays_nbytes(self.arrays)


def arrays_nbytes(arrays: dict) -> int:
    """Bytes of a payload's arrays (NumPy or torch) as they travel: comm.json's measure, both drivers."""
    return int(sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays.values()))


@dataclass
class ClientWork:
    """The clients a driver hands a method's ``client``: the simulator's C stacked clients or one Flower node's.

    ``part``: which slots take part in this step (a CPU bool mask); ``ids``: each slot's global client id (it
    keys the client's random draws); ``evaluate``: the driver's evaluation of the deployed models.
    """

    cfg: object  # the run's RunConfig
    models: object  # training.stacked.StackedModels
    shards: object  # training.loop.ClientShards
    part: torch.Tensor
    ids: list
    evaluate: EvaluateFn

    @property
    def slots(self) -> list[int]:
        return [int(i) for i in torch.nonzero(self.part).flatten()]


class FederatedMethod:
    """A federated method's round (see the module docstring). Subclasses set ``steps`` and override the hooks.

    One object per run and side: the server's holds the server state (``start``, ``aggregate``, ``send``,
    ``state_dict``); a client's is stateless between messages (its model lives in the driver).
    """

    steps: ClassVar[tuple[Step, ...]] = (Step("train"),)
    deploys_global: ClassVar[bool] = False  # after a round every client deploys the server's model (``deployed``)

    def __init__(self, cfg, kind: str, sizes):
        """``cfg``: the resolved RunConfig; ``kind``: "tabular" | "vision"; ``sizes``: the N_i the method may
        read (every client's on the server side, the node's own on a Flower client)."""
        self.cfg, self.kind, self.sizes = cfg, kind, [int(n) for n in sizes]
        self.latent_dim: int | None = None  # the width of a code: the server's driver sets it (a summed layout's size)
        # how the server fits a clustering model (``protocol.clustering.cluster_codes``'s ``fit``); None: on its
        # own. The batched engine's driver sets its broker's, which fits alike models of many runs as one.
        self.fit_clustering = None

    # ------------------------------------------------------------------ both sides

    def evaluation_points(self) -> list[tuple[str, int]]:
        """The (phase, epochs) a client evaluates within a round besides the round's end (Flower builds its
        metric rows from them; the simulator records them as they come)."""
        return []

    # ------------------------------------------------------------------ client

    def client(self, step: Step, r: int, work: ClientWork, received: dict | None) -> dict[int, Reply]:
        """Each participating slot's reply {slot: Reply}; ``received``: what ``send`` returned for this step."""
        raise NotImplementedError

    # ------------------------------------------------------------------ server

    def start(self, initial: dict, num_clients: int) -> None:
        """Server state before round 0; ``initial`` is client 0's initial model (θ^(0) where one is shared)."""

    def send(self, step: Step, r: int) -> dict | None:
        """The arrays the server sends every client of ``step`` (None: nothing but the configuration)."""
        return None

    def check(self, step: Step, reply: Reply, num_examples: int, latent_dim: int) -> Reply:
        """The reply if the protocol allows it, else ``UploadError`` (what the server accepts of a client)."""
        if reply.arrays or reply.metrics:
            raise UploadError(f"step {step.name!r} takes an empty reply")
        return reply

    def aggregate(self, step: Step, r: int, replies: dict[int, Reply]) -> None:
        """Fold the accepted replies {client id: Reply} (in client-id order) into the server state."""

    def deployed(self) -> dict | None:
        """The model every client deploys after the round (``deploys_global``), else None."""
        return None

    def uploads(self, step: Step, replies: dict[int, Reply]) -> int:
        """comm.json's ``uploads`` for this step: models by default (GCA counts codes)."""
        return len(replies) if step.reply else 0

    def round_record(self) -> dict:
        """Extra comm.json fields of the round just aggregated (GCA: the broadcast K)."""
        return {}

    def size_note(self, sizes) -> str | None:
        """A warning about this federation's sizes the run should carry (GCA: K above the codes per round), or
        None; a federation the method cannot run raises ``ValueError``."""
        return None

    def summary_extra(self) -> dict:
        """Extra summary.json blocks (DP-FedAvg's accounting, FedProx's coefficient)."""
        return {}

    def state_dict(self) -> dict:
        """The server state a checkpoint keeps (tensors, lists, numbers)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def step_named(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise ValueError(f"method {self.cfg.method!r} has no step {name!r}")


_CLASSES: dict[str, type[FederatedMethod]] = {}


def implements(*names: str):
    """Class decorator: this class is the round of these registered methods."""
    def bind(cls):
        for name in names:
            methods.get(name)  # registered
            if name in _CLASSES:
                raise ValueError(f"method {name!r} has two implementations")
            _CLASSES[name] = cls
        return cls

    return bind


def register(spec: MethodSpec, cls: type[FederatedMethod]) -> MethodSpec:
    """Add a method: its spec to the registry (``fedgca.methods``) and ``cls`` as its round — the one call a new
    method needs besides its module."""
    methods.register(spec)
    implements(spec.name)(cls)
    return spec
