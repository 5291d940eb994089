"""CLI: ``fedgca flower simulate | app-dir | certs | deploy-local | superexec``."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fedgca.cli.options import config_from_args


def register(sub) -> None:
    from fedgca.cli.options import add_run_options

    p = sub.add_parser("flower", help="run fedgca's Flower apps: local simulation, app project, TLS, deployment")
    fsub = p.add_subparsers(dest="flower_command", required=True)

    s = fsub.add_parser("simulate", help="a local Flower simulation (the real ServerApp/ClientApp, no SuperLink)")
    add_run_options(s)
    s.add_argument("--engine", default="inprocess", choices=("inprocess", "ray"),
                   help="inprocess (default; deterministic, no extra dependency) or ray (Flower's Simulation "
                        "Engine; needs flwr[simulation])")
    _flower_options(s)
    s.set_defaults(func=cmd_simulate)

    a = fsub.add_parser("app-dir", help="write a Flower App project for `flwr run` and print the deployment commands")
    a.add_argument("dir", help="directory to write (pyproject.toml with [tool.flwr.app])")
    add_run_options(a)
    _flower_options(a)
    a.add_argument("--superlink-host", default="<superlink-host>", help="address the SuperNodes dial")
    a.add_argument("--port", type=int, default=9092, help="SuperLink port (Fleet, Control and Runtime APIs)")
    a.add_argument("--insecure", action="store_true", help="print commands without TLS (testing only)")
    a.add_argument("--own-data", action="store_true", help="print SuperNode commands for own CSV data")
    a.set_defaults(func=cmd_app_dir)

    c = fsub.add_parser("certs", help="create a CA and a SuperLink certificate for a TLS deployment")
    c.add_argument("dir")
    c.add_argument("--host", action="append", help="SuperLink host name or IP for the certificate (repeatable; "
                                                   "default 127.0.0.1 and localhost)")
    c.add_argument("--days", type=int, default=365)
    c.set_defaults(func=cmd_certs)

    d = fsub.add_parser("deploy-local", help="start a SuperLink and one SuperNode per client on 127.0.0.1, "
                                             "run the federation with `flwr run`, stop everything")
    add_run_options(d)
    _flower_options(d)
    d.add_argument("--tls", action="store_true", help="TLS with a CA and certificates made for this run")
    d.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is abandoned")
    d.add_argument("--cold-clientapps", action="store_true",
                   help="let Flower start every ClientApp process cold (default: fedgca's SuperExec forks them warm)")
    d.set_defaults(func=cmd_deploy_local)

    x = fsub.add_parser("superexec", help="a SuperExec for a `flower-supernode --isolation process`: "
                                          "ClientApp processes forked warm (torch and fedgca imported once)")
    x.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API, HOST:PORT")
    tls = x.add_mutually_exclusive_group(required=True)
    tls.add_argument("--insecure", action="store_true", help="the Runtime API has no TLS (same machine)")
    tls.add_argument("--root-certificates", help="CA certificate of the Runtime API's TLS")
    x.add_argument("--parent-pid", type=int, help="exit when this process (the SuperNode) exits")
    x.set_defaults(func=cmd_superexec)


def _flower_options(p) -> None:
    from fedgca.flower.config import FLOWER_DEFAULTS

    p.add_argument("--reply-timeout", type=float, default=FLOWER_DEFAULTS["reply-timeout"],
                   help="seconds a phase waits for replies; a silent node is dropped from the round")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its server checkpoint (its ServerApp or SuperLink was killed)")


def _options(args, out) -> dict:
    return {"out_dir": str(Path(out).resolve()), "reply_timeout": args.reply_timeout}  # resume: per command


def _out(args, cfg, kind: str) -> Path:
    return Path(args.out) if args.out else Path("runs") / f"{cfg.dataset}-{cfg.method}-{cfg.seed}-flower-{kind}"


def _table(summary: dict, out: Path) -> str:
    """The end of a Flower run in a few lines: rounds, who took part, the final and selected metrics, the files."""
    from fedgca.tabletext import markdown

    part = summary.get("participation") or []
    took = [len(p.get("took_part", [])) for p in part]
    dropped = sum(len(p.get("dropped", {})) for p in part)
    rows = [["rounds", f"{len(part)} of {summary.get('rounds')}"],
            ["clients took part per round", f"{min(took)}–{max(took)} of {summary.get('clients')}" if took else "–"],
            ["dropped (node-rounds)", str(dropped)]]
    for p in ("final", "selected"):
        if p in summary:
            rows.append([f"{p} AUROC / AUPRC", f"{summary[p]['auroc']:.4f} / {summary[p]['auprc']:.4f}"
                         + (f" (round {summary[p]['round']})" if "round" in summary[p] else "")])
    rows += [["wall seconds", f"{summary.get('wall_seconds', 0):.1f}"],
             ["results (metrics.csv, comm.json, clients/)", str(out)], ["full summary", str(out / "summary.json")]]
    return markdown([f"{summary.get('method')} on {summary.get('dataset')}, seed {summary.get('seed')}", ""], rows)


def _brief(summary: dict) -> str:
    keys = ("dataset", "method", "seed", "rounds", "clients", "wall_seconds", "round_wall_seconds")
    brief = {k: summary[k] for k in keys if k in summary}
    for p in ("final", "peak", "selected"):
        if p in summary:
            brief[p] = {m: round(summary[p][m], 4) for m in ("accuracy", "auroc", "auprc")}
    brief["participation"] = summary.get("participation")
    return json.dumps(brief, indent=1)


def cmd_simulate(args) -> int:
    from fedgca.flower.simulation import simulate
    from fedgca.threads import limit_threads

    limit_threads(1)  # as `fedgca run` computes: the same numbers from both drivers (tests/conftest.py says why)
    cfg, source, dataset = config_from_args(args, with_data=True)
    out = _out(args, cfg, args.engine)
    opts = {k: v for k, v in _options(args, out).items() if k != "out_dir"}
    # own data: one node per client of the simulator's federation (fedgca.flower.simulation.own_data_nodes)
    summary = simulate(cfg, out, engine=args.engine, data_dir=args.data_dir, source=source, dataset=dataset,
                       resume=args.resume, **opts)
    print(_brief(summary))
    print(f"results in {out}", file=sys.stderr)
    return 0


def cmd_app_dir(args) -> int:
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import deployment_commands, write_app

    cfg = config_from_args(args)
    out = Path(args.out) if args.out else Path(args.dir) / "results"
    app = write_app(args.dir, to_run_config(cfg, **_options(args, out), resume=args.resume))
    print(f"# Flower App project written to {app} (results of a run go to {out} on the SuperLink machine)")
    print(deployment_commands(cfg.clients, superlink_host=args.superlink_host, port=args.port,
                              tls=not args.insecure, dataset_nodes=not args.own_data))
    return 0


def cmd_certs(args) -> int:
    from fedgca.flower.certs import make_certificates

    hosts = tuple(args.host or ("127.0.0.1", "localhost"))
    c = make_certificates(args.dir, hosts, days=args.days)
    print(f"CA certificate   {c.ca_cert}   (give to every SuperNode and to `flwr run`)")
    print(f"server cert/key  {c.server_cert} {c.server_key}   (SuperLink only; keep the key private)")
    return 0


def cmd_deploy_local(args) -> int:
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, write_app

    cfg = config_from_args(args)
    out = _out(args, cfg, "deploy").resolve()
    work = out / "deployment"
    app = write_app(work / "app", to_run_config(cfg, **_options(args, out), resume=args.resume))
    nodes = [{"partition-id": i, "num-partitions": cfg.clients} | ({"data-dir": str(Path(args.data_dir).resolve())}
                                                                      if args.data_dir else {})
             for i in range(cfg.clients)]
    # each node's detector, where the simulator writes it; its ClientApp state on disk (a restarted node goes on)
    nodes = [nc | {"detector-dir": str(out), "state-dir": str(work / "node-state")} for nc in nodes]
    # the SuperLink's state in a file of the run's directory: a restarted SuperLink knows its nodes and runs
    with LocalDeployment(work, nodes, tls=args.tls, warm=not args.cold_clientapps,
                         database=work / "superlink.db") as dep:
        print(f"SuperLink on {dep.address} ({'TLS' if args.tls else 'insecure'}), {len(nodes)} SuperNodes; "
              f"logs in {dep.logs}", file=sys.stderr)
        res = dep.run(app, timeout=args.timeout)
    summary_path = out / "summary.json"
    if res.returncode != 0 or not summary_path.exists():
        print(res.stdout[-4000:], file=sys.stderr)
        raise RuntimeError(f"the Flower run failed (flwr run exit code {res.returncode}); logs in {work / 'logs'}")
    print(_table(json.loads(summary_path.read_text()), out))
    return 0


def cmd_superexec(args) -> int:
    import logging

    from fedgca.flower.superexec import serve

    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per task poll (10 a second)
    logging.getLogger("flwr").propagate = False  # flwr logs through its own handler; not twice
    serve(args.runtime_api_address, insecure=args.insecure, root_certificates=args.root_certificates,
          parent_pid=args.parent_pid)
    return 0
