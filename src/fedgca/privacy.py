"""Which runs carry a record-level DP guarantee, their noise, and their accounting (docs/DP.md).

The mechanisms and the accountant are ``fedgca.protocol.dp``; this module maps a run's options and
its clients' row counts onto them, once, for both drivers: the simulator and the Flower ServerApp
resolve the noise here (calibrating it when ``--target-epsilon`` is set), the clients train with it,
and ``runrecord.summary`` reports the accounting from it.
"""
from __future__ import annotations

import dataclasses
import functools

from fedgca.protocol import dp
from fedgca.protocol.gca import upload_size


def is_record_dp(cfg) -> bool:
    return cfg.spec.record_dp


def stats_noise(cfg) -> float | None:
    """σ_s of the preprocessing statistics when a run of ``cfg`` (a RunConfig, resolved or not) releases them through
    mechanism 0 (a record-DP method with ``--dp-stats-sigma``), else None."""
    return float(cfg.dp_stats_sigma) if cfg.dp_stats_sigma is not None and is_record_dp(cfg) else None


def refuse_plain_statistics(cfg) -> None:
    """One answer in both drivers: a record-DP run whose encoding is fitted from per-site statistics releases them
    privately (``--dp-stats-sigma``) or does not run (the Flower ServerApp and the simulator's per-site fit)."""
    if is_record_dp(cfg) and cfg.dp_stats_sigma is None:
        raise ValueError(f"--method {cfg.method}: the shared encoding is fitted from each site's row count, column "
                         "means and scatter, which ε would not cover: set --dp-stats-sigma (their Gaussian release, "
                         "accounted in ε; numeric features need a public 'range' in the schema; docs/DP.md)")


def schedules(cfg, sizes) -> list[dp.ClientSchedule]:
    """What each client runs over the whole run (every round counted: φ < 1 is not amplified)."""
    gca = cfg.spec.family == "gca"
    epochs = cfg.recon_epochs + cfg.align_epochs if gca else cfg.local_epochs
    return [dp.ClientSchedule(rows=int(n), batch_size=cfg.batch_size, sgd_epochs_per_round=epochs,
                              upload_rows=upload_size(int(n), cfg.rho) if gca else 0, rounds=cfg.rounds)
            for n in sizes]


def resolve(cfg, sizes) -> dp.RecordDP | None:
    """The run's noise: the explicit σ's, or one σ calibrated to ``--target-epsilon``; None without record DP."""
    if not is_record_dp(cfg):
        return None
    given = dp.RecordDP(cfg.dp_grad_clip, cfg.dp_grad_sigma, cfg.dp_code_clip, cfg.dp_code_sigma, cfg.dp_stats_sigma)
    if cfg.target_epsilon is None:
        return given
    scheds = tuple(schedules(cfg, sizes))
    return _calibrated(scheds, given, cfg.dp_delta, cfg.target_epsilon)


@functools.lru_cache(maxsize=32)
def _calibrated(scheds: tuple, given: dp.RecordDP, delta: float, target: float) -> dp.RecordDP:
    return dp.calibrate(list(scheds), given, delta, target)


def accounting(cfg, sizes) -> dict | None:
    """summary.json's ``dp`` block of a record-level DP run; None for other runs."""
    noise = resolve(cfg, sizes)
    if noise is None:
        return None
    scheds = schedules(cfg, sizes)
    return dp.accounting_record(scheds, noise, cfg.dp_delta, cfg.target_epsilon)


def message_config(cfg, sizes):
    """The config a server sends its clients: a calibrated σ written out (the clients' own row counts
    alone cannot reproduce a calibration over all clients)."""
    noise = resolve(cfg, sizes)
    if noise is None or cfg.target_epsilon is None:
        return cfg
    return dataclasses.replace(cfg, dp_grad_sigma=noise.grad_sigma, dp_code_sigma=noise.code_sigma,
                               target_epsilon=None)
