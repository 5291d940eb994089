"""Secure aggregation on a local Flower deployment: bytes, exchanges and wall time per round, plain beside SecAgg+.

    .venv/bin/python benchmarks/bench_secagg.py --data-dir ../shared/data [--nodes 10] [--rounds 3] [--tls]

One SuperLink and ``--nodes`` SuperNodes on 127.0.0.1 with fedgca's warm SuperExec (one deployment for all
runs), then one run after the other on it: FedAvg, SecAgg-FedAvg, FedProx, SecAgg-FedProx, GCA, SecAgg-GCA
(magic, one partition per node, 1 local / reconstruction / alignment epoch, seed 100). Per run, from the ServerApp's rounds.jsonl: seconds per round (the first
round apart: it pays the warm-up), exchanges per round, bytes up and down per round; then each secure run over
its plain one, side by side, and whether its metrics.csv equals the in-process simulator's. Load averages before
and after; ratios, not seconds, are what compare across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.flower.config import to_run_config
from fedgca.flower.deploy import LocalDeployment, write_app
from fedgca.simulation.runner import run
from fedgca.threads import limit_threads

PAIRS = (("fedavg", "secagg-fedavg"), ("fedprox", "secagg-fedprox"), ("gca", "secagg-gca"))


def measure(dep: LocalDeployment, cfg: RunConfig, root: Path, data_dir: str) -> dict:
    out = root / f"run-{cfg.method}"
    app = write_app(root / f"app-{cfg.method}", to_run_config(cfg, out_dir=str(out), reply_timeout=600.0))
    t = time.perf_counter()
    res = dep.run(app, timeout=3600)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{cfg.method} failed:\n{res.stdout[-3000:]}")
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines() if line.strip()]
    later = rounds[1:] or rounds
    sim = run(cfg, root / f"sim-{cfg.method}", data_dir=data_dir, progress=False)
    return {"run_wall": wall, "first_round": rounds[0]["wall_seconds"],
            "round_seconds": sum(r["wall_seconds"] for r in later) / len(later),
            "exchanges": sum(r["exchanges"] for r in rounds) / len(rounds),
            "bytes_up": rounds[-1]["bytes_up"], "bytes_down": rounds[-1]["bytes_down"],
            "took_part": len(rounds[-1]["took_part"]), "auroc": sim["final"]["auroc"],
            "same_as_simulator": (out / "metrics.csv").read_bytes() == (root / f"sim-{cfg.method}" / "metrics.csv").read_bytes()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tls", action="store_true", help="TLS between the SuperLink and the SuperNodes")
    p.add_argument("--out")
    args = p.parse_args(argv)
    limit_threads(1)  # the simulator's runs as `fedgca run` computes them (one torch thread, as a ClientApp)
    root = Path(args.out or tempfile.mkdtemp(prefix="fedgca-bench-secagg-"))
    data_dir = str(Path(args.data_dir).resolve())
    nodes = [{"partition-id": i, "num-partitions": args.nodes, "data-dir": data_dir, "cache-dir": str(root / "cache")}
             for i in range(args.nodes)]
    load_before = os.getloadavg()
    rows = {}
    with LocalDeployment(root / "deploy", nodes, tls=args.tls) as dep:
        for pair in PAIRS:
            for method in pair:
                cfg = RunConfig(dataset="magic", method=method, clients=args.nodes, rounds=args.rounds, local_epochs=1,
                                recon_epochs=1, align_epochs=1, seed=100).resolved()
                rows[method] = measure(dep, cfg, root, data_dir)
    load_after = os.getloadavg()

    print(f"# {Path(sys.argv[0]).name} --nodes {args.nodes} --rounds {args.rounds}{' --tls' if args.tls else ''}  "
          f"(loopback, fedgca's warm SuperExec; {os.cpu_count()} CPUs)")
    print(f"load average (1/5/15 min) before {tuple(round(x, 2) for x in load_before)}, "
          f"after {tuple(round(x, 2) for x in load_after)}")
    print()
    print(f"{'method':<16}{'s/round':>9}{'round 1 s':>11}{'exch/round':>12}{'bytes up':>12}{'bytes down':>12}"
          f"{'summed':>8}{'final AUROC':>13}  metrics.csv = simulator's")
    for m, r in rows.items():
        print(f"{m:<16}{r['round_seconds']:>9.2f}{r['first_round']:>11.2f}{r['exchanges']:>12.1f}{r['bytes_up']:>12,}"
              f"{r['bytes_down']:>12,}{r['took_part']:>8}{r['auroc']:>13.6f}  {r['same_as_simulator']}")
    print()
    for plain, secure in PAIRS:
        a, b = rows[plain], rows[secure]
        print(f"{secure} / {plain}: time per round {b['round_seconds'] / a['round_seconds']:.2f}x, "
              f"exchanges {b['exchanges'] / a['exchanges']:.2f}x, bytes up {b['bytes_up'] / max(a['bytes_up'], 1):.2f}x, "
              f"bytes down {b['bytes_down'] / max(a['bytes_down'], 1):.2f}x, ΔAUROC {100 * (b['auroc'] - a['auroc']):+.4f} pp")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
