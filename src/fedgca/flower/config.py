"""Run configuration of the Flower apps: fedgca's ``RunConfig`` plus a few deployment options.

Flower passes configuration as flat TOML-style key/value pairs with dashes
(``[tool.flwr.app.config]`` in the app's pyproject, ``flwr run --run-config``).
Every ``RunConfig`` field is accepted under its dashed name (``recon-epochs``,
``local-epochs``, ``fedprox-mu``, ...); the keys below are Flower-only.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fedgca.config import RunConfig

# Flower-only keys (server side) and their defaults.
FLOWER_DEFAULTS: dict[str, object] = {
    "out-dir": "",  # where the ServerApp writes metrics.csv, summary.json, comm.json, messages.jsonl
    "min-nodes": 0,  # nodes to wait for before round 1 (0 → the run's `clients`)
    "wait-timeout": 300.0,  # seconds to wait for them
    "reply-timeout": 3600.0,  # seconds a phase waits for replies; a node silent for longer is dropped
    "resume": False,  # continue the run in out-dir from its server checkpoint (a killed ServerApp or SuperLink)
}


@dataclass(frozen=True)
class FlowerOptions:
    out_dir: str = ""
    min_nodes: int = 0
    wait_timeout: float = 300.0
    reply_timeout: float = 3600.0
    resume: bool = False


def _dashed(name: str) -> str:
    return name.replace("_", "-")


def _coerce(field: dataclasses.Field, value):
    """TOML gives int/float/bool/str; cast to what the RunConfig field holds (0 / "" → preset for optionals)."""
    kind = str(field.type)
    optional = "None" in kind
    if optional and (value == "" or (value == 0 and field.metadata.get("preset"))):
        return None
    if kind.startswith("bool"):
        return _as_bool(value)
    if kind.startswith("int"):
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"run config {_dashed(field.name)!r} must be an integer, got {value}")
        return int(value)
    if kind.startswith("float"):
        return float(value)
    return str(value)


def parse_run_config(values: dict) -> tuple[RunConfig, FlowerOptions]:
    """Flower run config (dashed keys) → resolved ``RunConfig`` and the Flower-only options."""
    fields = {_dashed(f.name): f for f in dataclasses.fields(RunConfig)}
    known = set(fields) | set(FLOWER_DEFAULTS)
    unknown = sorted(k for k in values if k not in known)
    if unknown:
        raise ValueError(f"unknown run-config key(s): {', '.join(unknown)}")
    if "dataset" not in values:
        raise ValueError("run config needs 'dataset' (a built-in name; for own-data federations the name "
                         "only labels the run, e.g. dataset = \"magic\")")
    cfg = RunConfig(**{f.name: _coerce(f, values[k]) for k, f in fields.items() if k in values}).resolved()
    opts = {k: values.get(k, d) for k, d in FLOWER_DEFAULTS.items()}
    options = FlowerOptions(
        out_dir=str(opts["out-dir"]),
        min_nodes=int(opts["min-nodes"]) or int(cfg.clients),
        wait_timeout=float(opts["wait-timeout"]),
        reply_timeout=float(opts["reply-timeout"]),
        resume=_as_bool(opts["resume"]),
    )
    if not math.isfinite(options.reply_timeout) or options.reply_timeout <= 0:
        raise ValueError("reply-timeout must be a positive number of seconds")
    if options.resume and not options.out_dir:
        raise ValueError("resume continues the run in out-dir: set out-dir")
    return cfg, options


def _as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def to_run_config(cfg: RunConfig, **flower) -> dict:
    """``RunConfig`` (+ Flower options with dashed keys) → a flat dict for ``[tool.flwr.app.config]``.

    Optional fields left at ``None`` are written as their resolved values, so
    the app project states every number it runs with; one without a resolved value (``--target-epsilon``
    unset) is written as "" (TOML has no null), which reads back as None.
    """
    out = {_dashed(k): "" if v is None else v for k, v in cfg.resolved().to_dict().items()}
    for k, v in flower.items():
        key = _dashed(k)
        if key in out and key not in FLOWER_DEFAULTS:  # a run option given here (eval_recon_epochs=False)
            out[key] = v
            continue
        if key not in FLOWER_DEFAULTS:
            raise ValueError(f"unknown Flower option {key!r}")
        out[key] = v
    return out
