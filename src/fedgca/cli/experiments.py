"""CLI: compare, sweep, report, comm."""
from __future__ import annotations

import time
from pathlib import Path


def _cores() -> int:
    from fedgca.threads import available_cores

    return available_cores()


def _csv(kind=str):
    return lambda s: [kind(x) for x in s.split(",") if x]


def _add_executor_options(p) -> None:
    from fedgca.experiments.sweep import EXECUTORS

    p.add_argument("--workers", type=int, default=_cores(),
                   help=f"runs in parallel, one process and one torch thread each (default: the "
                        f"machine's {_cores()} cores; 0 = in this process; with --executor ray and no "
                        "--address: the local Ray instance's CPUs; with --executor batched: the stacks computed "
                        "at once, each on its own threads and, on a GPU, its own CUDA stream)")
    p.add_argument("--executor", choices=EXECUTORS, default=EXECUTORS[0],
                   help="local: a pool of worker processes on this machine (default); ray: one Ray task per run "
                        "(pip install 'fedgca[ray]'), on --address or on a local Ray instance bound to 127.0.0.1; "
                        "batched: the runs of a dataset in this process, their local epochs computed as one "
                        "stacked computation (for a GPU: --device cuda; same numbers as alone)")
    p.add_argument("--stack", type=int,
                   help="with --executor batched: the most runs computed together [default: 64]")
    p.add_argument("--processes", action="store_true",
                   help="with --executor batched: each of the --workers stacks computed at once in a worker "
                        "process of its own (forked warm), not as threads of this one: the stacks' host work then "
                        "does not share one interpreter lock (for a GPU fed from many cores)")
    p.add_argument("--address", help="with --executor ray: the cluster's address (HOST:PORT, or auto for one "
                                     "started on this machine with `ray start --head --node-ip-address ...`: "
                                     "docs/cluster.md)")
    p.add_argument("--gpus-per-run", type=float, default=0.0,
                   help="with --executor ray: the GPU share each run's task asks for (runs with --device cuda; "
                        "0.25 packs four runs on a GPU) [default: 0]")


def executor_from_args(args):
    """The executor the command line names (``experiments.executors.executor``: its options checked there)."""
    from fedgca.experiments.executors import executor

    return executor(args.executor, workers=args.workers, address=args.address, gpus_per_run=args.gpus_per_run,
                    stack=args.stack, processes=args.processes, verbose=getattr(args, "verbose", False))


def register(sub) -> None:
    from fedgca import methods
    from fedgca.cli.options import add_data_options
    from fedgca.experiments.compare import DEFAULT_METHODS, DEFAULT_SEEDS

    p = sub.add_parser("compare", help="run GCA and the baselines over seeds and print the paper's tables")
    add_data_options(p, dataset_help="built-in dataset(s), comma-separated (or --data for your own)")
    p.add_argument("--methods", type=_csv(), default=list(DEFAULT_METHODS),
                   help=f"comma-separated, of {', '.join(methods.names())} [default: the paper's seven]")
    p.add_argument("--seeds", type=_csv(int), default=list(DEFAULT_SEEDS))
    p.add_argument("--rounds", type=int, help="R [default: the dataset's preset, 100; own data: from the data]")
    p.add_argument("--partition", choices=("iid", "dirichlet", "natural"), default="iid",
                   help="client partition (natural: one client per site of own data) [default: iid]")
    p.add_argument("--clients", type=int, help="C [default: the dataset's preset; own data: from the partition]")
    p.add_argument("--small-sites", choices=("error", "drop", "merge"),
                   help="natural partition: sites smaller than one batch [default: error]")
    p.add_argument("--out", default="results/compare")
    _add_executor_options(p)
    p.add_argument("--attack", action="store_true",
                   help=f"also attack client 0 of every {'/'.join(methods.names(attack=True))} run (SPEC §6) "
                        "and print the attack table; runs already attacked are not redone")
    p.set_defaults(func=cmd_compare)

    _register_sweep_report_comm(sub)


