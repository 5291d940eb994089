"""Secure aggregation on Flower: time, exchanges and bytes per round, plain beside SecAgg+; nodes killed after sharing
their keys; 100 clients on Flower's simulation engine.

    .venv/bin/python benchmarks/bench_secagg.py --data-dir ../shared/data [--only deploy|dropout|scale]
                                               [--nodes 10] [--rounds 3] [--tls] [--clients 100]

* ``deploy``: one SuperLink and ``--nodes`` SuperNodes on 127.0.0.1 with fedgca's warm SuperExec (one deployment for
  all runs), then one run after the other: FedAvg, SecAgg-FedAvg, FedProx, SecAgg-FedProx, GCA, SecAgg-GCA (magic,
  one partition per node, 1 local / reconstruction / alignment epoch, seed 100). Per run, from the ServerApp's
  rounds.jsonl: seconds per round (the first apart: it pays the warm-up), exchanges and bytes per round (a middle
  round's: the last also carries the last evaluation), and whether its metrics.csv equals the simulator's.
* ``dropout``: the same deployment, SecAgg-FedAvg and SecAgg-GCA; in round 2, as soon as every node's key shares
  are in (messages.jsonl), 30 % of the SuperNodes are SIGKILLed: SecAgg+ recovers their masks from the others'
  shares and the round's sum is over the survivors. Per run: the rounds completed, who was summed, round 2's time.
* ``scale``: ``--clients`` clients on Flower's simulation engine (Ray; one node a client, magic split ``--clients``
  ways), FedAvg beside SecAgg-FedAvg and GCA beside SecAgg-GCA: seconds and bytes per round.

Load averages before and after each section; ratios, not seconds, are what compare across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.flower.config import to_run_config
from fedgca.flower.deploy import LocalDeployment, write_app
from fedgca.simulation.runner import run
from fedgca.threads import limit_threads

PAIRS = (("fedavg", "secagg-fedavg"), ("fedprox", "secagg-fedprox"), ("gca", "secagg-gca"))


def _cfg(method: str, clients: int, rounds: int) -> RunConfig:
    return RunConfig(dataset="magic", method=method, clients=clients, rounds=rounds, local_epochs=1, recon_epochs=1,
                     align_epochs=1, seed=100).resolved()


def _rounds(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines() if line.strip()]


def _per_round(rounds: list[dict]) -> dict:
    """Seconds per round after the first (which pays the warm-up); a secure run's last round without the exchange
    that carried its rest after it (``last_rest_seconds``: once per run, not per round)."""
    later = rounds[1:] or rounds
    middle = rounds[len(rounds) // 2] if len(rounds) > 2 else rounds[0]  # the last round also carries the last rest
    own = [r["wall_seconds"] - r.get("last_rest_seconds", 0.0) for r in later]
    return {"first_round": rounds[0]["wall_seconds"], "round_seconds": sum(own) / len(own),
            "last_rest": rounds[-1].get("last_rest_seconds", 0.0),
            "exchanges": middle["exchanges"], "bytes_up": middle["bytes_up"], "bytes_down": middle["bytes_down"],
            "took_part": len(middle["took_part"])}


def _load() -> str:
    return str(tuple(round(x, 2) for x in os.getloadavg()))


def deploy_section(args, root: Path, data_dir: str) -> None:
    nodes = [{"partition-id": i, "num-partitions": args.nodes, "data-dir": data_dir, "cache-dir": str(root / "cache")}
             for i in range(args.nodes)]
    before, rows = _load(), {}
    with LocalDeployment(root / "deploy", nodes, tls=args.tls) as dep:
        for pair in PAIRS:
            for method in pair:
                cfg = _cfg(method, args.nodes, args.rounds)
                out = root / f"run-{method}"
                app = write_app(root / f"app-{method}", to_run_config(cfg, out_dir=str(out), reply_timeout=600.0))
                res = dep.run(app, timeout=3600)
                if res.returncode != 0:
                    raise SystemExit(f"{method} failed:\n{res.stdout[-3000:]}")
                sim = run(cfg, root / f"sim-{method}", data_dir=data_dir, progress=False)
                rows[method] = {**_per_round(_rounds(out)), "auroc": sim["final"]["auroc"],
                                "same": (out / "metrics.csv").read_bytes() ==
                                        (root / f"sim-{method}" / "metrics.csv").read_bytes()}
    print(f"## deploy: --nodes {args.nodes} --rounds {args.rounds}{' --tls' if args.tls else ''} (loopback, warm "
          f"SuperExec; {os.cpu_count()} CPUs); load average before {before}, after {_load()}\n")
    print(f"{'method':<16}{'s/round':>9}{'round 1 s':>11}{'last rest s':>12}{'exch/round':>12}{'bytes up':>12}"
          f"{'bytes down':>12}{'summed':>8}{'final AUROC':>13}  metrics.csv = simulator's")
    for m, r in rows.items():
        print(f"{m:<16}{r['round_seconds']:>9.2f}{r['first_round']:>11.2f}{r['last_rest']:>12.2f}{r['exchanges']:>12}"
              f"{r['bytes_up']:>12,}{r['bytes_down']:>12,}{r['took_part']:>8}{r['auroc']:>13.6f}  {r['same']}")
    print()
    for plain, secure in PAIRS:
        a, b = rows[plain], rows[secure]
        print(f"{secure} / {plain}: time per round {b['round_seconds'] / a['round_seconds']:.2f}x, "
              f"exchanges {b['exchanges'] / a['exchanges']:.2f}x, bytes up {b['bytes_up'] / max(a['bytes_up'], 1):.2f}x, "
              f"bytes down {b['bytes_down'] / max(a['bytes_down'], 1):.2f}x, ΔAUROC {100 * (b['auroc'] - a['auroc']):+.4f} pp")
    print()


def _share_keys_done(out: Path, r: int, n: int) -> bool:
    path = out / "messages.jsonl"
    if not path.exists():
        return False
    ups = [e for e in map(json.loads, path.read_text().splitlines())
           if e.get("round") == r and e.get("phase") == "secagg.share_keys" and e.get("direction") == "up"]
    return len(ups) >= n


def dropout_section(args, root: Path, data_dir: str) -> None:
    nodes = [{"partition-id": i, "num-partitions": args.nodes, "data-dir": data_dir, "cache-dir": str(root / "cache")}
             for i in range(args.nodes)]
    killed = list(range(args.nodes - round(0.3 * args.nodes), args.nodes))
    before, rows = _load(), {}
    for method in ("secagg-fedavg", "secagg-gca"):
        cfg = _cfg(method, args.nodes, args.rounds)
        out = root / f"drop-{method}"
        with LocalDeployment(root / f"deploy-drop-{method}", nodes, tls=args.tls) as dep:
            app = write_app(root / f"app-drop-{method}", to_run_config(cfg, out_dir=str(out), reply_timeout=30.0))
            runner = dep.submit(app)
            deadline = time.monotonic() + 1800
            while not _share_keys_done(out, 2, args.nodes):
                if runner.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{method}: round 2's key sharing never completed:\n{dep.log('flwr-run.log')[-3000:]}")
                time.sleep(0.05)
            t_kill = time.perf_counter()
            for i in killed:
                dep.kill_node(i)
            kill_s = time.perf_counter() - t_kill
            rc = runner.wait(timeout=1800)
        rounds = _rounds(out)
        rows[method] = {"rc": rc, "rounds": len(rounds), "kill_s": kill_s,
                        "summed": [r["took_part"] for r in rounds], "dropped": [sorted(r["dropped"]) for r in rounds],
                        "seconds": [r["wall_seconds"] for r in rounds],
                        "last_rest": rounds[-1].get("last_rest_seconds", 0.0) if rounds else 0.0,
                        "bytes_up": [r["bytes_up"] for r in rounds], "bytes_down": [r["bytes_down"] for r in rounds],
                        "rows": len((out / "metrics.csv").read_text().splitlines()) - 1}
    print(f"## dropout: --nodes {args.nodes} --rounds {args.rounds}{' --tls' if args.tls else ''}; SuperNodes "
          f"{killed} SIGKILLed in round 2 once every node's key shares were in; reply timeout 30 s; "
          f"load average before {before}, after {_load()}\n")
    for m, r in rows.items():
        print(f"{m}: exit {r['rc']}, {r['rounds']} rounds, {r['rows']} metric rows; summed per round "
              f"{[len(s) for s in r['summed']]}; dropped {r['dropped']}; seconds per round {r['seconds']} (the last "
              f"with the run's last rest, {r['last_rest']:.1f} s); bytes up per round {r['bytes_up']}, down "
              f"{r['bytes_down']}")
    print()


def scale_section(args, root: Path, data_dir: str) -> None:
    from fedgca.flower.simulation import simulate

    before, rows = _load(), {}
    for pair in (("fedavg", "secagg-fedavg"), ("gca", "secagg-gca")):
        for method in pair:
            cfg = _cfg(method, args.clients, 2)
            t = time.perf_counter()
            simulate(cfg, root / f"scale-{method}", engine="ray", data_dir=data_dir, reply_timeout=1800)
            rows[method] = {**_per_round(_rounds(root / f"scale-{method}")), "wall": time.perf_counter() - t}
    print(f"## scale: {args.clients} clients on Flower's simulation engine (Ray, {os.cpu_count()} CPUs), magic, "
          f"2 rounds; load average before {before}, after {_load()}\n")
    print(f"{'method':<16}{'run s':>8}{'s/round':>9}{'round 1 s':>11}{'exch/round':>12}{'bytes up':>14}"
          f"{'bytes down':>14}{'summed':>8}")
    for m, r in rows.items():
        print(f"{m:<16}{r['wall']:>8.1f}{r['round_seconds']:>9.2f}{r['first_round']:>11.2f}{r['exchanges']:>12}"
              f"{r['bytes_up']:>14,}{r['bytes_down']:>14,}{r['took_part']:>8}")
    for plain, secure in (("fedavg", "secagg-fedavg"), ("gca", "secagg-gca")):
        a, b = rows[plain], rows[secure]
        print(f"{secure} / {plain}: time per round {b['round_seconds'] / a['round_seconds']:.2f}x, "
              f"bytes up {b['bytes_up'] / max(a['bytes_up'], 1):.2f}x, bytes down {b['bytes_down'] / max(a['bytes_down'], 1):.2f}x")
    print()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--only", choices=("deploy", "dropout", "scale"), action="append")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--tls", action="store_true", help="TLS between the SuperLink and the SuperNodes")
    p.add_argument("--out")
    args = p.parse_args(argv)
    limit_threads(1)  # the simulator's runs as `fedgca run` computes them (one torch thread, as a ClientApp)
    root = Path(args.out or tempfile.mkdtemp(prefix="fedgca-bench-secagg-"))
    data_dir = str(Path(args.data_dir).resolve())
    print(f"# benchmarks/bench_secagg.py {' '.join(argv if argv is not None else os.sys.argv[1:])}\n")
    sections = {"deploy": deploy_section, "dropout": dropout_section, "scale": scale_section}
    for name in args.only or sections:
        sections[name](args, root, data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
