"""Faults and load, measured: the table in docs/results/reliability.md.

    .venv/bin/python benchmarks/reliability.py --data-dir ../shared/data [--out docs/results/reliability.md]
                                               [--only sweep,resume,files,uploads,deploy,server,load,flower-load,oom]

Every scenario injects something (a kill -9, a crafted or truncated file, a faulty client, a crashed
SuperNode, a large federation), observes what fedgca did, and checks that no data was lost. The
table says what was injected, what was observed and what was lost; timings carry the load average.
Processes run one at a time (no oversubscription): each simulator run uses its own threads as
`fedgca run` does (1), workers × threads ≤ cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "FLWR_TELEMETRY_ENABLED": "0"}


def load() -> str:
    return "{:.2f}/{:.2f}/{:.2f}".format(*os.getloadavg())


def cli(*args, check=True, timeout=900, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([PY, "-m", "fedgca.cli.main", *map(str, args)], env=ENV, capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"fedgca {' '.join(map(str, args))} failed:\n{p.stderr[-2000:]}")
    return p


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("fedgca: error:")]
    return lines[-1] if lines else "(no error line)"


# ---------------------------------------------------------------------------- faults


def sweep_kills(data_dir, tmp: Path, kills: int = 20, seed: int = 0) -> dict:
    """A sweep SIGKILLed at random moments `kills` times, resumed each time; against an uninterrupted one."""
    spec = tmp / "grid.toml"
    spec.write_text("[base]\nrounds = 6\nrecon_epochs = 1\nalign_epochs = 1\nlocal_epochs = 2\n"
                    "[grid]\ndataset = \"academic\"\nmethod = [\"gca\", \"fedavg\", \"dpfedavg\"]\n"
                    "seed = [100, 200, 300, 400]\n")
    clean, killed = tmp / "clean", tmp / "killed"
    t0 = time.perf_counter()
    cli("sweep", spec, "--out", clean, "--data-dir", data_dir, "--workers", 2)
    clean_s = time.perf_counter() - t0
    rng = random.Random(seed)
    cmd = [PY, "-m", "fedgca.cli.main", "sweep", str(spec), "--out", str(killed), "--data-dir", str(data_dir),
           "--workers", "2"]
    done_early = 0
    for _ in range(kills):
        proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(1.0, 8.0))  # imports take ~3 s: kills land in start-up, in rounds and in writes
        if proc.poll() is not None:
            done_early += 1
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    final = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    runs_a = {p.parent.name: p for p in clean.rglob("metrics.csv")}
    runs_b = {p.parent.name: p for p in killed.rglob("metrics.csv")}
    ledger = [json.loads(x) for x in (killed / "ledger.jsonl").read_text().splitlines() if x.strip()]
    finished = [e["key"] for e in ledger if e.get("event") == "finished"]
    identical = sorted(k for k in runs_a if k in runs_b and runs_a[k].read_bytes() == runs_b[k].read_bytes())
    ok = (final.returncode == 0 and set(runs_a) == set(runs_b) == set(identical)
          and sorted(finished) == sorted(runs_a))
    return {
        "scenario": "sweep killed with kill -9 at random moments, resumed each time",
        "injected": f"{kills} SIGKILLs of the whole `fedgca sweep --workers 2` process group (12 runs: academic, "
                    f"gca/fedavg/dpfedavg × 4 seeds, R=6; {clean_s:.0f} s uninterrupted), each 1–8 s after its start",
        "observed": f"{len(runs_b)} runs, {len(identical)} with metrics.csv byte-identical to the uninterrupted sweep; "
                    f"'finished' recorded {len(finished)} times for {len(set(finished))} keys; "
                    f"{sum(e.get('event') == 'started' for e in ledger)} starts in the ledger; "
                    f"{done_early} of the {kills} invocations had ended before their kill",
        "lost": "none" if ok else "SEE OBSERVED",
        "ok": ok,
    }


def run_resume(data_dir, tmp: Path) -> dict:
    args = ["run", "--dataset", "magic", "--rounds", "6", "--recon-epochs", "2", "--align-epochs", "2",
            "--data-dir", data_dir]
    cli(*args, "--out", tmp / "full")
    proc = subprocess.Popen([PY, "-m", "fedgca.cli.main", *map(str, args), "--out", str(tmp / "killed")], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while not ((tmp / "killed" / "metrics.csv").exists()
               and (tmp / "killed" / "metrics.csv").read_text().count(",round,") >= 3):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cli(*args, "--out", tmp / "killed", "--resume")
    same = (tmp / "full" / "metrics.csv").read_bytes() == (tmp / "killed" / "metrics.csv").read_bytes()
    leftovers = sorted(p.name for p in (tmp / "killed").glob("*.tmp"))
    return {"scenario": "a run killed with kill -9 mid-run, then --resume",
            "injected": "SIGKILL after round 3 of 6 (magic GCA)",
            "observed": f"resumed to metrics.csv {'byte-identical to' if same else 'DIFFERENT from'} an uninterrupted "
                        f"run ({sha(tmp / 'full' / 'metrics.csv')}); temporary files left: {leftovers or 'none'}",
            "lost": "none" if same and not leftovers else "SEE OBSERVED", "ok": same and not leftovers}


PAYLOAD = textwrap.dedent("""
    import sys, torch
    class P:
        def __reduce__(self):
            import os
            return (os.system, ("touch " + sys.argv[2],))
    torch.save({"clients": P(), "method": {}, "rows": [], "comm": [], "round": 0, "wall": 0.0}, sys.argv[1])