def cmd_compare(args) -> int:
    from fedgca.cli.options import source_from_args
    from fedgca.config import RunConfig
    from fedgca.data.source import by_name
    from fedgca.experiments import compare
    from fedgca.reporting import comparison

    source = source_from_args(args)
    if source is None and not args.dataset:
        raise ValueError("give --dataset NAME[,NAME] (built-in datasets) or --data PATH (your own data)")
    datasets = [source.label] if source is not None else [d for d in args.dataset.split(",") if d]
    options = {k: v for k, v in {"rounds": args.rounds, "partition": args.partition, "clients": args.clients,
                                 "small_sites": args.small_sites}.items() if v is not None}
    base = RunConfig(dataset=datasets[0], **options)
    root = Path(args.out)
    configs = compare.grid(base, datasets, args.methods, args.seeds, source, options)  # bad options, files fail here
    executor = executor_from_args(args)
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summaries = compare.run_grid(configs, root, data_dir=args.data_dir, sources=by_name(source), executor=executor)
    elapsed = time.perf_counter() - started
    print(comparison.render_comparison(summaries, args.methods))
    print(f"this invocation: {elapsed:.0f} s wall on {args.workers} worker(s) (runs finished before it were reused)")
    paths = comparison.write_outputs(root, summaries, args.methods)
    print(f"tables written to {paths['md']} and {paths['csv']}; per-run figures in {paths['runs']}")
    if args.attack:
        table = comparison.render_attacks(
            compare.attack_grid(base, datasets, args.methods, args.seeds, root, args.data_dir, options,
                                sources=by_name(source)))
        print(table)
        (root / "attacks.md").write_text(table)
        print(f"attack table written to {root / 'attacks.md'}")
    return 0


# --------------------------------------------------------------------------- sweep / report / comm


def _register_sweep_report_comm(sub) -> None:
    from fedgca.experiments import sweep

    p = sub.add_parser("sweep", help="run a grid of configurations from a TOML file (resumable, parallel)",
                       description="Run every configuration of a sweep file; finished runs are skipped, killed "
                                   "runs resume, failed runs are recorded and retried on the next invocation.")
    p.add_argument("spec", help="sweep file (TOML: [base] and [grid] / [[grid]] tables of RunConfig fields)")
    p.add_argument("--out", help="sweep directory (default: the file's `out`)")
    _add_executor_options(p)
    p.add_argument("--data-dir", help="dataset directory (default: the file's `data_dir`, $FEDGCA_DATA_DIR, cache)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their state; run nothing")
    p.add_argument("--no-retry-failed", action="store_true", help="leave runs whose last attempt failed alone")
    p.add_argument("--order", choices=sweep.ORDERS, default=sweep.ORDERS[0],
                   help="which runs start first: the file's order (default; its first cells finish first) or the "
                        "largest predicted FLOPs first (the shortest wall time for the whole sweep)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="render the paper's tables and plots from a directory of runs",
                       description="Collect every summary.json under DIR (sweeps and compare runs), group by "
                                   "config, and write report.md, report.tex, CSV tables and PNG plots.")
    p.add_argument("dir", help="directory tree holding runs")
    p.add_argument("--out", help="where to write (default: DIR/report)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--data-dir", help="dataset directory, for the predicted work of a sweep's unfinished runs "
                                      "(default: $FEDGCA_DATA_DIR, cache)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("scorecard", help="every cell of the paper's tables (IID, K sweeps per backend, weighting, "
                                         "non-IID, communication) beside fedgca's runs, and the paper's claims",
                       description="Compare the finished runs under DIR (summary.json files and runs.csv tables) "
                                   "cell by cell with the paper's published figures (packaged reference data).")
    p.add_argument("dir", help="directory tree holding runs or result tables")
    p.add_argument("--out", help="where to write (default: DIR/SCORECARD.md)")
    p.add_argument("--data-dir", help="dataset directory, for the communication check")
    p.add_argument("--variants", action="store_true",
                   help="instead: the parameter-sharing baselines under each protocol variant (--baseline-eval, "
                        "--optimizer-state, --threshold) beside the paper (VARIANTS.md)")
    p.add_argument("--rounds", type=int, default=None,
                   help="with --variants: the runs of R rounds (default: the paper's R = 100)")
    p.add_argument("--as", dest="as_dataset", metavar="NAME=DATASET", default=None,
                   help="score the runs of data variant NAME (own data, e.g. a built-in dataset's file under another "
                        "split) as DATASET's cells, DATASET only")
    p.set_defaults(func=cmd_scorecard)

    p = sub.add_parser("comm", help="per-round communication (MiB) measured from the payloads the code builds",
                       description="GCA up/down and FL totals per round for each dataset and K, measured from "
                                   "the built payloads and checked against SPEC \u00a77's formulas. Trains nothing.")
    p.add_argument("--dataset", nargs="+", type=_csv(), action="extend",
                   help="datasets (default: all seven); comma- or space-separated")
    p.add_argument("--k", type=_csv(int), help="K values (default 10,20,40,80)")
    p.add_argument("--format", choices=("md", "csv", "json"), default="md")
    p.add_argument("--data-dir", help="dataset directory for the real client sizes (never downloads; "
                                      "documented sizes are used for datasets whose files are absent)")
    p.set_defaults(func=cmd_comm)


