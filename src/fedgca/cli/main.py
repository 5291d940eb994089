"""The ``fedgca`` command line."""
from __future__ import annotations

import argparse
import logging
import sys

from fedgca.cli import commands


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="academic|adult|bank|credit|magic|fashion_mnist|cifar10")
    p.add_argument("--method", default="gca", help="gca|single|centralized|fedavg|fedprox|fednova|dpfedavg")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--clients", type=int, help="number of clients C (default: dataset preset)")
    p.add_argument("--k", type=int, help="number of clusters K (default: dataset preset K*)")
    p.add_argument("--rho", type=float, help="upload fraction ρ (default: dataset preset)")
    p.add_argument("--recon-epochs", type=int, default=5)
    p.add_argument("--align-epochs", type=int, default=5)
    p.add_argument("--local-epochs", type=int, default=10, help="baselines' local epochs per round")
    p.add_argument("--participation", type=float, default=1.0, help="fraction φ of clients sampled per round")
    p.add_argument("--backend", default="gmm", help="gmm|kmeans|softkmeans|minibatch")
    p.add_argument("--weights", default="inverse", help="inverse|uniform (ablation)")
    p.add_argument("--partition", default="iid", help="iid|dirichlet")
    p.add_argument("--alpha", type=float, default=0.1, help="Dirichlet concentration for --partition dirichlet")
    p.add_argument("--val-fraction", type=float, default=0.0,
                   help="validation split of each client's normals for the honest 'selected' round")
    p.add_argument("--eval-align-epochs", action="store_true", help="also evaluate after each alignment epoch")
    p.add_argument("--fedprox-mu", type=float, default=1e-2)
    p.add_argument("--fedprox-coef", type=float, help="effective proximal coefficient c (default μ/(2B))")
    p.add_argument("--dp-clip", type=float, default=1.0)
    p.add_argument("--dp-sigma", type=float, default=1.0)
    p.add_argument("--data-dir", help="dataset directory (default: $FEDGCA_DATA_DIR, else the user cache)")
    p.add_argument("--out", help="output directory (default: runs/<dataset>-<method>-<seed>)")
    p.add_argument("--resume", action="store_true", help="continue a killed run from its last completed round")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedgca", description="Federated anomaly detection with GCA")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run one federation and write its results")
    _run_options(p)
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser("score", help="score new raw records with a client's saved detector")
    p.add_argument("--run", required=True, help="a finished run directory")
    p.add_argument("--client", type=int, required=True)
    p.add_argument("--input", required=True, help="raw file in the dataset's own format (vision: PNG dir or .npy)")
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
    except (ValueError, FileNotFoundError, RuntimeError) as err:  # user-facing errors: one line, no trace
        if args.verbose:
            raise
        print(f"fedgca: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
