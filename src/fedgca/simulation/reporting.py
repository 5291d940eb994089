"""The simulator's summary.json (built by ``fedgca.runrecord``, the record both drivers share)."""
from __future__ import annotations

from fedgca import runrecord
from fedgca.config import RunConfig
from fedgca.models import param_count


def summarise(cfg: RunConfig, fed, method_extra: dict, rows: list[dict], comm: list[dict], wall: float) -> dict:
    extra = {"data": runrecord.data_record(cfg, fed.dataset), "device": str(fed.device), **method_extra}
    return runrecord.summary(
        cfg, clients=cfg.clients, input_shape=fed.dataset.input_shape, latent_dim=fed.latent_dim,
        param_count=param_count(fed.template), client_sizes=fed.shards.sizes, rows=rows, comm=comm, wall=wall,
        has_validation=fed.val_shards is not None, extra=extra)
