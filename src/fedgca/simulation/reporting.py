"""summary.json: the run's identity, its communication, and metrics under each reporting protocol."""
from __future__ import annotations

import math

import numpy as np

from fedgca.config import RunConfig
from fedgca.evaluation.selection import protocol_results
from fedgca.models import param_count
from fedgca.provenance import code_version

def _per_round(values: list[int]):
    return values[0] if len(set(values)) == 1 else float(np.mean(values))


def summarise(cfg: RunConfig, fed, method, rows: list[dict], comm: list[dict], wall: float) -> dict:
    shape = fed.dataset.input_shape
    return {
        "dataset": cfg.dataset,
        "method": cfg.method,
        "seed": cfg.seed,
        "rounds": cfg.rounds,
        "clients": cfg.clients,
        "k": cfg.k,
        "rho": cfg.rho,
        "backend": cfg.backend,
        "weights": cfg.weights,
        "partition": cfg.partition,
        "input_dim": int(math.prod(shape)),
        "input_shape": list(shape),
        "latent_dim": fed.latent_dim,
        "param_count": param_count(fed.template),
        "client_sizes": [int(n) for n in fed.shards.sizes],
        "uploads_per_round": _per_round([c["uploads"] for c in comm]),
        "bytes_up_per_round": _per_round([c["bytes_up"] for c in comm]),
        "bytes_down_per_round": _per_round([c["bytes_down"] for c in comm]),
        "bytes_total": int(sum(c["bytes_up"] + c["bytes_down"] for c in comm)),
        "wall_seconds": round(wall, 3),
        "code": code_version(),  # the code that finished the run (a resumed run may have started on another)
        **protocol_results(rows, fed.val_shards is not None),
        **getattr(method, "summary_extra", lambda: {})(),
    }
