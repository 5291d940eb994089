"""``fedgca schema``: write a schema for your own table (infer) or a built-in dataset's (show)."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def register(sub) -> None:
    from fedgca.data.schema import SPLIT_RULES

    p = sub.add_parser("schema", help="write the schema of a table: inferred from a file, or a built-in dataset's")
    ssub = p.add_subparsers(dest="schema_command", required=True)
    i = ssub.add_parser("infer", help="infer a schema from a CSV/TSV/Parquet file (numeric vs categorical, "
                                      "category lists, the label rule); edit it as you like")
    i.add_argument("file")
    i.add_argument("--label", required=True, help="the label column")
    i.add_argument("--normal", required=True, help="label value(s) of normal rows, comma-separated")
    i.add_argument("--anomaly", help="label value(s) of anomalies, comma-separated [default: every other value]")
    i.add_argument("--site", help="a column naming each row's site (--partition natural: one client per site)")
    i.add_argument("--exclude", default="", help="columns to leave out, comma-separated (identifiers, leaks)")
    i.add_argument("--sep", help="field separator [default: sniffed from the header line]")
    i.add_argument("--test-split", choices=SPLIT_RULES, help=f"[default: {SPLIT_RULES[0]}]")
    i.add_argument("--out", help="schema file to write [default: stdout]")
    i.set_defaults(func=cmd_infer)
    s = ssub.add_parser("show", help="a built-in tabular dataset's schema (its preset, as own data would use it)")
    s.add_argument("dataset")
    s.add_argument("--out", help="schema file to write [default: stdout]")
    s.set_defaults(func=cmd_show)


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [v.strip() for v in text.split(",") if v.strip()]


def _emit(schema, out: str | None) -> None:
    text = json.dumps(schema.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if out:
        if Path(out).exists() and Path(out).is_dir():
            raise ValueError(f"--out {out} is a directory")
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def cmd_infer(args) -> int:
    from fedgca.data import infer_schema

    schema, notes = infer_schema(Path(args.file), label=args.label, normal=_split(args.normal),
                                 anomaly=_split(args.anomaly), site=args.site, exclude=tuple(_split(args.exclude) or ()),
                                 sep=args.sep)
    if args.test_split:
        schema = schema.with_test(args.test_split)
    for note in notes:
        print(f"schema: {note}", file=sys.stderr)
    _emit(schema, args.out)
    return 0


def cmd_show(args) -> int:
    from fedgca.data.presets import schema

    _emit(schema(args.dataset), args.out)
    return 0
