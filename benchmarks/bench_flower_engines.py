"""Wall time per GCA round: fedgca's simulator vs the Flower apps (in-process, Ray, loopback deployment).

    .venv/bin/python benchmarks/bench_flower_engines.py --data-dir ../shared/data --rounds 3 [--engines sim,inprocess,ray,deploy]

Same RunConfig everywhere (magic preset unless overridden: C = 10, K = 80, ρ = 0.25, 5 + 5 epochs).
Per-round times come from each run's own records (simulator: wall / rounds of the round loop;
Flower: the ServerApp's per-round wall time, i.e. train + cluster + align + evaluate messages),
so start-up (data loading, Ray, SuperLink) is excluded. Prints a JSON table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from fedgca.config import RunConfig


def _sim(cfg, out, data_dir):
    from fedgca.simulation.runner import run

    t = time.perf_counter()
    s = run(cfg, out, data_dir=data_dir, progress=False)
    comm = json.loads((Path(out) / "comm.json").read_text())
    return {"per_round": s["wall_seconds"] / cfg.rounds, "total": time.perf_counter() - t, "final": s["final"],
            "rounds": len(comm)}


def _flower(cfg, out, data_dir, engine):
    from fedgca.flower.simulation import simulate

    t = time.perf_counter()
    s = simulate(cfg, out, engine=engine, data_dir=data_dir)
    return {"per_round": sum(s["round_wall_seconds"]) / cfg.rounds, "round_seconds": s["round_wall_seconds"],
            "total": time.perf_counter() - t, "final": s["final"]}


def _deploy(cfg, out, data_dir):
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, write_app

    out = Path(out)
    app = write_app(out / "work" / "app", to_run_config(cfg, out_dir=str(out)))
    nodes = [{"partition-id": i, "num-partitions": cfg.clients, "data-dir": str(Path(data_dir).resolve()),
              "cache-dir": str(out / "cache")} for i in range(cfg.clients)]
    t = time.perf_counter()
    with LocalDeployment(out / "work", nodes) as dep:
        res = dep.run(app, timeout=6 * 3600)
    if res.returncode != 0:
        raise RuntimeError(res.stdout[-3000:])
    s = json.loads((out / "summary.json").read_text())
    return {"per_round": sum(s["round_wall_seconds"]) / cfg.rounds, "round_seconds": s["round_wall_seconds"],
            "total": time.perf_counter() - t, "final": s["final"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="magic")
    p.add_argument("--clients", type=int)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--recon-epochs", type=int, default=5)
    p.add_argument("--align-epochs", type=int, default=5)
    p.add_argument("--data-dir")
    p.add_argument("--engines", default="sim,inprocess")
    p.add_argument("--out")
    args = p.parse_args(argv)
    cfg = RunConfig(dataset=args.dataset, clients=args.clients, rounds=args.rounds, recon_epochs=args.recon_epochs,
                    align_epochs=args.align_epochs).resolved()
    root = Path(args.out or tempfile.mkdtemp(prefix="fedgca-bench-"))
    results = {"config": {k: getattr(cfg, k) for k in ("dataset", "clients", "k", "rho", "rounds", "recon_epochs",
                                                        "align_epochs", "seed")},
               "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    for engine in args.engines.split(","):
        out = root / engine
        shutil.rmtree(out, ignore_errors=True)
        if engine == "sim":
            results[engine] = _sim(cfg, out, args.data_dir)
        elif engine == "deploy":
            results[engine] = _deploy(cfg, out, args.data_dir)
        else:
            results[engine] = _flower(cfg, out, args.data_dir, engine)
        results[engine]["load_after"] = os.getloadavg()
    if "sim" in results:
        for engine in results:
            if isinstance(results[engine], dict) and "per_round" in results[engine] and engine != "sim":
                results[engine]["ratio_to_sim"] = results[engine]["per_round"] / results["sim"]["per_round"]
    print(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
