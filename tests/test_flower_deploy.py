"""A real Flower deployment on 127.0.0.1 over a practitioner's per-site files: a SuperLink and 3 SuperNodes as
separate processes (telemetry and update checks off, TLS), each SuperNode reading its own site's file with fedgca's
SuperExec (warm ClientApp processes), a run submitted with `flwr run`, a SuperNode killed after round 1, every
process cleaned up. One deployment (module fixture) serves all its tests: each process start costs seconds of
torch import on 2 cores, and Flower notices a killed SuperNode only after two missed heartbeats (up to a minute)."""
import csv
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from flower_hooks import PAUSED_SERVER_APP
from site_files import site_files

from fedgca.binding import bind
from fedgca.config import RunConfig
from fedgca.data.source import open_source
from fedgca.flower.config import to_run_config
from fedgca.flower.deploy import LocalDeployment, descendants, running, write_app
from fedgca.flower.simulation import own_data_nodes
from fedgca.protocol.gca import upload_size
from fedgca.simulation.runner import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

BETA, DZ = 4, 16  # bytes per float32; the tabular autoencoder's code width (models.tabular)
OPTIONS = {"method": "gca", "partition": "natural", "rounds": 2, "recon_epochs": 1, "align_epochs": 1}


def _app(tmp_path, cfg: RunConfig, out, pause: float = 0.0, **opts):
    app_dir = tmp_path / "app"
    server_app = "fedgca.flower.server_app:app"
    if pause:  # a test-only ServerApp module in the app directory (shipped in the FAB) sleeps between rounds
        app_dir.mkdir(parents=True, exist_ok=True)
        (app_dir / "paused_server_app.py").write_text(PAUSED_SERVER_APP.format(pause=pause))
        server_app = "paused_server_app:app"
    return write_app(app_dir, to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False, **opts),
                     server_app=server_app)


def _alive_among(pids) -> list[int]:
    return [p for p in pids if running(p)]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@dataclass
class Deployed:
    out: Path
    dep: LocalDeployment
    rc: int
    victim_tree: list
    victim_alive_after_kill: list
    seen: set
    tmp: Path
    cfg: RunConfig
    source: object
    dataset: object


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, data_dir):
    """ONE real deployment: TLS (CA and certificates made here), a SuperLink and 3 SuperNodes as separate
    processes, each reading one site's file (bank's rows of three jobs; the per-site test split), 2 GCA rounds
    with `flwr run`; SuperNode 2 is SIGKILLed (with its SuperExec and ClientApp processes) after round 1
    finishes. The tests below read what the ServerApp recorded."""
    tmp = tmp_path_factory.mktemp("deploy")
    source = open_source(*site_files(tmp, data_dir))
    cfg, dataset = bind(OPTIONS, source)
    out = tmp / "out"
    app = _app(tmp, cfg, out, pause=5.0, reply_timeout=240.0)
    nodes = list(own_data_nodes(source, tmp / "nodes").values())
    seen: set[int] = set()
    dep = LocalDeployment(tmp / "deploy", nodes, tls=True)
    victim_tree, after = [], []
    rc = None
    try:
        with dep:
            runner = dep.submit(app)
            deadline = time.monotonic() + 400
            while not ((out / "rounds.jsonl").exists() and _lines(out / "rounds.jsonl")):
                assert runner.poll() is None, dep.log("flwr-run.log")[-3000:]
                assert time.monotonic() < deadline, "round 1 did not finish"
                time.sleep(0.2)
            victims = [dep.nodes[2].pid, dep.superexecs[2].pid]  # the SuperNode and its SuperExec
            victim_tree = [*victims, *descendants(victims)]
            seen.update(dep.live_pids())
            dep.kill_node(2)
            after = _alive_among(victim_tree)
            rc = runner.wait(timeout=500)
            seen.update(dep.live_pids())
    finally:
        seen.update(p.pid for p in dep._all)
    time.sleep(1.0)
    return Deployed(out, dep, rc, victim_tree, after, seen, tmp, cfg, source, dataset)


def test_deployment_runs_over_tls_and_cleans_up(deployed):
    assert deployed.rc == 0, deployed.dep.log("flwr-run.log")[-3000:]
    dep = deployed.dep
    assert "--ssl-certfile" in dep.superlink.args and "--insecure" not in dep.superlink.args
    nodes = [p for p in dep._all if "flower-supernode" in p.args]
    assert len(nodes) == 3 and all("--root-certificates" in p.args and "--insecure" not in p.args for p in nodes)
    # ClientApps forked warm by fedgca's SuperExec, one per SuperNode, on its local (loopback) Runtime API
    assert all(p.args[p.args.index("--isolation") + 1] == "process" for p in nodes)
    execs = [p for p in dep._all if p.args[:3] == ["fedgca", "flower", "superexec"]]
    assert len(execs) == 3 and all(p.args[p.args.index("--runtime-api-address") + 1].startswith("127.0.0.1:")
                                   for p in execs)
    assert dep.env["FLWR_TELEMETRY_ENABLED"] == "0" and dep.env["FLWR_DISABLE_UPDATE_CHECK"] == "1"
    assert dep.superlink.args[dep.superlink.args.index("--host") + 1] == "127.0.0.1"
    assert all(p.args[p.args.index("--superlink") + 1].startswith("127.0.0.1:") for p in nodes)
    assert len(deployed.seen) > 4  # SuperLink, SuperNodes and the processes Flower spawned
    assert _alive_among(deployed.seen) == [], "processes left behind"