def cmd_sweep(args) -> int:
    import sys

    from fedgca.experiments import sweep

    spec = sweep.load_spec(args.spec)
    out = args.out or spec.out
    if not out:
        raise ValueError("no sweep directory: pass --out DIR (or set `out` in the sweep file)")
    data_dir = args.data_dir or spec.data_dir
    if args.dry_run:
        left = sweep.remaining(out, spec.configs, data_dir, spec.sources)
        for cfg in spec.configs:
            f = left["flops"].get(cfg.key())
            print(f"{cfg.key()}  {left['states'][cfg.key()]:8s}  {'' if f is None else f'{f / 1e12:7.2f} TFLOP  '}"
                  f"{sweep.describe(cfg)}")
        counts = {s: list(left["states"].values()).count(s) for s in ("finished", "partial", "failed", "pending")}
        print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(spec.configs)}", file=sys.stderr)
        if left["flops"]:
            print(f"to run: {sweep.pace_text(left['left_flops'], left['rate'])}", file=sys.stderr)
        return 0
    try:
        res = sweep.run_sweep(spec.configs, out, executor=executor_from_args(args), data_dir=data_dir,
                              sources=spec.sources, retry_failed=not args.no_retry_failed, order=args.order)
    except sweep.SweepStopped as stop:  # one line; SIGTERM exits 143 and Ctrl-C 130, as a shell reports them
        print(f"fedgca: {stop}", file=sys.stderr)
        return 143 if "SIGTERM" in str(stop) else 130
    print(f"sweep {out}: {res['total']} runs; {res['skipped']} already done, {res['finished']} finished now, "
          f"{len(res['failed'])} failed", file=sys.stderr)
    for f in res["failed"]:
        print(f"  failed {f['key']} ({f['run']}): {f['error']}", file=sys.stderr)
    return 1 if res["failed"] else 0


def cmd_report(args) -> int:
    import sys

    from fedgca.reporting import report

    paths = report.write_report(args.dir, args.out, plots=not args.no_plots, data_dir=args.data_dir)
    print(paths["md"].read_text())
    print(f"report written to {paths['md'].parent} (report.md, report.tex, CSV tables, plots)", file=sys.stderr)
    return 0


def cmd_scorecard(args) -> int:
    import sys
    from pathlib import Path

    from fedgca.paper import scorecard

    if not Path(args.dir).is_dir():
        raise FileNotFoundError(f"{args.dir}: no such directory")
    if args.rounds is not None and not args.variants:
        raise ValueError("--rounds applies to --variants only (the scorecard judges R = 100 and shows shorter runs)")
    variant = None
    if args.as_dataset is not None:
        from fedgca.config import DATASET_PRESETS

        name, _, dataset = args.as_dataset.partition("=")
        if not name or dataset not in DATASET_PRESETS or args.variants:
            raise ValueError(f"--as {args.as_dataset}: expected NAME=DATASET with DATASET one of "
                             f"{', '.join(DATASET_PRESETS)} (and without --variants)")
        variant = (name, dataset)
    if args.variants:
        from fedgca.paper import variants

        out = variants.write_variants(args.dir, args.out, args.rounds or scorecard.ROUNDS)
    else:
        out = scorecard.write_scorecard(args.dir, args.out, data_dir=args.data_dir, variant=variant)
    print(out.read_text())
    print(f"scorecard written to {out} (and {out.with_suffix('.csv').name}, {out.stem}_tables.csv)", file=sys.stderr)
    return 0


def cmd_comm(args) -> int:
    from fedgca.config import K_GRID
    from fedgca.experiments import comm

    datasets = [d for group in (args.dataset or []) for d in group] or None
    rows, sources = comm.comm_table(datasets, args.k or K_GRID, args.data_dir)
    print(comm.render(rows, args.format, sources), end="" if args.format == "csv" else "\n")
    return 0
