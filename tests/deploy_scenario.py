"""The scenario tests/test_flower_deploy.py checks, run once per session and recorded in ``<dir>/result.json``:
a real Flower deployment on 127.0.0.1 (TLS, a SuperLink and 3 SuperNodes as separate processes, each reading one
site's file: bank's rows of three jobs), 2 GCA rounds submitted with `flwr run`, SuperNode 2 SIGKILLed (with its
SuperExec and ClientApp processes) after round 1, every process stopped at the end.

Most of its minute and a half is waiting (Flower notices a killed SuperNode only after two missed heartbeats,
33–60 s), so the suite starts it in the background when it collects the deployment's tests (tests/conftest.py,
as a process of its own) and the tests read the record; whichever comes first — that start or the tests'
fixture — claims ``<dir>/claimed``, and a fixture that finds nothing claimed runs the scenario itself.

    python tests/deploy_scenario.py DIR DATA_DIR
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # flower_hooks, site_files (run as a script too)

OPTIONS = {"method": "gca", "partition": "natural", "rounds": 2, "recon_epochs": 1, "align_epochs": 1}
PAUSE = 5.0  # seconds the ServerApp sleeps between rounds: the kill lands there
REPLY_TIMEOUT = 240.0  # longer than Flower's heartbeat verdict: the killed node is dropped on Flower's word
CLAIM, RESULT = "claimed", "result.json"


def scenario_dir(config) -> Path:
    """Where this session's scenario runs: beside the xdist workers' own scratch directories (they share it)."""
    base = config._tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "deploy-scenario"


def claim(root: Path) -> bool:
    """True for the one caller that gets to run the scenario in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(root / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def wait_for_result(root: Path, timeout: float = 900.0) -> dict:
    deadline = time.monotonic() + timeout
    while not (root / RESULT).exists():
        if time.monotonic() > deadline:
            log = root / "scenario.log"
            raise TimeoutError(f"no deployment record in {root} after {timeout:g} s; its log ends:\n"
                               f"{log.read_text(errors='replace')[-3000:] if log.exists() else '(none)'}")
        time.sleep(0.5)
    return json.loads((root / RESULT).read_text())


def jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file the ServerApp wrote."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run_scenario(root: Path, data_dir: Path) -> dict:
    from flower_hooks import PAUSED_SERVER_APP
    from site_files import site_files

    from fedgca.binding import bind
    from fedgca.data.source import open_source
    from fedgca.flower.config import to_run_config
    from fedgca.flower.deploy import LocalDeployment, descendants, running, write_app
    from fedgca.flower.simulation import own_data_nodes

    site_dir, schema = site_files(root, data_dir)
    source = open_source(site_dir, schema)
    cfg, _ = bind(OPTIONS, source)
    out = root / "out"
    app_dir = root / "app"  # a test-only ServerApp module (shipped in the FAB) sleeps between rounds
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "paused_server_app.py").write_text(PAUSED_SERVER_APP.format(pause=PAUSE))
    app = write_app(app_dir, to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False,
                                           reply_timeout=REPLY_TIMEOUT), server_app="paused_server_app:app")
    nodes = list(own_data_nodes(source, root / "nodes").values())
    dep = LocalDeployment(root / "deploy", nodes, tls=True)
    seen: set[int] = set()
    victim_tree, after, rc = [], [], None
    try:
        with dep:
            runner = dep.submit(app)
            deadline = time.monotonic() + 400
            while not ((out / "rounds.jsonl").exists() and jsonl(out / "rounds.jsonl")):
                if runner.poll() is not None:
                    raise RuntimeError("flwr run ended before round 1 did:\n" + dep.log("flwr-run.log")[-3000:])
                if time.monotonic() > deadline:
                    raise TimeoutError("round 1 did not finish:\n" + dep.log("flwr-run.log")[-3000:])
                time.sleep(0.2)
            victims = [dep.nodes[2].pid, dep.superexecs[2].pid]  # the SuperNode and its SuperExec
            victim_tree = [*victims, *descendants(victims)]
            seen.update(dep.live_pids())
            dep.kill_node(2)
            after = [p for p in victim_tree if running(p)]
            rc = runner.wait(timeout=500)
            seen.update(dep.live_pids())
    finally:
        seen.update(p.pid for p in dep._all)
    time.sleep(1.0)
    return {"rc": rc, "out": str(out), "site_dir": str(site_dir), "schema": str(schema),
            "victim_tree": victim_tree, "victim_alive_after_kill": after, "seen": sorted(seen),
            "alive_after_cleanup": [p for p in sorted(seen) if running(p)],
            "superlink_args": list(dep.superlink.args), "process_args": [list(p.args) for p in dep._all],
            "env": {k: v for k, v in dep.env.items() if k.startswith("FLWR_")}, "run_log": dep.log("flwr-run.log")[-3000:]}


def record(root: Path, data_dir: Path) -> dict:
    """Run the scenario and write its record (or the error that stopped it) to ``root/result.json``."""
    try:
        rec = run_scenario(root, data_dir)
    except BaseException as err:  # noqa: BLE001 — the tests report it
        rec = {"error": "".join(traceback.format_exception(err))[-4000:]}
        if not isinstance(err, Exception):
            _write(root, rec)
            raise
    _write(root, rec)
    return rec


def _write(root: Path, rec: dict) -> None:
    tmp = root / (RESULT + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    tmp.replace(root / RESULT)


def _stop(signum, frame):
    raise SystemExit(128 + signum)  # unwinds the deployment's `with`: every process it started is stopped


def _stop_when_orphaned(parent: int) -> None:
    """A pytest process killed outright never stops us: stop once it is gone (we are handed to another parent)."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    _stop_when_orphaned(os.getppid())
    record(Path(sys.argv[1]), Path(sys.argv[2]))
