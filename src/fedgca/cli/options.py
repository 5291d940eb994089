"""Run options on the command line, generated from ``RunConfig``'s fields (the one source of defaults and help)."""
from __future__ import annotations

import argparse
import dataclasses

from fedgca.config import RunConfig, option_name
from fedgca.threads import DEFAULT_TORCH_THREADS


def _type_of(f: dataclasses.Field):
    kind = str(f.type).replace(" ", "")
    if kind.startswith("bool"):
        return bool
    if kind.startswith("int"):
        return int
    if kind.startswith("float"):
        return float
    return str


def add_run_options(p: argparse.ArgumentParser, *, in_process: bool = False) -> None:
    """One option per RunConfig field, with its type, choices, help and default; plus --data-dir and --out
    (``in_process``: also --threads and --resume, which only the in-process simulator has)."""
    for f in dataclasses.fields(RunConfig):
        meta, kind = f.metadata, _type_of(f)
        flag = option_name(f.name)
        if kind is bool:
            p.add_argument(flag, action="store_true", default=None, help=meta["help"])
            continue
        required = f.default is dataclasses.MISSING
        if required:
            default_text = "required"
        elif meta.get("preset"):
            default_text = f"default: {meta['preset']}"
        else:
            default_text = f"default: {f.default}"
        choices = meta.get("choices")
        help_text = meta["help"] + (f" ({'|'.join(choices)})" if choices else "") + f" [{default_text}]"
        metavar = "{" + ",".join(choices) + "}" if choices else {int: "N", float: "X"}.get(kind, "VALUE")
        p.add_argument(flag, type=kind, required=required, default=None, metavar=metavar, help=help_text)
    p.add_argument("--data-dir", help="dataset directory [default: $FEDGCA_DATA_DIR, else the user cache]")
    p.add_argument("--out", help="output directory [default: runs/<dataset>-<method>-seed<seed>]")
    if in_process:
        p.add_argument("--threads", type=int, default=DEFAULT_TORCH_THREADS,
                       help="torch intra-op threads for this run [default: 1 — small autoencoders gain nothing "
                            "from more; run several runs side by side instead]")
        p.add_argument("--resume", action="store_true", help="continue a killed run from its last completed round")


def config_from_args(args) -> RunConfig:
    """The resolved RunConfig of parsed options (options left unset take RunConfig's defaults)."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return RunConfig(**values).resolved()
