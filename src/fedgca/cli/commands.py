"""Implementations of the CLI sub-commands (thin: parse → library call → files)."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from fedgca.cli.options import config_from_args
from fedgca.config import RunConfig
from fedgca.threads import limit_threads


def default_out(cfg: RunConfig) -> Path:
    return Path("runs") / f"{cfg.dataset}-{cfg.method}-seed{cfg.seed}"


def cmd_run(args) -> int:
    from fedgca.simulation.runner import run

    if args.threads < 1:
        raise ValueError(f"--threads must be ≥ 1, got {args.threads}")
    cfg, source, dataset = config_from_args(args, with_data=True)
    limit_threads(args.threads)
    out = Path(args.out) if args.out else default_out(cfg)
    summary = run(cfg, out, source=source, resume=args.resume, dataset=dataset)
    brief = {k: summary[k] for k in ("dataset", "method", "seed", "rounds", "wall_seconds")}
    brief.update({p: {m: round(summary[p][m], 4) for m in ("accuracy", "auroc", "auprc")}
                  for p in ("final", "peak", "selected")})
    if "dp" in summary:  # the privacy the run spent (record-level: DP-GCA, DP-SGD-FedAvg; user-level: DP-FedAvg)
        brief["dp"] = {k: summary["dp"][k] for k in ("epsilon", "delta", "accountant") if k in summary["dp"]}
    print(json.dumps(brief, indent=1))
    print("peak = the paper's protocol (best test accuracy over evaluations, chosen with test labels); "
          "selected = chosen without test labels (validation error, or the final round without --val-fraction); "
          "final = after the last round", file=sys.stderr)
    print(f"results in {out}", file=sys.stderr)
    return 0


def cmd_score(args) -> int:
    from fedgca.detector import load_client_detector

    det = load_client_detector(args.run, args.client, device=args.device)
    scores, flags = det.score_file(args.input)
    out = open(args.output, "w", newline="") if args.output else sys.stdout
    try:
        w = csv.writer(out)
        w.writerow(["row", "score", "anomaly"])
        for i, (s, f) in enumerate(zip(scores, flags)):
            w.writerow([i, f"{s:.6g}", int(f)])
    finally:
        if args.output:
            out.close()
    print(f"scored {len(scores)} rows; {int(flags.sum())} flagged as anomalous (threshold {det.threshold_:.6g})",
          file=sys.stderr)
    return 0


def register_extra(sub) -> None:
    """Sub-commands contributed by other parts of the package (compare, attack, comm, sweep, report, flower)."""
    import importlib

    for module in ("fedgca.cli.experiments", "fedgca.cli.bench", "fedgca.cli.attack", "fedgca.cli.flower", "fedgca.cli.data"):
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
