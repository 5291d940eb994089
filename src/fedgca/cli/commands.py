"""Implementations of the CLI sub-commands (thin: parse → library call → files)."""
from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path

from fedgca.config import RunConfig


def config_from_args(args) -> RunConfig:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return RunConfig(**values).resolved()


def default_out(cfg: RunConfig) -> Path:
    return Path("runs") / f"{cfg.dataset}-{cfg.method}-{cfg.seed}"


def cmd_run(args) -> int:
    from fedgca.simulation.runner import run

    cfg = config_from_args(args)
    out = Path(args.out) if args.out else default_out(cfg)
    summary = run(cfg, out, data_dir=args.data_dir, resume=args.resume)
    brief = {k: summary[k] for k in ("dataset", "method", "seed", "rounds", "wall_seconds")}
    brief.update({p: {m: round(summary[p][m], 4) for m in ("accuracy", "auroc", "auprc")}
                  for p in ("final", "peak", "selected")})
    print(json.dumps(brief, indent=1))
    print(f"results in {out}", file=sys.stderr)
    return 0


def cmd_score(args) -> int:
    from fedgca.detector import AnomalyDetector, client_dir

    det = AnomalyDetector.load(client_dir(args.run, args.client))
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

    for module in ("fedgca.cli.experiments", "fedgca.cli.attack", "fedgca.cli.flower"):
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