def test_train_replies_hold_exactly_one_code_array(deployed):
    summary = json.loads((deployed.out / "summary.json").read_text())
    sizes = dict(zip(summary["client_ids"], summary["client_sizes"]))
    assert summary["client_ids"] == [0, 1, 2]
    up = [m for m in _lines(deployed.out / "messages.jsonl") if m["direction"] == "up" and m["status"] == "received"]
    train_up = [m for m in up if m["phase"] == "train"]
    assert sorted((m["round"], m["client_id"]) for m in train_up) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    for m in train_up:  # one array of shape (⌊ρ·N_i⌋, d_z), nothing else
        (record,) = m["records"]
        assert record["type"] == "array" and record["record"] == "codes"
        (arr,) = record["arrays"]
        assert arr["name"] == "z" and arr["dtype"] == "float32"
        assert arr["shape"] == [upload_size(sizes[m["client_id"]], deployed.cfg.rho), DZ]
    for m in (m for m in up if m["phase"] == "train.align"):  # the end-of-round evaluation, metrics only
        assert [(r["type"], r["record"]) for r in m["records"]] == [("metric", "evaluation")], m["records"]
    # no message any client sent in the whole run carries a parameter array: codes, and (own data over site files)
    # each site's column statistics once, for the shared scaler
    names: dict[str, set] = {}
    for m in up:
        names.setdefault(m["phase"], set()).update(a["name"] for rec in m["records"] for a in rec.get("arrays", []))
    assert names.pop("query.stats") == {"n", "mean", "m2"} and names.pop("train") == {"z"}
    assert not set().union(*names.values())


def test_bytes_match_spec_section_7(deployed):
    """Measured payloads: up = β·U·D_z and down = β·C·K'·(D_z + 1) per round (C = clients that aligned)."""
    msgs = _lines(deployed.out / "messages.jsonl")
    comm = json.loads((deployed.out / "comm.json").read_text())
    summary = json.loads((deployed.out / "summary.json").read_text())
    sizes = dict(zip(summary["client_ids"], summary["client_sizes"]))
    for c in comm:
        r = c["round"]
        ups = [m for m in msgs if m["round"] == r and m["phase"] == "train" and m["direction"] == "up"
               and m["status"] == "received"]
        downs = [m for m in msgs if m["round"] == r and m["phase"] == "train.align" and m["direction"] == "down"]
        U = sum(upload_size(sizes[i], deployed.cfg.rho) for i in c["took_part"])
        assert sum(m["payload_bytes"] for m in ups) == c["bytes_up"] == BETA * U * DZ
        assert 0 < c["broadcast_k"] <= deployed.cfg.k
        assert len(downs) == len(c["took_part"])
        assert sum(m["payload_bytes"] for m in downs) == c["bytes_down"] == \
            BETA * len(c["took_part"]) * c["broadcast_k"] * (DZ + 1)
        serialized = sum(a["serialized_bytes"] for m in ups for a in m["records"][0]["arrays"])
        assert 0 <= serialized - c["bytes_up"] <= 256 * len(ups)  # + one .npy header per array
    assert [c["took_part"] for c in comm] == [[0, 1, 2], [0, 1]]


def test_killed_supernode_is_dropped_and_round_two_finishes_with_two(deployed):
    assert deployed.victim_alive_after_kill == []
    rounds = _lines(deployed.out / "rounds.jsonl")
    assert len(rounds) == 2
    assert rounds[0]["took_part"] == [0, 1, 2] and rounds[0]["dropped"] == {}
    assert rounds[1]["participants"] == [0, 1, 2] and rounds[1]["took_part"] == [0, 1]
    assert list(rounds[1]["dropped"]) == ["2"]
    assert rounds[1]["accepted"]["align"] == [0, 1] and rounds[1]["evaluated"] == [0, 1]
    summary = json.loads((deployed.out / "summary.json").read_text())
    assert summary["participation"][1]["took_part"] == [0, 1]
    assert 0 <= summary["final"]["accuracy"] <= 1


def test_round_one_matches_the_simulator(deployed):
    """Before the kill the deployment computes exactly what fedgca's simulator computes over the same site files
    (same config and seed): every ClientApp process computes with one torch thread, as `fedgca run` does."""
    sim = run(dataclasses.replace(deployed.cfg, rounds=1), deployed.tmp / "sim", source=deployed.source,
              dataset=deployed.dataset, progress=False)
    assert sim["rounds"] == 1 and sim["clients"] == 3 and deployed.cfg.data_digest
    deployed_rows = list(csv.DictReader((deployed.out / "metrics.csv").open()))
    sim_rows = list(csv.DictReader((deployed.tmp / "sim" / "metrics.csv").open()))
    figures = ("accuracy", "auroc", "auprc", "train_error", "val_error")  # the deployment skips recon-epoch rows

    def end_of_round_one(rows):
        return [{m: r[m] for m in figures} for r in rows if r["round"] == "1" and r["phase"] == "round"]

    assert end_of_round_one(deployed_rows) == end_of_round_one(sim_rows)  # to the last digit


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process-tree cleanup check needs /proc")
def test_failed_start_leaves_no_process(tmp_path):
    """A SuperNode that cannot start (bad node config) and an early exit still clean everything up."""
    dep = LocalDeployment(tmp_path / "deploy", [{"partition-id": 0, "num-partitions": 1}])
    with pytest.raises(RuntimeError):
        with dep:
            pids = dep.live_pids()
            raise RuntimeError("test failure inside the deployment")
    time.sleep(0.5)
    assert _alive_among(pids + [p.pid for p in dep._all]) == []
