"""A real Flower deployment on 127.0.0.1 over a practitioner's per-site files: a SuperLink and 3 SuperNodes as
separate processes (telemetry and update checks off, TLS), each SuperNode reading its own site's file with fedgca's
SuperExec (warm ClientApp processes), a run submitted with `flwr run`, a SuperNode killed after round 1, every
process cleaned up. The deployment is tests/deploy_scenario.py, run once per session — in the background from
the moment the suite collects these tests, since most of its time is Flower's wait for the killed node's missed
heartbeats — and these tests check what it recorded."""
import csv
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_scenario import OPTIONS, REPLY_TIMEOUT, claim, jsonl, record, scenario_dir, wait_for_result

from fedgca.binding import bind
from fedgca.config import RunConfig
from fedgca.data.source import open_source
from fedgca.flower.deploy import LocalDeployment, running
from fedgca.protocol.gca import upload_size
from fedgca.simulation.runner import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

BETA, DZ = 4, 16  # bytes per float32; the tabular autoencoder's code width (models.tabular)


def _alive_among(pids) -> list[int]:
    return [p for p in pids if running(p)]


@dataclass
class Deployed:
    out: Path
    rec: dict  # deploy_scenario's record: exit code, processes, pids
    cfg: RunConfig
    source: object
    dataset: object


@pytest.fixture(scope="module")
def deployed(request, data_dir):
    """The session's deployment scenario (tests/deploy_scenario.py): its record, once it has one — or, where the
    suite did not start it in the background, the scenario run here."""
    root = scenario_dir(request.config)
    rec = record(root, data_dir) if claim(root) else wait_for_result(root)
    if "error" in rec:
        pytest.fail("the deployment scenario failed:\n" + rec["error"])
    source = open_source(Path(rec["site_dir"]), Path(rec["schema"]))
    cfg, dataset = bind(OPTIONS, source)
    return Deployed(Path(rec["out"]), rec, cfg, source, dataset)


def test_deployment_runs_over_tls_and_cleans_up(deployed):
    rec = deployed.rec
    assert rec["rc"] == 0, rec["run_log"]
    link = rec["superlink_args"]
    assert "--ssl-certfile" in link and "--insecure" not in link
    nodes = [a for a in rec["process_args"] if "flower-supernode" in a]
    assert len(nodes) == 3 and all("--root-certificates" in a and "--insecure" not in a for a in nodes)
    # ClientApps forked warm by fedgca's SuperExec, one per SuperNode, on its local (loopback) Runtime API
    assert all(a[a.index("--isolation") + 1] == "process" for a in nodes)
    execs = [a for a in rec["process_args"] if a[:3] == ["fedgca", "flower", "superexec"]]
    assert len(execs) == 3 and all(a[a.index("--runtime-api-address") + 1].startswith("127.0.0.1:") for a in execs)
    assert rec["env"]["FLWR_TELEMETRY_ENABLED"] == "0" and rec["env"]["FLWR_DISABLE_UPDATE_CHECK"] == "1"
    assert link[link.index("--host") + 1] == "127.0.0.1"
    assert all(a[a.index("--superlink") + 1].startswith("127.0.0.1:") for a in nodes)
    assert len(rec["seen"]) > 4  # SuperLink, SuperNodes and the processes Flower spawned
    assert rec["alive_after_cleanup"] == [], "processes left behind"


def test_train_replies_hold_exactly_one_code_array(deployed):
    summary = json.loads((deployed.out / "summary.json").read_text())
    sizes = dict(zip(summary["client_ids"], summary["client_sizes"]))
    assert summary["client_ids"] == [0, 1, 2]
    up = [m for m in jsonl(deployed.out / "messages.jsonl") if m["direction"] == "up" and m["status"] == "received"]
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
    msgs = jsonl(deployed.out / "messages.jsonl")
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
    assert deployed.rec["victim_alive_after_kill"] == []
    rounds = jsonl(deployed.out / "rounds.jsonl")
    assert len(rounds) == 2
    assert rounds[0]["took_part"] == [0, 1, 2] and rounds[0]["dropped"] == {}
    assert rounds[1]["participants"] == [0, 1, 2] and rounds[1]["took_part"] == [0, 1]
    assert list(rounds[1]["dropped"]) == ["2"]
    # the reply-timeout, or Flower's heartbeat verdict if it came first (the two overlap by a few seconds)
    why = rounds[1]["dropped"]["2"]
    assert why == f"no reply within {REPLY_TIMEOUT:g} s" or "Node Unavailable" in why, why
    assert rounds[1]["accepted"]["align"] == [0, 1] and rounds[1]["evaluated"] == [0, 1]
    summary = json.loads((deployed.out / "summary.json").read_text())
    assert summary["participation"][1]["took_part"] == [0, 1]
    assert 0 <= summary["final"]["accuracy"] <= 1


def test_round_one_matches_the_simulator(deployed, tmp_path):
    """Before the kill the deployment computes exactly what fedgca's simulator computes over the same site files
    (same config and seed): every ClientApp process computes with one torch thread, as `fedgca run` does."""
    sim = run(dataclasses.replace(deployed.cfg, rounds=1), tmp_path / "sim", source=deployed.source,
              dataset=deployed.dataset, progress=False)
    assert sim["rounds"] == 1 and sim["clients"] == 3 and deployed.cfg.data_digest
    deployed_rows = list(csv.DictReader((deployed.out / "metrics.csv").open()))
    sim_rows = list(csv.DictReader((tmp_path / "sim" / "metrics.csv").open()))
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


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process-tree cleanup check needs /proc")
def test_a_sigterm_stops_deploy_local_and_every_process_it_started(tmp_path, data_dir):
    """`fedgca flower deploy-local` stopped by SIGTERM (`timeout`, `kill`, a scheduler) while its run is under way:
    one line, exit 130, and no SuperLink, SuperNode or SuperExec left listening. Before, SIGTERM ended the process
    at once and left them all running (they have sessions of their own)."""
    import signal
    import subprocess
    import sys

    from fedgca.flower.deploy import descendants

    err_path = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "fedgca.cli.main", "flower", "deploy-local", "--dataset", "academic", "--clients",
           "2", "--rounds", "50", "--data-dir", str(data_dir), "--out", str(tmp_path / "out")]
    with err_path.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        while "SuperLink on" not in err_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()[-2000:]
            time.sleep(0.1)
        time.sleep(2)  # the run submitted, its processes up
        started = descendants([proc.pid])
        assert len(started) >= 3  # a SuperLink and two SuperNodes at least
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    text = err_path.read_text()
    assert rc == 130 and "fedgca: interrupted" in text and "Traceback" not in text, text[-2000:]
    assert _alive_among(started) == []
