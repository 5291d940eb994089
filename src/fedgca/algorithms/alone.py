"""Single-Client and Centralized: local training, nothing sent (SPEC §2's references)."""
from __future__ import annotations

from fedgca.algorithms.base import ClientWork, FederatedMethod, Reply, Step, implements
from fedgca.training.local import local_training


@implements("single", "centralized")
class TrainAlone(FederatedMethod):
    """Each client trains its own model for the round's local epochs and sends nothing. Centralized is the same
    round on one client holding every client's rows (the simulator pools them: ``MethodSpec.pooled``)."""

    steps = (Step("train"),)

    def client(self, step: Step, r: int, work: ClientWork, received) -> dict[int, Reply]:
        cfg = work.cfg
        local_training(work.models, work.shards, cfg.seed, r, cfg.local_epochs, work.part, cfg.batch_size,
                       client_ids=work.ids)
        return {slot: Reply() for slot in work.slots}
