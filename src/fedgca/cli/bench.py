"""``fedgca bench FILES|DIR``: methods × files × seeds × partitions, with centralized peers, and its report."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path


def _csv(kind=str):
    return lambda s: [kind(x) for x in s.split(",") if x]


def _assignment(text: str) -> tuple[str, object]:
    """--set NAME=VALUE for any run option (the value parsed as JSON when it parses, else a string)."""
    import json

    from fedgca.config import RunConfig

    name, sep, value = text.partition("=")
    name = name.strip().lstrip("-").replace("-", "_")
    if not sep or name not in {f.name for f in dataclasses.fields(RunConfig)}:
        raise ValueError(f"--set {text!r}: expected OPTION=VALUE with a run option (`fedgca run --help`)")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def register(sub) -> None:
    from fedgca import methods
    from fedgca.cli.experiments import _add_executor_options
    from fedgca.experiments.bench import DEFAULT_METHODS, PARTITIONS
    from fedgca.experiments.peers import DEFAULT_PEERS, PEERS

    p = sub.add_parser("bench", help="GCA and the baselines over many anomaly-detection files (.npz/.mat), with "
                                     "centralized PyOD peers on the same splits; resumable; writes a report",
                       description="Every method × file × seed × partition as one resumable sweep (the same "
                                   "command resumes it), then the centralized peers on the same splits, then the "
                                   "report: AUROC and AUPRC at the validation-selected round, files × methods, "
                                   "mean, average rank, W/T/L against Centralized and Single-Client.")
    p.add_argument("paths", nargs="*", help="ADBench .npz / ODDS .mat files, or directories of them")
    p.add_argument("--out", default="results/bench", help="bench directory [default: results/bench]")
    p.add_argument("--methods", type=_csv(), default=list(DEFAULT_METHODS),
                   help=f"comma-separated, of {', '.join(methods.names())} [default: {','.join(DEFAULT_METHODS)}]")
    p.add_argument("--seeds", type=_csv(int), default=[100, 200, 300], help="[default: 100,200,300]")
    p.add_argument("--partitions", type=_csv(), default=["iid"],
                   help=f"comma-separated, of {', '.join(PARTITIONS)} (the paper's Dirichlet) [default: iid]")
    p.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                   help=f"centralized PyOD peers, comma-separated, of {', '.join(PEERS)}, or none "
                        f"(pip install 'fedgca[peers]') [default: {','.join(DEFAULT_PEERS)}]")
    p.add_argument("--clients", type=int, help="C for every file [default: from each file's size]")
    p.add_argument("--rounds", type=int, help="R for every file [default: own data's]")
    p.add_argument("--set", dest="assignments", action="append", type=_assignment, default=[], metavar="OPTION=VALUE",
                   help="any other run option for every run (repeatable), e.g. --set val_fraction=0.1")
    p.add_argument("--corr-threshold", type=float, metavar="X",
                   help="the schema's correlation filter for every file (0.6: the paper's SPEC §4 step) "
                        "[default: own data's, 1.0 = off]")
    _add_executor_options(p)
    p.add_argument("--dry-run", action="store_true", help="list the files, their federations and the runs; run nothing")
    p.add_argument("--report-only", action="store_true", help="write the report of what has finished; run nothing")
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from fedgca.cli.experiments import executor_from_args
    from fedgca.experiments import bench, peers
    from fedgca.reporting import bench as report

    peer_names = [] if args.peers.strip().lower() in ("", "none") else peers.check(_csv()(args.peers))
    options = {"clients": args.clients, "rounds": args.rounds, **dict(args.assignments)}
    root = Path(args.out)
    if args.report_only:
        res = report.write(root, plots=not args.no_plots)
        print(f"report written to {res['out'] / 'report.md'}")
        return 0
    if not args.paths:
        raise ValueError("give the files to benchmark (ADBench .npz / ODDS .mat files, or directories of them)")
    if peer_names and not args.dry_run:
        peers.require()
    started = time.perf_counter()
    plan = bench.plan(args.paths, args.methods, args.seeds, args.partitions, peer_names, options, args.corr_threshold)
    ok = [f for f in plan.files if "error" not in f]
    print(f"bench: {len(ok)} file(s), {len(plan.configs)} run(s), {len(plan.peer_jobs)} peer fit(s)"
          + (f"; skipped {len(plan.files) - len(ok)}:" if len(ok) < len(plan.files) else ""))
    for f in plan.files:
        if "error" in f:
            print(f"  skipped {f['file']}: {f['error']}")
    if args.dry_run:
        for f in ok:
            print(f"  {f['name']}: {f['rows']:,} rows × {f['features']} features, {100 * f['anomaly_share']:.1f} % "
                  f"anomalies; C = {f['clients']}, {f['rows_per_client']:.0f} training rows per client, "
                  f"B = {f['batch_size']}, R = {f['rounds']}, {f['local_epochs']} epoch(s) per round")
        return 0
    if not ok:
        raise ValueError("no file could be benchmarked (each skipped file's reason is above)")
    result = bench.run_bench(plan, root, executor_from_args(args), peer_workers=args.workers)
    res = report.write(root, plots=not args.no_plots)
    print(f"bench {root}: {result['finished']} run(s) finished now, {result['skipped']} before, "
          f"{len(result['failed'])} failed; peers {result['peers']['done']} done, {len(result['peers']['failed'])} "
          f"failed; {time.perf_counter() - started:.0f} s wall on {args.workers} worker(s)")
    for f in result["failed"]:
        print(f"  failed: {f['run']}: {f['error'][:200]}")
    print(f"report written to {res['out'] / 'report.md'}")
    return 0
