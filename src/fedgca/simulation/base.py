"""What every simulated method provides to the runner."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from fedgca import methods

EvaluateFn = Callable[[str, int], None]  # (phase, epoch) → records a metrics row


@dataclass
class CommRecord:
    """What crossed the network in one round, measured from the payloads built."""

    bytes_up: int
    bytes_down: int
    uploads: int  # GCA: number of codes; parameter-sharing methods: number of models
    participants: list[int]
    extra: dict = field(default_factory=dict)


_SIMULATORS: dict[str, type] = {}


def simulates(*names: str):
    """Class decorator: this SimMethod implements these registered methods in the simulator."""
    def bind(cls):
        for name in names:
            methods.get(name)  # a registered method
            if name in _SIMULATORS:
                raise ValueError(f"method {name!r} has two simulator classes")
            _SIMULATORS[name] = cls
        return cls

    return bind


class SimMethod:
    """One federated method in the in-process simulator.

    ``run_round`` trains the participating clients for one round and calls
    ``evaluate(phase, epoch)`` where the method's evaluation points are; the
    runner adds an end-of-round evaluation. ``state_dict`` holds whatever the
    method keeps between rounds beyond the client models (e.g. a global model).
    """

    # After run_round every slot holds the same model (a global model): the test set is scored once.
    deploys_one_model = False

    def __init__(self, fed):
        self.fed = fed

    def run_round(self, r: int, part: torch.Tensor, evaluate: EvaluateFn) -> CommRecord:
        raise NotImplementedError

    def deployed_clients(self):
        """The stacked models each client deploys (its own, or the global model per client)."""
        return self.fed.clients

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