""")


def crafted_files(data_dir, tmp: Path) -> list[dict]:
    run = tmp / "run"
    cli("run", "--dataset", "academic", "--rounds", "1", "--recon-epochs", "1", "--align-epochs", "1",
        "--data-dir", data_dir, "--out", run)
    rows = sorted((Path(data_dir) / "academic").glob("*.csv"))[0]
    out = []
    marker = tmp / "payload-ran"
    script = tmp / "craft.py"
    script.write_text(PAYLOAD)
    backup = (run / "checkpoint.pt").read_bytes()
    manifest = (run / "manifest.json").read_bytes()
    subprocess.run([PY, str(script), str(run / "checkpoint.pt"), str(marker)], check=True, env=ENV)
    probes = [("run --resume", ["run", "--dataset", "academic", "--rounds", "1", "--recon-epochs", "1",
                                "--align-epochs", "1", "--data-dir", data_dir, "--out", run, "--resume"]),
              ("attack", ["attack", "--run", run, "--data-dir", data_dir])]
    for with_manifest in (True, False):
        if not with_manifest:
            (run / "manifest.json").unlink()  # an attacker would drop it: safety must not depend on it
        for name, args in probes:
            p = cli(*args, check=False)
            out.append({"scenario": f"crafted checkpoint.pt (pickle payload) on `fedgca {name}`, "
                                    f"{'manifest kept' if with_manifest else 'manifest deleted'}",
                        "injected": "checkpoint.pt replaced by a torch.save of an object whose __reduce__ runs a "
                                    "shell command",
                        "observed": f"exit {p.returncode}: {error_line(p.stderr)}; payload ran: {marker.exists()}",
                        "lost": "none", "ok": p.returncode == 2 and not marker.exists()})
    (run / "checkpoint.pt").write_bytes(backup)
    (run / "manifest.json").write_bytes(manifest)
    model = run / "clients" / "client_000" / "model.pt"
    subprocess.run([PY, str(script), str(model), str(marker)], check=True, env=ENV)
    for with_manifest in (True, False):
        if not with_manifest:
            (run / "manifest.json").unlink()
        p = cli("score", "--run", run, "--client", 0, "--input", rows, check=False)
        out.append({"scenario": f"crafted model.pt on `fedgca score`, "
                                f"{'manifest kept' if with_manifest else 'manifest deleted'}",
                    "injected": "clients/client_000/model.pt replaced by a pickle payload",
                    "observed": f"exit {p.returncode}: {error_line(p.stderr)}; payload ran: {marker.exists()}",
                    "lost": "none", "ok": p.returncode == 2 and not marker.exists()})
    (run / "manifest.json").write_bytes(manifest)
    (run / "checkpoint.pt").write_bytes(backup[: len(backup) // 3])  # a full disk
    p = cli("run", "--dataset", "academic", "--rounds", "1", "--recon-epochs", "1", "--align-epochs", "1",
            "--data-dir", data_dir, "--out", run, "--resume", check=False)
    out.append({"scenario": "truncated checkpoint.pt (a full disk) on `fedgca run --resume`",
                "injected": "checkpoint.pt cut to a third of its size",
                "observed": f"exit {p.returncode}: {error_line(p.stderr)}",
                "lost": "none (the file is named; nothing is overwritten)", "ok": p.returncode == 2
                and "truncated" in p.stderr})
    return out


def bad_uploads(data_dir, tmp: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from flower_hooks import faulty_client_app

    from fedgca.config import RunConfig
    from fedgca.flower.simulation import simulate

    faults = {1: "nan-codes", 2: "inf-codes", 3: "extra-rows", 4: "float64", 5: "wrong-shape", 6: "extra-array",
              7: "crash"}
    cfg = RunConfig(dataset="magic", clients=8, rounds=1, recon_epochs=1, align_epochs=1, k=10)
    s = simulate(cfg, tmp / "uploads", data_dir=data_dir, eval_recon_epochs=False, client_app=faulty_client_app(),
                 node_extra={i: {"fault": f} for i, f in faults.items()})
    p = s["participation"][0]
    ok = p["took_part"] == [0] and len(p["rejected"]) == 6 and list(p["dropped"]) == ["7"] and s["rounds"] == 1
    return {"scenario": "clients upload NaN / inf / oversized / wrong-dtype / wrong-shape / extra codes, or crash",
            "injected": ", ".join(f"client {i}: {f}" for i, f in faults.items()) + " (Flower, in-process engine)",
            "observed": f"round completed; took part: {p['took_part']}; rejected: "
                        + "; ".join(f"{k}: {v}" for k, v in sorted(p["rejected"].items()))
                        + f"; dropped: {sorted(p['dropped'])}",
            "lost": "none (the excluded clients' uploads only)", "ok": ok}


def deployment(data_dir, tmp: Path, nodes: int = 6, rounds: int = 3, pause: float = 30.0) -> dict:
    """SuperLink + `nodes` SuperNodes over TLS on loopback; 2 killed after round 1, one restarted after round 2.
    Every node keeps its ClientApp state on its disk (`state-dir`): the restarted one restores it and goes on."""
    from fedgca.config import RunConfig
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, write_app

    cfg = RunConfig(dataset="magic", clients=nodes, rounds=rounds, recon_epochs=1, align_epochs=1, k=10).resolved()
    out = tmp / "deploy-out"
    app_dir = tmp / "app"
    app_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "tests"))
    from flower_hooks import (
        PAUSED_SERVER_APP,  # the tests' ServerApp wrapper: a pause between rounds
    )

    (app_dir / "paused_app.py").write_text(PAUSED_SERVER_APP.format(pause=pause))
    write_app(app_dir, to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False, reply_timeout=45.0),
              server_app="paused_app:app")
    ncs = [{"partition-id": i, "num-partitions": nodes, "data-dir": str(Path(data_dir).resolve()),
            "cache-dir": str(tmp / "cache"), "state-dir": str(tmp / "node-state")} for i in range(nodes)]
    t0 = time.perf_counter()
    with LocalDeployment(tmp / "dep", ncs, tls=True) as dep:
        runner = dep.submit(app_dir)

        def wait_rounds(n):
            while len([x for x in (out / "rounds.jsonl").read_text().splitlines() if x.strip()]
                       if (out / "rounds.jsonl").exists() else []) < n:
                if runner.poll() is not None:
                    raise RuntimeError(dep.log("flwr-run.log")[-3000:])
                time.sleep(0.2)

        wait_rounds(1)
        dep.kill_node(nodes - 2)
        dep.kill_node(nodes - 1)
        wait_rounds(2)
        dep.restart_node(nodes - 1)
        rc = runner.wait(timeout=1800)
        logs = "".join(p.read_text(errors="replace") for p in dep.logs.iterdir() if p.is_file())
    wall = time.perf_counter() - t0
    restored = logs.count("restored client state from")  # fedgca.flower.nodestate, in the restarted node's log
    summary = json.loads((out / "summary.json").read_text())
    part = summary["participation"]
    took = [p["took_part"] for p in part]
    ok = (rc == 0 and len(part) == rounds and took[0] == list(range(nodes))
          and took[1] == list(range(nodes - 2)) and took[2] == list(range(nodes - 2)) + [nodes - 1]
          and part[2]["rejoined"].get(str(nodes - 1)) is not None and restored >= 1)
    return {"scenario": f"Flower deployment: SuperLink + {nodes} SuperNodes, TLS, loopback; nodes killed and restarted",
            "injected": f"SIGKILL of SuperNodes {nodes - 2} and {nodes - 1} (with their Flower processes) after round 1; "
                        f"SuperNode {nodes - 1} restarted after round 2 (GCA, magic, R={rounds})",
            "observed": f"exit {rc}; rounds completed: {len(part)}; took part per round: {took}; dropped in round 2: "
                        f"{sorted(part[1]['dropped'])}; rejoined in round 3: {part[2]['rejoined']}; "
                        f"client state restored from the node's state-dir: {restored} time(s); {wall:.0f} s wall",
            "lost": "none (the killed nodes' rounds only; the restarted node goes on from its state after round 1)",
            "ok": ok}


def _checkpoint_round(out: Path):
    """The round (secure: exchange) the ServerApp's checkpoint completed, or None (via its manifest: the file is
    swapped in atomically, so a read never sees half a checkpoint)."""
    from fedgca import rundir

    try:
        return int(rundir.load_tensors(rundir.verify(out, rundir.CHECKPOINT))["round"])
    except (rundir.RunFileError, KeyError, OSError):
        return None


def _serverapp_pids(dep) -> list[int]:
    """The ServerApp processes the SuperLink started for its runs (``flwr-serverapp``; not the SuperExec that
    launches them, ``flower-superexec --plugin-type serverapp``, which the SuperLink needs for the next run)."""
    from fedgca.flower.deploy import descendants

    out = []
    for pid in descendants([dep.superlink.pid]) if dep.superlink is not None else []:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "flwr-serverapp" in cmd:
            out.append(pid)
    return out


def _share_keys_in(out: Path, r: int, n: int) -> bool:
    path = out / "messages.jsonl"
    if not path.exists():
        return False
    return sum(1 for line in path.read_text().splitlines()
               if '"secagg.share_keys"' in line and '"up"' in line and f'"round": {r + 1},' in line) >= n


SERVER_PLAN = (("gca", "superlink"), ("secagg-fedavg", "superlink"), ("gca", "serverapp"), ("secagg-fedavg", "secagg"))


def server_kills(data_dir, tmp: Path, nodes: int = 6, rounds: int = 6, plan=SERVER_PLAN) -> list[dict]:
    """A 6-node TLS deployment whose server dies (issue #60): the SuperLink and its ServerApp SIGKILLed after round
    3 and restarted from the SuperLink's --database, the ServerApp alone SIGKILLed, the ServerApp SIGKILLed inside a
    SecAgg+ exchange once every node's key shares were in; each time `flwr run` again with resume=true. Against the
    same run uninterrupted (the in-process engine: the same metrics and detectors as a deployment), byte for byte:
    metrics.csv, comm.json less its timing, every node's deployed detector."""
    from fedgca.config import RunConfig
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, write_app
    from fedgca.flower.simulation import simulate
    from fedgca.threads import limit_threads

    limit_threads(1)
    data_dir = str(Path(data_dir).resolve())
    rows = []
    for method, kill in plan:
        cfg = RunConfig(dataset="magic", method=method, clients=nodes, rounds=rounds, local_epochs=1, recon_epochs=1,
                        align_epochs=1, k=10, seed=100).resolved()
        name = f"{method}-{kill}"
        ref = tmp / f"{name}-whole"
        simulate(cfg, ref, data_dir=data_dir, reply_timeout=120)
        out = tmp / f"{name}-out"
        ncs = [{"partition-id": i, "num-partitions": nodes, "data-dir": data_dir, "cache-dir": str(tmp / "cache"),
                "state-dir": str(tmp / f"{name}-state"), "detector-dir": str(out)} for i in range(nodes)]
        apps = {}
        for resume in (False, True):
            apps[resume] = write_app(tmp / f"{name}-app-{int(resume)}",
                                     to_run_config(cfg, out_dir=str(out), reply_timeout=60.0, resume=resume))
        t0 = time.perf_counter()
        with LocalDeployment(tmp / f"{name}-dep", ncs, tls=True, database=tmp / f"{name}-dep" / "superlink.db") as dep:
            runner = dep.submit(apps[False])
            deadline = time.monotonic() + 1800
            target = 3 if kill != "secagg" else None

            def waiting():
                if runner.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: the run ended before the kill:\n{dep.log('flwr-run.log')[-3000:]}")
                time.sleep(0.05)

            if kill == "secagg":  # inside exchange 4 (round 4's sum): after every node shared its keys
                while not _share_keys_in(out, 3, nodes):
                    waiting()
            else:
                while (_checkpoint_round(out) or -1) < target - 1:  # round 3 done and checkpointed
                    waiting()
            before = _checkpoint_round(out)
            if kill == "superlink":
                dep.kill_superlink()
                runner.wait(timeout=120)
                time.sleep(2.0)
                dep.start_superlink("superlink-restart.log")
            else:
                from fedgca.flower.deploy import _kill

                _kill(_serverapp_pids(dep), signal.SIGKILL)
                runner.wait(timeout=120)
            killed_at = time.perf_counter() - t0
            resumed = dep.run(apps[True], timeout=1800)
        wall = time.perf_counter() - t0
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        same_metrics = (out / "metrics.csv").exists() and (out / "metrics.csv").read_bytes() == (ref / "metrics.csv").read_bytes()

        def untimed(path):
            timing = ("wall_seconds", "phase_seconds", "last_rest_seconds", "rejoined", "dropped")
            return [{k: v for k, v in r.items() if k not in timing} for r in json.loads(path.read_text())]

        same_comm = (out / "comm.json").exists() and untimed(out / "comm.json") == untimed(ref / "comm.json")
        same_detectors = all((out / "clients" / f"client_{i:03d}" / f).exists() and
                             (out / "clients" / f"client_{i:03d}" / f).read_bytes() ==
                             (ref / "clients" / f"client_{i:03d}" / f).read_bytes()
                             for i in range(nodes) for f in ("model.pt", "detector.json"))
        what = {"superlink": "SIGKILL of the SuperLink and its ServerApp after round 3; SuperLink restarted from its "
                             "--database",
                "serverapp": "SIGKILL of the ServerApp alone after round 3",
                "secagg": "SIGKILL of the ServerApp inside round 4's SecAgg+ exchange, once every node's key shares "
                          "were in"}[kill]
        ok = resumed.returncode == 0 and same_metrics and same_comm and same_detectors
        rows.append({
            "scenario": f"Flower deployment: the server dies ({method}, magic, R={rounds}, {nodes} SuperNodes, TLS)",
            "injected": f"{what}; then `flwr run` with resume=true",
            "observed": f"exit {resumed.returncode}; the checkpoint had completed round {None if before is None else before + 1}"
                        f" ({'exchange' if method.startswith('secagg') else 'round'} index {before}); resumed to "
                        f"{len(summary.get('round_wall_seconds', []))} rounds; metrics.csv = uninterrupted: {same_metrics}; "
                        f"comm.json (less timing) = uninterrupted: {same_comm}; {nodes} detectors = uninterrupted: "
                        f"{same_detectors}; killed at {killed_at:.0f} s, {wall:.0f} s wall",
            "lost": "the interrupted round only (played again from the checkpoint)", "ok": ok})
        print(f"server {name}: ok={ok} {rows[-1]['observed']}", file=sys.stderr)
    return rows


# ---------------------------------------------------------------------------- load

LOAD_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    from fedgca.threads import limit_threads
    limit_threads(1)  # what `fedgca run` does
    from fedgca.config import RunConfig
    from fedgca.data.dataset import FederatedDataset
    from fedgca.data.source import DataSource
    from fedgca.simulation.federation import build_federation, memory_estimate
    engine, clients, rows, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = np.random.default_rng(0)
    n_test = 5000
    test_y = (rng.random(n_test) < 0.2).astype(np.int64)
    ds = FederatedDataset("credit-shaped", "tabular", rng.normal(size=(clients * rows, 29)).astype(np.float32),
                          (rng.normal(size=(n_test, 29)) + test_y[:, None]).astype(np.float32), test_y)
    cfg = RunConfig(dataset="credit", clients=clients, rounds=1).resolved()
    est = memory_estimate(cfg, (29,), [rows] * clients, n_test)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # interpreter, torch, the rows themselves
    t0 = time.perf_counter()
    if engine == "simulator":
        from fedgca.simulation.runner import run
        try:
            fed = build_federation(cfg, DataSource.builtin("credit", download=False), dataset=ds)
        except ValueError as err:  # what `fedgca run` prints as its one error line
            print(json.dumps({"error": f"fedgca: error: {err}", "seconds": time.perf_counter() - t0,
                              "estimate": est}))
            sys.exit(2)
        s = run(cfg, out, fed=fed, progress=False)
        per_round = s["wall_seconds"]
    else:
        import fedgca.data
        from fedgca.flower.simulation import simulate
        fedgca.data.load_dataset = lambda *a, **k: ds  # in-process nodes read their partition of these rows
        s = simulate(cfg, out)
        per_round = s["wall_seconds"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"per_round": per_round, "peak": peak, "base": base, "estimate": est,
                      "total": time.perf_counter() - t0}))
