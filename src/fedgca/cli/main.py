"""The ``fedgca`` command line."""
from __future__ import annotations

import argparse
import logging
import sys

from fedgca import devices
from fedgca.cli import commands
from fedgca.cli.options import add_run_options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedgca", description="Federated anomaly detection with GCA")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run one federation and write its results")
    add_run_options(p, in_process=True)
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser("score", help="score new raw records with a client's saved detector")
    p.add_argument("--run", required=True, help="a finished run directory")
    p.add_argument("--client", type=int, required=True)
    p.add_argument("--input", required=True, help="raw file in the dataset's own format (vision: PNG dir or .npy)")
    p.add_argument("--device", default="cpu", help=f"where it scores: {devices.CHOICES} [default: cpu]")
    p.add_argument("--output", help="CSV to write (default: stdout)")
    p.set_defaults(func=commands.cmd_score)

    commands.register_extra(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, RuntimeError) as err:  # user-facing errors: one line, no trace
        if args.verbose:
            raise
        print(f"fedgca: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedgca: interrupted (a run resumes from its last completed round with --resume)", file=sys.stderr)
        return 130


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename and str(err.filename) not in text:
        text = f"{err.filename}: {text}"
    return text


if __name__ == "__main__":
    sys.exit(main())
