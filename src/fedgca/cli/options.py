"""Run options on the command line, generated from ``RunConfig``'s fields (the one source of defaults and help)."""
from __future__ import annotations

import argparse
import dataclasses

from fedgca.config import RunConfig, option_name
from fedgca.data.schema import SPLIT_RULES
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
        if kind is bool:  # a flag; one whose default is on also has --no-... to turn it off
            action = argparse.BooleanOptionalAction if f.default is True else "store_true"
            p.add_argument(flag, action=action, default=None, help=meta["help"])
            continue
        if f.name == "dataset" or meta.get("derived"):
            continue  # --dataset comes with the data options below; derived fields are set from --data
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
    add_data_options(p)
    p.add_argument("--out", help="output directory [default: runs/<dataset>-<method>-seed<seed>]")
    if in_process:
        p.add_argument("--threads", type=int, default=DEFAULT_TORCH_THREADS,
                       help="torch intra-op threads for this run [default: 1 — small autoencoders gain nothing "
                            "from more; run several runs side by side instead]")
        p.add_argument("--resume", action="store_true", help="continue a killed run from its last completed round")


def add_data_options(p: argparse.ArgumentParser, *, dataset_help: str | None = None) -> None:
    """--dataset (a built-in) or --data (own data) with its schema and test-set options, and --data-dir."""
    p.add_argument("--dataset", help=dataset_help or RunConfig.__dataclass_fields__["dataset"].metadata["help"])
    p.add_argument("--data", metavar="PATH", help="own data: a CSV/TSV/Parquet file (with --schema), an ODDS .mat or "
                   "ADBench .npz file (X, y), or a directory of per-site files (one file per site)")
    p.add_argument("--schema", metavar="S.json", help="own data's schema (`fedgca schema infer` writes one)")
    p.add_argument("--test-file", metavar="FILE", help="own data: a given test file (default: the schema's test rule)")
    p.add_argument("--test-split", choices=SPLIT_RULES,
                   help="own data without a test file: A anomalies + A normals drawn with the seed (balanced), "
                        "the last A normals in file order (balanced-tail, SPEC §4), or each site's own (per-site: "
                        "what a Flower deployment evaluates; needs sites) [default: the schema's]")
    p.add_argument("--name", help="own data's name in run directories and tables [default: the file's stem]")
    p.add_argument("--data-dir", help="built-in datasets' directory [default: $FEDGCA_DATA_DIR, else the user cache]")


def source_from_args(args):
    """Own data's DataSource from --data/--schema/--test-file/--test-split/--name, or None for a built-in."""
    if not getattr(args, "data", None):
        for flag in ("schema", "test_file", "test_split", "name"):
            if getattr(args, flag, None):
                raise ValueError(f"--{flag.replace('_', '-')} describes own data: add --data PATH")
        return None
    if getattr(args, "dataset", None):
        raise ValueError("--dataset names a built-in dataset and --data gives your own: use one (--name names own data)")
    from fedgca.data.source import open_source

    return open_source(args.data, args.schema, test_file=args.test_file, test_split=args.test_split, name=args.name)


def run_options(args) -> dict:
    """The RunConfig options set on the command line (unset ones are left to RunConfig and the data)."""
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def config_from_args(args, *, with_data: bool = False):
    """The resolved RunConfig of parsed options (options left unset take RunConfig's defaults).

    With own data (--data), the data is read to fill what has no preset. ``with_data`` returns
    ``(cfg, source, dataset)``: the run's :class:`~fedgca.data.DataSource` (a built-in's in --data-dir, or own
    data's) and the dataset when reading it was needed (else None).
    """
    from fedgca.binding import resolve

    source = source_from_args(args)
    if source is None:
        if not getattr(args, "dataset", None):
            raise ValueError("give --dataset NAME (a built-in dataset) or --data PATH (your own data)")
        from fedgca.data.source import DataSource

        source = DataSource.builtin(args.dataset, getattr(args, "data_dir", None))
    cfg, dataset = resolve(run_options(args), source)
    return (cfg, source, dataset) if with_data else cfg