""")


def load_row(engine: str, clients: int, rows: int, tmp: Path) -> dict:
    script = tmp / "load_child.py"
    script.write_text(LOAD_CHILD)
    before = load()
    t0 = time.perf_counter()
    p = subprocess.run([PY, str(script), engine, str(clients), str(rows), str(tmp / f"{engine}-{clients}")], env=ENV,
                       capture_output=True, text=True, timeout=3600)
    last = (p.stdout.strip().splitlines() or ["{}"])[-1]
    r = json.loads(last) if last.startswith("{") else {}
    if p.returncode != 0:
        return {"engine": engine, "clients": clients, "rc": p.returncode, "estimate": r.get("estimate"),
                "seconds": r.get("seconds"), "error": r.get("error") or error_line(p.stderr) or p.stderr[-500:]}
    return {"engine": engine, "clients": clients, "rows": rows, "per_round": r["per_round"], "peak": r["peak"],
            "base": r["base"],
            "estimate": r["estimate"], "wall": time.perf_counter() - t0, "load": f"{before} → {load()}"}


def too_large(tmp: Path) -> dict:
    r = load_row("simulator", 20_000, 500, tmp)
    ok = r.get("rc") == 2 and "GiB of memory" in r.get("error", "")
    return {"scenario": "a federation that cannot fit in memory",
            "injected": "credit-shaped, C = 20,000 clients × 500 rows (estimate "
                        f"{(r.get('estimate') or 0) / 2**30:.1f} GiB on a 24 GiB machine)",
            "observed": f"exit {r.get('rc', 0)} after {r.get('seconds') or 0:.1f} s of setup: {r.get('error', 'ran')}",
            "lost": "none (refused before the models, shards or scores were allocated)", "ok": ok}


# ---------------------------------------------------------------------------- table


def render(faults: list[dict], loads: list[dict], started: str, finished: str) -> str:
    lines = ["# Reliability: faults and load, measured", "",
             "Regenerate with `.venv/bin/python benchmarks/reliability.py --data-dir ../shared/data` "
             f"(2-core CPU machine; load average {started} at the start, {finished} at the end).", "",
             "## Faults", "", "| scenario | injected | observed | data lost | pass |", "|---|---|---|---|---|"]
    for f in faults:
        lines.append(f"| {f['scenario']} | {f['injected']} | {f['observed']} | {f['lost']} | "
                     f"{'yes' if f['ok'] else '**NO**'} |")
    lines += ["", "## Load", "",
              "Credit-shaped synthetic rows (29 features, 500 normal rows per client, 5,000 test rows), GCA at "
              "the credit preset (K = 20, ρ = 0.1, 5 + 5 epochs, 6 evaluations per round), one round, 1 torch "
              "thread. Peak memory is the process's maximum resident set; 'of which the run' subtracts what the "
              "process held before the federation was built (interpreter, torch, the synthetic rows); the "
              "estimate is what "
              "`fedgca.simulation.federation.memory_estimate` computes before allocating (a run whose estimate "
              "exceeds 90 % of the available memory is refused with one line).", "",
              "| engine | clients C | time per round (s) | peak memory (MiB) | of which the run (MiB) | "
              "estimate (MiB) | load average |",
              "|---|---|---|---|---|---|---|"]
    for r in loads:
        if "error" in r:
            lines.append(f"| {r['engine']} | {r['clients']} | error: {r['error']} | | | | |")
        else:
            lines.append(f"| {r['engine']} | {r['clients']:,} | {r['per_round']:.1f} | {r['peak'] / 2**20:,.0f} | "
                         f"{(r['peak'] - r['base']) / 2**20:,.0f} | {r['estimate'] / 2**20:,.0f} | {r['load']} |")
    sims = [r for r in loads if r.get("engine") == "simulator" and "error" not in r]
    if len(sims) >= 2:
        a, b = sims[0], sims[-1]
        k = b["clients"] / a["clients"]
        lines += ["", f"From C = {a['clients']:,} to C = {b['clients']:,} (×{k:.0f}): time per round ×"
                      f"{b['per_round'] / a['per_round']:.1f}, peak memory ×{b['peak'] / a['peak']:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "reliability.md"))
    p.add_argument("--only", default="sweep,resume,files,uploads,deploy,server,load,flower-load,oom")
    p.add_argument("--clients", default="10,100,1000", help="simulator load rows")
    p.add_argument("--server-plan", help="the server rows to run, METHOD:KILL,... (KILL: superlink|serverapp|secagg)")
    p.add_argument("--flower-clients", default="10,100")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    started = load()
    faults, loads = [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        steps = [("sweep", lambda: [sweep_kills(args.data_dir, tmp / "sweep")]),
                 ("resume", lambda: [run_resume(args.data_dir, tmp / "resume")]),
                 ("files", lambda: crafted_files(args.data_dir, tmp / "files")),
                 ("uploads", lambda: [bad_uploads(args.data_dir, tmp / "uploads")]),
                 ("deploy", lambda: [deployment(args.data_dir, tmp / "deploy")]),
                 ("server", lambda: server_kills(args.data_dir, tmp / "server", plan=[
                     tuple(x.split(":")) for x in args.server_plan.split(",")] if args.server_plan else SERVER_PLAN)),
                 ("oom", lambda: [too_large(tmp)])]
        for name, step in steps:
            if name in only:
                (tmp / name).mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                rows = step()
                faults += rows
                print(f"{name}: {time.perf_counter() - t0:.0f} s, ok={[r['ok'] for r in rows]}", file=sys.stderr)
        if "load" in only:
            for c in map(int, args.clients.split(",")):
                loads.append(load_row("simulator", c, 500, tmp))
                print(f"load simulator C={c}: {loads[-1]}", file=sys.stderr)
        if "flower-load" in only:
            for c in map(int, args.flower_clients.split(",")):
                loads.append(load_row("flower", c, 500, tmp))
                print(f"load flower C={c}: {loads[-1]}", file=sys.stderr)
        for f in faults:  # no machine paths in the committed table
            f["observed"] = f["observed"].replace(str(tmp), "<tmp>")
    text = render(faults, loads, started, load())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0 if all(f["ok"] for f in faults) else 1


if __name__ == "__main__":
    sys.exit(main())
