"""What a run costs in protocol FLOPs, from its configuration and its data's sizes: the sweep's ETA and plan,
and the roofline benchmark's FLOP counts.

Counted as issue #14 and ``benchmarks/bench_roofline.py`` count them, with F = the multiply-adds of one
row's forward pass (``fedgca.models.forward_cost``; F = P, the parameter count, for the tabular MLP; ~50×
P for the vision AE, whose convolutions reuse each weight at every position) and F_enc the encoder's:
a scored row costs 2F (one forward pass), a reconstruction-training row 6F (forward + backward), an
alignment-training row 6F_enc (the encoder alone; ≈ 3F). Clustering, Adam and data movement are
overhead by this count, so seconds per protocol FLOP is an efficiency, not a constant: use it between
runs of similar kinds (the ETA calibrates it on the runs that finished).

Per round, with C clients, N training rows (all clients), V validation rows, M test rows, E local epochs:

* GCA (and DP-GCA): T_recon·6FN + T_align·6F_enc·N of training; (T_recon + 1) evaluations — (+ T_align
  with ``--eval-align-epochs``) — each scoring the test set with every client's model and each client's
  own rows: 2F(C·M + N + V); with ``--eval-align-clients client0`` the T_align evaluations score client
  0's model alone, 2F(M + N_0 + V_0);
* Single-Client: E·6FN; one evaluation, 2F(C·M + N + V);
* Centralized: E·6FN on the pooled rows; one evaluation of its one model, 2F(M + N + V);
* parameter sharing: E·6F·N·m/C (m = ⌊φC⌋ participants: their expected rows); one evaluation of the
  global model, scored once, 2F(M + N + V), plus 2F(C·M + N + V) with ``--baseline-eval local`` and again
  after every local epoch with ``--eval-local-epochs`` (the
  clients' own models before aggregation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fedgca.config import ABLATION_CLIENT, RunConfig
from fedgca.protocol.sampling import num_participants


@dataclass(frozen=True)
class Sizes:
    """The sizes a run's FLOPs depend on."""

    clients: int
    train_rows: int  # N: every client's training rows (validation rows removed)
    val_rows: int  # V
    test_rows: int  # M
    forward: int  # F: multiply-adds of one row's forward pass (fedgca.models.forward_cost)
    encoder_forward: int  # F_enc: the same for the encoder alone
    fixed_rows: int = 0  # N_0, V_0: the weighting ablation's client's training and validation rows
    fixed_val_rows: int = 0


def round_parts(cfg: RunConfig, s: Sizes) -> dict[str, float]:
    """Protocol FLOPs of one round by part: "recon", "align" (GCA's phases), "local" (everyone else's
    training) and "eval"."""
    cfg = cfg.resolved()
    spec = cfg.spec
    F, N, V, M, C = s.forward, s.train_rows, s.val_rows, s.test_rows, s.clients
    every_model = 2 * F * (C * M + N + V)  # every client's model scores the test set and its own rows
    one_model = 2 * F * (M + N + V)  # one model scores the test set once; thresholds on each client's rows
    if spec.family == "gca":
        align_evals = cfg.align_epochs if cfg.eval_align_epochs else 0
        align_eval = every_model if cfg.eval_align_clients == "all" else 2 * F * (M + s.fixed_rows + s.fixed_val_rows)
        return {"recon": cfg.recon_epochs * 6 * F * N, "align": cfg.align_epochs * 6 * s.encoder_forward * N,
                "local": 0,
                "eval": (cfg.recon_epochs + 1) * every_model + align_evals * align_eval}
    local = cfg.local_epochs * 6 * F * N
    if spec.alone:
        return {"recon": 0, "align": 0, "local": local, "eval": every_model}
    if spec.pooled:
        return {"recon": 0, "align": 0, "local": local, "eval": one_model}
    share = num_participants(cfg.participation, C) / C
    local_evals = (cfg.baseline_eval == "local") + (cfg.local_epochs if cfg.eval_local_epochs else 0)
    return {"recon": 0, "align": 0, "local": local * share, "eval": one_model + local_evals * every_model}


def round_flops(cfg: RunConfig, s: Sizes) -> dict[str, float]:
    """Protocol FLOPs of one round: {"train": ..., "eval": ...}."""
    parts = round_parts(cfg, s)
    return {"train": parts["recon"] + parts["align"] + parts["local"], "eval": parts["eval"]}


def run_flops(cfg: RunConfig, s: Sizes) -> float:
    """Protocol FLOPs of the whole run (R rounds)."""
    return cfg.resolved().rounds * sum(round_flops(cfg, s).values())


def sizes(cfg: RunConfig, source) -> Sizes:
    """A run's sizes on ``source`` (its :class:`~fedgca.data.DataSource`): the dataset's (loaded once per source)
    and its realised partition's."""
    from fedgca.data.partition import client_splits

    cfg = cfg.resolved()
    ds, n_test, (forward, encoder_forward) = _dataset(source.cache_key, source)
    parts, val = client_splits(cfg, ds)
    return Sizes(clients=cfg.clients, train_rows=sum(len(p) for p in parts), val_rows=sum(len(v) for v in val),
                 test_rows=n_test, forward=forward, encoder_forward=encoder_forward,
                 fixed_rows=len(parts[ABLATION_CLIENT]), fixed_val_rows=len(val[ABLATION_CLIENT]))


_DATASETS: dict[tuple, tuple] = {}


def _dataset(key: tuple, source):
    """What the sizes need of a dataset, loaded once per process and source (``source.cache_key``)."""
    if key in _DATASETS:
        return _DATASETS[key]
    from fedgca.models import build_model, forward_cost

    ds = source.load()
    _DATASETS[key] = out = (ds, len(ds.test_x), forward_cost(build_model(ds.input_shape), ds.input_shape))
    return out


def hours(seconds: float) -> str:
    """'1h05m' / '12m30s': a duration as the sweep's progress lines print it."""
    seconds = max(0.0, float(seconds))
    if math.isinf(seconds) or math.isnan(seconds):
        return "?"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m" if seconds >= 3600 \
        else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
