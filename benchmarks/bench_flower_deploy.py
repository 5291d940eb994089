"""Flower deployment on loopback: fedgca GCA's time per exchange beside a no-op Flower app's, same nodes and rounds.

    .venv/bin/python benchmarks/bench_flower_deploy.py --data-dir ../shared/data [--nodes 3] [--rounds 2]

One SuperLink and ``--nodes`` SuperNodes on 127.0.0.1 (``--insecure``), twice: with Flower's own
SuperExec (subprocess isolation, Flower's default: a cold ``flwr-clientapp`` process per message) and
with fedgca's (``--isolation process`` + ``fedgca flower superexec``: the per-message process is forked
from one that imported the ClientApp once). On each, one after the other:

* a no-op app — its ServerApp pushes every node a message and pulls until all replies are in, polling
  every 0.2 s as fedgca's ServerApp does (``grid.send_and_receive`` would sleep 3 s between pulls and
  flatter fedgca), 2 × rounds times; its ClientApp replies with an empty record. That is Flower's
  floor per exchange: SuperLink/SuperNode hand-over, one ``flwr-clientapp`` process per message and
  its import of flwr;
* fedgca GCA (magic, one partition per node, 1 reconstruction + 1 alignment epoch, K = 10, the
  end-of-round evaluation only) — per exchange = the ServerApp's round wall time / the exchanges it
  counted in ``rounds.jsonl`` (2 per GCA round: ``train`` and ``train.align``, whose reply carries
  the evaluation).

Prints one table: seconds per exchange of each app in each mode, their ratios, exchanges per GCA
round, whether GCA's metrics.csv is byte-identical in both modes, and the time a fresh interpreter
takes to import each ClientApp module (what a cold per-message process pays: ``flwr-clientapp``
handles one message and exits — ``flwr/supernode/runtime/run_clientapp.py``). Load averages before
and after; ratios, not seconds, are what compare across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.flower.config import to_run_config
from fedgca.flower.deploy import LocalDeployment, write_app

NOOP_APP = '''"""A Flower app that does nothing: the floor of one exchange (benchmarks/bench_flower_deploy.py)."""
import json
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    want, exchanges = int(cfg["nodes"]), int(cfg["exchanges"])
    nodes: list[int] = []
    deadline = time.monotonic() + 120
    while len(nodes) < want and time.monotonic() < deadline:
        nodes = list(grid.get_node_ids())
        time.sleep(0.2)
    seconds = []
    for i in range(exchanges):
        t = time.perf_counter()
        messages = [Message(RecordDict({"c": ConfigRecord({"i": i})}), dst_node_id=n, message_type="train")
                    for n in nodes]
        pending = {str(m) for m in grid.push_messages(messages)}
        deadline = time.monotonic() + 300
        while pending:  # fedgca's exchange loop (fedgca.flower.server.POLL_SECONDS)
            assert time.monotonic() < deadline, "no reply within 300 s"
            for reply in grid.pull_messages(list(pending)):
                assert not reply.has_error(), reply.error
                pending.discard(str(reply.metadata.reply_to_message_id))
            if pending:
                time.sleep(0.2)
        seconds.append(time.perf_counter() - t)
    Path(cfg["out"]).write_text(json.dumps({"nodes": len(nodes), "exchange_seconds": seconds}))


@client.train()
def train(msg: Message, context: Context) -> Message:
    return Message(RecordDict({"c": ConfigRecord({"ok": 1})}), reply_to=msg)
'''


def import_seconds(module: str, cwd: Path, repeat: int = 3) -> float:
    """Best of ``repeat`` fresh interpreters importing ``module`` (what each flwr-clientapp process pays)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], cwd=cwd, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out")
    args = p.parse_args(argv)
    root = Path(args.out or tempfile.mkdtemp(prefix="fedgca-bench-deploy-"))
    data_dir = str(Path(args.data_dir).resolve())
    load_before = os.getloadavg()

    noop_dir = root / "noop-app"
    noop_dir.mkdir(parents=True, exist_ok=True)
    (noop_dir / "noop_app.py").write_text(NOOP_APP)
    exchanges = 2 * args.rounds
    write_app(noop_dir, {"nodes": args.nodes, "exchanges": exchanges, "out": str(root / "noop.json")},
              server_app="noop_app:server", client_app="noop_app:client")

    cfg = RunConfig(dataset="magic", clients=args.nodes, rounds=args.rounds, recon_epochs=1, align_epochs=1,
                    k=10, seed=100).resolved()
    nodes = [{"partition-id": i, "num-partitions": args.nodes, "data-dir": data_dir, "cache-dir": str(root / "cache")}
             for i in range(args.nodes)]
    rows, walls = {}, {}
    for mode in ("cold", "warm"):  # Flower's own SuperExec, then fedgca's (fedgca.flower.superexec)
        gca_out = root / f"gca-{mode}"
        gca_dir = write_app(root / f"gca-app-{mode}", to_run_config(cfg, out_dir=str(gca_out), eval_recon_epochs=False))
        noop_out = root / f"noop-{mode}.json"
        with LocalDeployment(root / f"deploy-{mode}", nodes, warm=mode == "warm") as dep:
            t = time.perf_counter()
            res = dep.run(noop_dir, run_config={"out": str(noop_out)}, timeout=1800)
            walls[f"no-op {mode}"] = time.perf_counter() - t
            if res.returncode != 0:
                raise SystemExit(f"no-op app ({mode}) failed:\n{res.stdout[-3000:]}")
            t = time.perf_counter()
            res = dep.run(gca_dir, timeout=3600)
            walls[f"GCA {mode}"] = time.perf_counter() - t
            if res.returncode != 0:
                raise SystemExit(f"fedgca GCA ({mode}) failed:\n{res.stdout[-3000:]}")
        noop = json.loads(noop_out.read_text())["exchange_seconds"]
        rounds = [json.loads(line) for line in (gca_out / "rounds.jsonl").read_text().splitlines() if line.strip()]
        rows[f"no-op {mode}"] = (len(noop), sum(noop) / len(noop), noop)
        n = sum(r["exchanges"] for r in rounds)
        rows[f"GCA {mode}"] = (n, sum(r["wall_seconds"] for r in rounds) / n, [r["wall_seconds"] for r in rounds],
                               n / len(rounds))
    same = (root / "gca-cold" / "metrics.csv").read_bytes() == (root / "gca-warm" / "metrics.csv").read_bytes()
    imports = {m: import_seconds(m, root) for m in ("flwr.clientapp", "fedgca.flower.client_app")}
    load_after = os.getloadavg()

    print(f"# {Path(sys.argv[0]).name} --nodes {args.nodes} --rounds {args.rounds}  (loopback, --insecure; "
          f"{os.cpu_count()} CPUs)")
    print("# cold: Flower's SuperExec, a fresh flwr-clientapp process per message (Flower's default);")
    print("# warm: fedgca's SuperExec (`fedgca flower superexec`, SuperNode --isolation process), a process")
    print("#       per message forked from one that imported fedgca's ClientApp once")
    print(f"load average (1/5/15 min) before {tuple(round(x, 2) for x in load_before)}, "
          f"after {tuple(round(x, 2) for x in load_after)}")
    print()
    print(f"{'app':<14}{'exchanges':>10}{'s / exchange':>14}{'run wall s':>12}   per exchange (no-op) / per round (GCA), s")
    for name, row in rows.items():
        print(f"{name:<14}{row[0]:>10}{row[1]:>14.2f}{walls[name]:>12.1f}   {', '.join(f'{x:.2f}' for x in row[2])}")
    print()
    for a, b in (("GCA cold", "no-op cold"), ("GCA warm", "no-op cold"), ("GCA warm", "no-op warm"),
                 ("no-op warm", "no-op cold")):
        print(f"{a} / {b} per exchange: {rows[a][1] / rows[b][1]:.2f}x")
    print(f"exchanges per GCA round: {rows['GCA warm'][3]:g};  GCA metrics.csv warm == cold: {same}")
    print("import in a fresh interpreter (best of 3): "
          + ", ".join(f"{m} {s:.2f} s" for m, s in imports.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
