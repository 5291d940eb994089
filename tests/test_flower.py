"""fedgca's Flower apps in this process (no SuperLink): equivalence with the simulator, robustness,
baselines through Flower's strategies, own-data preprocessing, CLI. Deployments: test_flower_deploy.py."""
import csv
import importlib.util
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from flower_hooks import faulty_client_app
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedgca import methods, rundir
from fedgca.algorithms import method_class
from fedgca.cli.main import main as cli_main
from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.flower import owndata
from fedgca.flower.config import parse_run_config, to_run_config
from fedgca.flower.records import stacked_state_from_record, stacked_state_record
from fedgca.flower.simulation import simulate
from fedgca.flower.validation import decode_reply
from fedgca.protocol.gca import UploadError
from fedgca.simulation.runner import run

METRICS = ("accuracy", "auroc", "auprc")


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader((path / "metrics.csv").open()))


def _academic(**kw) -> RunConfig:
    """The federations these tests run: academic (4,424 rows), 3 clients, 2 rounds. The identities under test are
    code paths; a run on magic cost 2-4× as much."""
    return RunConfig(**{"dataset": "academic", "clients": 3, "rounds": 2, "recon_epochs": 1, "align_epochs": 1,
                        "seed": 100, **kw})


# ---------------------------------------------------------------------------- equivalence (acceptance)


def test_gca_flower_simulation_matches_simulator(tmp_path, data_dir):
    """Academic, 3 clients, 2 rounds, same config and seed: same client metrics, uploads and bytes."""
    cfg = _academic()
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    # the same functions on the same draws: metrics.csv is byte-identical
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    assert fl["uploads_per_round"] == sim["uploads_per_round"] == 393  # ⌊0.5 · 263⌋ + ⌊0.5 · 263⌋ + ⌊0.5 · 262⌋
    assert fl["bytes_up_per_round"] == sim["bytes_up_per_round"] == 4 * 393 * 16
    assert fl["bytes_down_per_round"] == sim["bytes_down_per_round"]
    assert fl["client_sizes"] == sim["client_sizes"]
    for p in ("final", "peak"):
        for m in METRICS:
            assert fl[p][m] == sim[p][m]
    # per-client, per-round metrics (the simulator keeps them in its checkpoint rows)
    ckpt = rundir.load_tensors(tmp_path / "sim" / "checkpoint.pt")
    sim_round = [r for r in ckpt["rows"] if r["phase"] == "round"]
    fl_rounds = [json.loads(line) for line in (tmp_path / "flower" / "rounds.jsonl").read_text().splitlines()]
    assert [r["took_part"] for r in fl_rounds] == [[0, 1, 2], [0, 1, 2]]
    assert [r["exchanges"] for r in fl_rounds] == [2, 2]  # the evaluation travels with the alignment reply
    comm = json.loads((tmp_path / "flower" / "comm.json").read_text())
    assert [c["participants"] for c in comm] == [[0, 1, 2]] * 2
    for r in sim_round:
        assert len(r["per_client"]["accuracy"]) == 3


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs fedgca[ray] (Flower's simulation extra)")
def test_ray_simulation_engine_matches_simulator(tmp_path, data_dir):
    """Flower's Ray engine, the in-process engine and the simulator: byte-identical metrics.csv (every
    process computes with one torch thread and one BLAS thread). The Ray engine's nodes, which Flower gives no
    node config, write their detectors and keep their state as the in-process engine's do."""
    cfg = _academic(k=10)
    simulate(cfg, tmp_path / "ray", engine="ray", data_dir=data_dir, reply_timeout=300)
    simulate(cfg, tmp_path / "inprocess", data_dir=data_dir, reply_timeout=120)
    run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    sim = (tmp_path / "sim" / "metrics.csv").read_bytes()
    assert (tmp_path / "ray" / "metrics.csv").read_bytes() == sim
    assert (tmp_path / "inprocess" / "metrics.csv").read_bytes() == sim
    for i in range(3):
        for f in ("model.pt", "detector.json"):
            mine = (tmp_path / "ray" / "clients" / f"client_{i:03d}" / f).read_bytes()
            assert mine == (tmp_path / "sim" / "clients" / f"client_{i:03d}" / f).read_bytes(), (i, f)
        # each node kept its client's state on its disk while the run lasted (its manifest lists what it wrote),
        # and deleted it once the client deployed
        assert (tmp_path / "ray" / "node-state" / f"client_{i:03d}" / "manifest.json").exists()
    assert not list((tmp_path / "ray" / "node-state").rglob("*.state"))


def test_partial_participation_samples_as_the_simulator(tmp_path, data_dir):
    from fedgca.simulation.federation import build_federation

    cfg = _academic(clients=4, participation=0.5, k=10)
    s = simulate(cfg, tmp_path, data_dir=data_dir, eval_recon_epochs=False)
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    expected = [[int(i) for i in torch.nonzero(fed.participants(r)).flatten()] for r in range(2)]
    assert [p["sampled"] for p in s["participation"]] == expected
    assert [p["took_part"] for p in s["participation"]] == expected
    assert all(len(p) == 2 for p in expected)


# ---------------------------------------------------------------------------- robustness


def test_bad_uploads_are_rejected_and_the_round_completes(tmp_path, data_dir, caplog):
    faults = {1: "nan-codes", 2: "wrong-shape", 3: "extra-rows", 4: "extra-array", 5: "crash", 6: "float64",
              7: "inf-codes"}
    cfg = _academic(clients=8, rounds=1, k=10)
    with caplog.at_level(logging.WARNING, logger="fedgca"):
        s = simulate(cfg, tmp_path, data_dir=data_dir, eval_recon_epochs=False, client_app=faulty_client_app(),
                     node_extra={i: {"fault": f} for i, f in faults.items()})
    p = s["participation"][0]
    assert p["sampled"] == list(range(8)) and p["took_part"] == [0]
    assert "NaN or inf" in p["rejected"]["1"] and "NaN or inf" in p["rejected"]["7"]
    assert "shape" in p["rejected"]["2"]
    assert "more than the" in p["rejected"]["3"]
    assert "exactly one array" in p["rejected"]["4"]
    assert "dtype float64" in p["rejected"]["6"]
    assert "fault injection: crash" in p["dropped"]["5"]
    comm = json.loads((tmp_path / "comm.json").read_text())[0]
    assert comm["evaluated"] == [0] and comm["accepted"] == {"train": [0], "align": [0]}
    assert comm["uploads"] == 49 and comm["bytes_up"] == 4 * 49 * 16  # ⌊0.5 · 99⌋
    assert 0 <= s["final"]["accuracy"] <= 1
    assert "rejected reply of client 1" in caplog.text and "upload contains NaN or inf" in caplog.text
    assert "dropping node" in caplog.text
    statuses = [json.loads(x).get("status") for x in (tmp_path / "messages.jsonl").read_text().splitlines()]
    assert statuses.count("rejected") == 6 and statuses.count("dropped") == 1


def test_silent_node_is_dropped_after_reply_timeout(tmp_path, data_dir):
    """A node that stops answering after round 1 is dropped from round 2; the rest finish it."""
    from fedgca.flower import client_app
    from fedgca.flower.inprocess import InProcessGrid, run_inprocess
    from fedgca.flower.server_app import make_server_app

    class DyingGrid(InProcessGrid):
        def push_messages(self, messages):
            messages = list(messages)
            if any(m.metadata.group_id == "2" for m in messages):
                self.down.add(1002)  # client 2's node goes silent before round 2
            return super().push_messages(messages)

    cfg = _academic(k=10)
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path), reply_timeout=1.0,
                                                eval_recon_epochs=False)), client_app.app, nodes,
                  grid_class=DyingGrid)
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert rounds[0]["took_part"] == [0, 1, 2]
    assert rounds[1]["took_part"] == [0, 1] and "no reply within 1 s" in rounds[1]["dropped"]["2"]
    assert rounds[1]["evaluated"] == [0, 1]


def test_restarted_node_rejoins_with_its_client_id(tmp_path, data_dir):
    """Client 2's node dies before round 2 (dropped there); a new node with client 2's config connects
    during round 2, rejoins as client 2 at the start of round 3 (fresh ClientApp state) and takes part."""
    from flwr.app import Context, RecordDict

    from fedgca.flower import client_app
    from fedgca.flower.inprocess import InProcessGrid, run_inprocess
    from fedgca.flower.server_app import make_server_app

    class RestartingGrid(InProcessGrid):
        def push_messages(self, messages):
            messages = list(messages)
            kinds = {(m.metadata.group_id, m.metadata.message_type) for m in messages}
            if ("2", "train") in kinds:
                self.down.add(1002)  # the node crashes
            if ("2", "train.align") in kinds and 1003 not in self.contexts:  # and is restarted: a new node id
                old = self.contexts[1002]
                self.contexts[1003] = Context(run_id=old.run_id, node_id=1003, node_config=dict(old.node_config),
                                              state=RecordDict(), run_config=dict(old.run_config))
            return super().push_messages(messages)

    cfg = _academic(k=10, rounds=3)
    nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir)} for i in range(3)]
    run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(tmp_path), reply_timeout=1.0,
                                                eval_recon_epochs=False)), client_app.app, nodes,
                  grid_class=RestartingGrid)
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert rounds[0]["took_part"] == [0, 1, 2] and rounds[0]["rejoined"] == {}
    assert rounds[1]["took_part"] == [0, 1] and "2" in rounds[1]["dropped"]
    assert rounds[2]["rejoined"] == {"2": 1003} and rounds[2]["took_part"] == [0, 1, 2]
    assert rounds[2]["evaluated"] == [0, 1, 2]


def check_codes(content, *, max_rows, latent_dim):
    """A GCA upload as the ServerApp takes it: decoded for its step, then checked by the method."""
    from fedgca.algorithms import method_for

    gca = method_for(_academic(rho=0.5), "tabular", [max_rows * 2])
    reply = gca.check(gca.steps[0], decode_reply(content, gca.steps[0]), 2 * max_rows, latent_dim)
    return reply.arrays["z"]


def test_gca_upload_must_be_exactly_one_float32_array():
    good = np.zeros((5, 16), dtype=np.float32)
    assert check_codes(RecordDict({"codes": ArrayRecord({"z": Array(good)})}), max_rows=5, latent_dim=16).shape == (5, 16)
    bad = [
        RecordDict({"codes": ArrayRecord({"z": Array(good)}), "metrics": MetricRecord({"n": 1})}),
        RecordDict({"codes": ArrayRecord({"z": Array(good), "w": Array(good)})}),
        RecordDict({"codes": ArrayRecord({"z": Array(np.zeros((6, 16), dtype=np.float32))})}),
        RecordDict({"codes": ArrayRecord({"z": Array(np.zeros((5, 16, 1), dtype=np.float32))})}),
        RecordDict({"codes": ArrayRecord({"z": Array(dtype="float32", shape=(5, 16), stype="numpy.ndarray",
                                                     data=b"garbage")})}),
        RecordDict({"config": ConfigRecord({"z": 1})}),
    ]
    for content in bad:
        with pytest.raises(UploadError):
            check_codes(content, max_rows=5, latent_dim=16)


# ---------------------------------------------------------------------------- baselines


@pytest.mark.parametrize("method", methods.names(flower=True))
def test_every_flower_method_matches_the_simulator(tmp_path, data_dir, method):
    """Every method the registry runs on Flower: the Flower apps and the simulator run the same method object
    (``fedgca.algorithms``) and write byte-identical metrics.csv — DP noise included; a record-level DP client
    does not release its training error, so that column alone differs there."""
    spec = methods.get(method)
    dp = {"val_fraction": 0.1, "threshold": "val-quantile", "target_epsilon": 50.0} if spec.record_dp else {}
    cfg = _academic(method=method, local_epochs=1, **dp)
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    if not spec.record_dp:
        assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    else:
        rows = [_rows(tmp_path / d) for d in ("flower", "sim")]
        assert len(rows[0]) == len(rows[1]) > 0
        for a, b in zip(*rows):
            assert {k: v for k, v in a.items() if k != "train_error"} == {k: v for k, v in b.items() if k != "train_error"}
            assert a["train_error"] == "nan"
        assert 49.5 <= sim["dp"]["epsilon"] <= 50.0
    for key in ("bytes_up_per_round", "bytes_down_per_round", "uploads_per_round", "client_sizes", "dp", "fedprox"):
        assert fl.get(key) == sim.get(key), key
    if spec.family == "parameter-sharing" and not method_class(method).steps[0].summed:
        assert sim["bytes_up_per_round"] == 4 * 3 * 46_758  # three models of 46,758 float32 parameters (22 inputs)
    if spec.client_term == "proximal":
        assert fl["fedprox"]["effective_coef"] == pytest.approx(1e-4)
    if spec.server_rule == "dpfedavg":
        assert fl["dp"]["epsilon"] > 0 and "not a certified" in fl["dp"]["label"]


def test_flower_strategies_compute_spec_rules():
    """Flower's FedAvg and server-side fixed clipping (σ = 0) against fedgca.protocol on the same updates."""
    from flwr.serverapp.strategy import (
        DifferentialPrivacyServerSideFixedClipping,
        FedAvg,
    )
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    from fedgca.protocol import dpfedavg, fedavg

    rng = np.random.default_rng(0)
    g = {"a": rng.normal(size=(4, 3)).astype(np.float32), "b": rng.normal(size=(3,)).astype(np.float32)}
    clients = [{k: v + rng.normal(scale=s, size=v.shape).astype(np.float32) for k, v in g.items()}
               for s in (0.1, 1.0, 3.0)]
    sizes = [10, 30, 60]
    contents = [RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in c.items()}),
                            "metrics": MetricRecord({"num-examples": n})}) for c, n in zip(clients, sizes)]
    flower_avg = aggregate_arrayrecords(contents, "num-examples")
    stacked = {k: torch.stack([torch.as_tensor(c[k]) for c in clients]) for k in g}
    ours = fedavg.aggregate({k: torch.as_tensor(v) for k, v in g.items()}, stacked, sizes)
    for k in g:
        np.testing.assert_allclose(flower_avg[k].numpy(), ours[k].numpy(), rtol=1e-6, atol=1e-6)

    class _Reply:  # what the DP wrapper reads from a reply
        def __init__(self, content):
            self.content = content

        def has_error(self):
            return False

    dp = DifferentialPrivacyServerSideFixedClipping(FedAvg(), noise_multiplier=0.0, clipping_norm=1.0,
                                                    num_sampled_clients=3)
    dp.current_arrays = ArrayRecord({k: Array(v) for k, v in g.items()})
    out, _ = dp.aggregate_train(1, [_Reply(c) for c in contents])
    ours_dp, _ = dpfedavg.aggregate({k: torch.as_tensor(v) for k, v in g.items()}, stacked, sizes, clip=1.0,
                                    sigma=0.0, generator=torch.Generator().manual_seed(0))
    for k in g:
        np.testing.assert_allclose(out[k].numpy(), ours_dp[k].numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- own data


MAGIC_COLS = ["fLength", "fWidth", "fSize", "fConc", "fConc1", "fAsym", "fM3Long", "fM3Trans", "fAlpha", "fDist"]


def _own_data(tmp_path, data_dir, n_nodes=3, rows=500):
    raw = pd.read_csv(Path(data_dir) / "magic" / "magic04.data", header=None, names=MAGIC_COLS + ["class"])
    raw = raw.sample(frac=1.0, random_state=0).reset_index(drop=True)
    schema = {"features": [{"name": c, "type": "numeric"} for c in MAGIC_COLS],
              "label": {"column": "class", "normal": ["g"], "anomaly": ["h"]}, "eval_fraction": 0.3}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    nodes = []
    for i in range(n_nodes):
        part = raw.iloc[i * rows:(i + 1) * rows]
        part.to_csv(tmp_path / f"node{i}.csv", index=False)
        nodes.append({"data-path": str(tmp_path / f"node{i}.csv"), "schema-path": str(tmp_path / "schema.json"),
                      "client-id": i})
    return raw, nodes


def test_own_data_preprocessing_equals_pooled_fit(tmp_path, data_dir):
    from fedgca.data.encoding import TabularPreprocessor, fit_from_stats, local_stats

    raw, nodes = _own_data(tmp_path, data_dir)
    schema = owndata.Schema.load(tmp_path / "schema.json")
    stats, frames = [], []
    for i, nc in enumerate(nodes):
        X, y = owndata.read_rows(nc["data-path"], schema)
        tr, ev = owndata.eval_split(len(X), schema.eval_fraction, 100, i)
        frames.append(X.iloc[tr])
        stats.append(local_stats(owndata.encode(X.iloc[tr], schema)))
        assert set(stats[-1]) == {"n", "mean", "m2"}  # all a node shares
    fed = fit_from_stats(schema, stats)
    pooled = TabularPreprocessor(schema.corr_threshold).fit(pd.concat(frames).reset_index(drop=True))
    assert fed.kept_columns_ == pooled.kept_columns_ and fed.dropped_columns_ == pooled.dropped_columns_
    np.testing.assert_allclose(fed.mean_, pooled.mean_, rtol=1e-10)
    np.testing.assert_allclose(fed.std_, pooled.std_, rtol=1e-10)


def test_own_data_schema_needs_category_lists(tmp_path):
    from fedgca.data.errors import DataError

    with pytest.raises(DataError, match="categories"):  # a federation's nodes need one shared encoding
        owndata.require_category_lists(owndata.Schema.from_dict({"features": [{"name": "c", "type": "categorical"}]}))
    s = owndata.Schema.from_dict({"features": ["x", {"name": "c", "type": "categorical", "categories": ["b", "a"]}]})
    (tmp_path / "rows.csv").write_text("x,c\n1.5,a\n2.5,z\n3.0,b\n")
    X, y = owndata.read_rows(tmp_path / "rows.csv", s)
    assert y is None
    np.testing.assert_array_equal(owndata.encode(X, s), [[1.5, 0], [2.5, 2], [3.0, 1]])  # unseen 'z' → 2
    (tmp_path / "bad.csv").write_text("x,c\n1.5,a\noops,b\n")
    with pytest.raises(DataError, match="line 3: column 'x'"):
        owndata.read_rows(tmp_path / "bad.csv", s)


def test_gca_on_own_csv_data(tmp_path, data_dir):
    from fedgca.flower import client_app
    from fedgca.flower.inprocess import run_inprocess
    from fedgca.flower.server_app import make_server_app

    _, nodes = _own_data(tmp_path, data_dir)
    cfg = RunConfig(dataset="magic", clients=3, rounds=1, recon_epochs=1, align_epochs=1, k=10, rho=0.25)
    out = tmp_path / "out"
    run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False)),
                  client_app.app, nodes)
    s = json.loads((out / "summary.json").read_text())
    assert s["client_sizes"] == [350, 350, 350] and s["uploads_per_round"] == 3 * 87
    assert 0 <= s["final"]["auroc"] <= 1
    pre = json.loads((out / "preprocessor.json").read_text())
    assert len(pre["kept_columns"]) == s["input_dim"]
    msgs = [json.loads(x) for x in (out / "messages.jsonl").read_text().splitlines()]
    stats_up = [m for m in msgs if m["phase"] == "query.stats" and m["direction"] == "up"]
    assert len(stats_up) == 3
    for m in stats_up:
        (rec,) = m["records"]
        shapes = {a["name"]: a["shape"] for a in rec["arrays"]}
        assert shapes == {"n": [1], "mean": [10], "m2": [10, 10]}  # aggregates only, no rows


# ---------------------------------------------------------------------------- config, state, CLI


def test_run_config_round_trip():
    cfg = RunConfig(dataset="magic", clients=3, k=20, rounds=7, weights="uniform", val_fraction=0.1).resolved()
    back, opts = parse_run_config(to_run_config(cfg, out_dir="/x", reply_timeout=5))
    assert back == cfg and opts.out_dir == "/x" and opts.reply_timeout == 5.0 and opts.min_nodes == 3
    with pytest.raises(ValueError, match="unknown run-config key"):
        parse_run_config({"dataset": "magic", "no-such-key": 1})


def test_client_state_record_round_trip():
    from fedgca.models import TabularAE
    from fedgca.training.stacked import StackedModels

    a = StackedModels([TabularAE(5)])
    a.optim.step_count["encoder.0.weight"] += 3
    a.optim.exp_avg["decoder.0.bias"] += 0.5
    b = StackedModels([TabularAE(5)])
    b.load_state_dict(stacked_state_from_record(stacked_state_record(a.state_dict())))
    sa, sb = a.state_dict(), b.state_dict()
    for k in sa["params"]:
        assert torch.equal(sa["params"][k], sb["params"][k])
        for part in ("step", "m", "v"):
            assert torch.equal(sa["optim"][part][k], sb["optim"][part][k])


def test_cli_app_dir_and_certs(tmp_path, capsys):
    import tomli
    from flwr.common.config import validate_config

    assert cli_main(["flower", "app-dir", str(tmp_path / "app"), "--dataset", "magic", "--clients", "3",
                     "--rounds", "2", "--superlink-host", "fl.example.org"]) == 0
    text = capsys.readouterr().out
    assert "flower-superlink" in text and "--ssl-certfile" in text and "--root-certificates" in text
    assert text.count("flower-supernode") == 3 and "partition-id=2 num-partitions=3" in text
    # each SuperNode in --isolation process, with fedgca's SuperExec on its Runtime API beside it
    nodes = [line for line in text.splitlines() if line.startswith("flower-supernode")]
    assert len(nodes) == 3 and all("--isolation process" in line for line in nodes)
    assert text.count("fedgca flower superexec --runtime-api-address 127.0.0.1:9094") == 3
    conf = tomli.loads((tmp_path / "app" / "pyproject.toml").read_text())
    ok, errors, _ = validate_config(conf, check_module=True, project_dir=tmp_path / "app")
    assert ok, errors
    assert conf["tool"]["flwr"]["app"]["config"]["k"] == 80
    assert cli_main(["flower", "certs", str(tmp_path / "certs")]) == 0
    assert (tmp_path / "certs" / "ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_cli_simulate(tmp_path, data_dir, capsys):
    assert cli_main(["flower", "simulate", "--dataset", "magic", "--clients", "2", "--rounds", "1", "--k", "10",
                     "--recon-epochs", "1", "--align-epochs", "1", "--data-dir", str(data_dir),
                     "--out", str(tmp_path)]) == 0
    brief = json.loads(capsys.readouterr().out)
    assert brief["clients"] == 2 and 0 <= brief["final"]["accuracy"] <= 1
    assert (tmp_path / "summary.json").exists() and (tmp_path / "messages.jsonl").exists()


def test_client_app_imports_neither_scikit_learn_nor_scipy_stats():
    """A ClientApp process starts per message: it must not pay for the server's clustering stack."""
    import subprocess
    import sys

    code = ("import sys, fedgca.flower.client_app; "
            "print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_align_evaluations_of_the_ablation_client_alone_match_the_simulator_and_the_all_client_run(tmp_path,
                                                                                                 data_dir):
    """--eval-align-clients client0: after each alignment epoch only client 0 is evaluated, on both drivers
    (metrics.csv byte-identical); its figures are exactly client 0's in the all-client run, whose other rows
    (training draws no randomness from evaluations) are the same too."""
    one = _academic(eval_align_epochs=True, eval_align_clients="client0", align_epochs=2)
    every = _academic(eval_align_epochs=True, align_epochs=2)
    simulate(one, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    run(one, tmp_path / "sim", data_dir=data_dir, progress=False)
    run(every, tmp_path / "all", data_dir=data_dir, progress=False)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()
    rows_one, rows_all = (rundir.load_tensors(tmp_path / d / "checkpoint.pt")["rows"] for d in ("sim", "all"))
    assert [(r["round"], r["phase"], r["epoch"]) for r in rows_one] == [(r["round"], r["phase"], r["epoch"])
                                                                         for r in rows_all]
    for a, b in zip(rows_one, rows_all):
        if a["phase"] == "align":
            assert a["per_client"]["client_id"] == [0]
            assert all(a["per_client"][m] == b["per_client"][m][:1] for m in METRICS)
            assert a["accuracy"] == b["per_client"]["accuracy"][0]
        else:
            assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # val_error is NaN: no split
    clients_csv = list(csv.DictReader((tmp_path / "sim" / "metrics_clients.csv").open(newline="")))
    assert {r["client"] for r in clients_csv if r["phase"] == "align"} == {"0"}
    with pytest.raises(ValueError, match="add --eval-align-epochs"):
        RunConfig("magic", eval_align_clients="client0").resolved()


def test_client_app_computes_with_the_nodes_torch_threads():
    """Every message's process computes with node config `torch-threads` (default 1, as `fedgca run`)."""
    import torch
    from flwr.app import Context, RecordDict

    from fedgca.flower.client_app import torch_threads

    before = torch.get_num_threads()
    seen = []
    try:
        for nc, want in (({}, 1), ({"torch-threads": 2}, 2)):
            ctx = Context(run_id=1, node_id=1, node_config=nc, state=RecordDict(), run_config={})
            assert torch_threads("msg", ctx, lambda m, c: seen.append(torch.get_num_threads()) or m) == "msg"
            assert seen[-1] == want
        for bad in (0, -1, 1.5, "2", True):
            ctx = Context(run_id=1, node_id=1, node_config={"torch-threads": bad}, state=RecordDict(), run_config={})
            with pytest.raises(ValueError, match="torch-threads must be an integer"):
                torch_threads("msg", ctx, lambda m, c: m)
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------- a node's state on its disk


def _wiping_grid(client: int, before_round: str):
    """A grid whose node of ``client`` loses its ClientApp state (a SuperNode restarted with Flower's in-memory
    state gone) just before the first message of round ``before_round``."""
    from flwr.app import Context

    from fedgca.flower.inprocess import InProcessGrid

    class WipingGrid(InProcessGrid):
        wiped = False

        def push_messages(self, messages):
            messages = list(messages)
            if not self.wiped and any(m.metadata.group_id == before_round for m in messages):
                old = self.contexts[1000 + client]
                self.contexts[old.node_id] = Context(run_id=old.run_id, node_id=old.node_id,
                                                     node_config=dict(old.node_config), state=RecordDict(),
                                                     run_config=dict(old.run_config))
                self.wiped = True
            return super().push_messages(messages)

    return WipingGrid


@pytest.mark.parametrize("method", ["gca", "fedprox"])
def test_a_restarted_node_with_a_state_dir_continues_its_client(tmp_path, data_dir, method):
    """Client 1's node loses its ClientApp state before round 2. With ``state-dir`` it restores it from its disk
    and the run's metrics equal an uninterrupted run's byte for byte; without, the client starts again from its
    initial model (GCA) or a fresh Adam (FedProx) and they differ — what the state file saves. Once the run's
    detectors are deployed, no state file is left."""
    from fedgca.flower import client_app
    from fedgca.flower.inprocess import InProcessGrid, run_inprocess
    from fedgca.flower.server_app import make_server_app

    cfg = _academic(method=method, k=10, local_epochs=1)

    def run(name, grid, state_dir):
        nodes = [{"partition-id": i, "num-partitions": 3, "data-dir": str(data_dir),
                  **({"state-dir": str(tmp_path / name / "state")} if state_dir else {})} for i in range(3)]
        out = tmp_path / name / "run"
        run_inprocess(make_server_app(to_run_config(cfg, out_dir=str(out), eval_recon_epochs=False)),
                      client_app.app, nodes, grid_class=grid)
        return (out / "metrics.csv").read_text(), tmp_path / name / "state"

    whole, _ = run("whole", InProcessGrid, True)
    restored, state = run("restored", _wiping_grid(1, "2"), True)
    lost, _ = run("lost", _wiping_grid(1, "2"), False)
    assert restored == whole and lost != whole
    assert sorted(p.name for p in state.iterdir()) == ["client_000", "client_001", "client_002"]
    assert not list(state.rglob("*.state"))  # deleted after query.deploy: the run is over for every client


def _state_msg(group_id: str, run: str | None = "run-a", resume: int = -1, kind: str = "train"):
    """A stand-in message: what the mod reads of one (a real Message needs Flower's runtime around it)."""
    from types import SimpleNamespace

    config = {"config": ConfigRecord({"run-name": run, "resume-round": resume})} if run else {}
    return SimpleNamespace(metadata=SimpleNamespace(message_type=kind, group_id=group_id),
                           content=RecordDict(config))


def test_a_damaged_state_file_is_one_warning_and_a_fresh_start(tmp_path, caplog):
    """A state file that no longer matches its manifest, or is not a saved state at all, is one warning line: the
    client starts from an empty state (as without ``state-dir``). SecAgg+'s round secrets are never written."""
    from flwr.app import Context

    from fedgca.flower import nodestate

    nc = {"partition-id": 4, "state-dir": str(tmp_path)}
    state = RecordDict({"fedgca.model": ArrayRecord({"w": Array(np.arange(6, dtype=np.float32))}),
                        "secaggplus_state": ConfigRecord({"sk": b"secret"})})
    seen = []

    def handler(msg, context):
        seen.append(sorted(k for k in context.state.keys() if k != nodestate.RUN))
        return msg

    msg = _state_msg("2")
    empty = Context(run_id=9, node_id=7, node_config=nc, state=RecordDict(), run_config={})
    nodestate.persist_state(_state_msg("0"), empty, handler)  # a registration query: nothing kept, nothing written
    assert not list(tmp_path.rglob("*.state"))
    nodestate.persist_state(msg, Context(run_id=9, node_id=7, node_config=nc, state=state, run_config={}), handler)
    directory, name = tmp_path / "client_004", "run-a.r1.state"  # keyed by the fedgca run and the round
    assert b"secret" not in (directory / name).read_bytes()
    fresh = Context(run_id=10, node_id=8, node_config=nc, state=RecordDict(), run_config={})  # another Flower run
    nodestate.persist_state(msg, fresh, handler)
    assert seen[-1] == ["fedgca.model"]
    np.testing.assert_array_equal(fresh.state.array_records["fedgca.model"]["w"].numpy(), np.arange(6))
    for damage in (lambda p: p.write_bytes(p.read_bytes()[:-7]),  # truncated
                   lambda p: ((directory / "manifest.json").unlink(), p.write_bytes(b"not a state"))):  # foreign
        damage(directory / name)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fedgca"):
            nodestate.persist_state(msg, Context(run_id=9, node_id=8, node_config=nc, state=RecordDict(),
                                                 run_config={}), handler)
        assert seen[-1] == [] and "starts again from its initial state" in caplog.text
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_a_resumed_run_restores_the_round_its_server_completed_and_old_runs_are_pruned(tmp_path):
    """A node keeps its last two rounds' states; a resumed run (its server's checkpoint completed round 1) restores
    round 1's, not round 2's, which the server plays again. Files of other runs not written for ``state-ttl-days``
    are deleted when the node saves; a run's own files go after its deploy query."""
    import os
    import time

    from flwr.app import Context

    from fedgca.flower import nodestate

    nc = {"partition-id": 0, "state-dir": str(tmp_path), "state-ttl-days": 7}

    def handler_setting(value):
        def handler(msg, context):
            context.state["fedgca.model"] = ArrayRecord({"w": Array(np.full(2, value, dtype=np.float32))})
            return msg
        return handler

    context = Context(run_id=1, node_id=1, node_config=nc, state=RecordDict(), run_config={})
    for r in range(4):  # rounds 0..3 (group ids 1..4)
        nodestate.persist_state(_state_msg(str(r + 1)), context, handler_setting(float(r)))
    directory = tmp_path / "client_000"
    assert sorted(p.name for p in directory.glob("*.state")) == ["run-a.r2.state", "run-a.r3.state"]
    got = []

    def read(msg, ctx):
        got.append(float(ctx.state.array_records["fedgca.model"]["w"].numpy()[0]))
        return msg

    nodestate.persist_state(_state_msg("0", resume=2), Context(run_id=2, node_id=5, node_config=nc,
                                                               state=RecordDict(), run_config={}), read)
    nodestate.persist_state(_state_msg("0", resume=-1), Context(run_id=3, node_id=5, node_config=nc,
                                                                state=RecordDict(), run_config={}), read)
    assert got == [2.0, 3.0]  # resumed after round 3 (index 2): round 2's state; a restarted node: its latest
    old = directory / "run-old.r5.state"
    old.write_bytes(b"x")
    recent = directory / "run-recent.r5.state"
    recent.write_bytes(b"y")
    os.utime(old, (time.time() - 8 * 86400,) * 2)
    nodestate.persist_state(_state_msg("5"), context, handler_setting(4.0))
    assert not old.exists() and recent.exists()
    nodestate.persist_state(_state_msg("6", kind="query.deploy"), context, handler_setting(5.0))
    assert sorted(p.name for p in directory.glob("*.state")) == ["run-recent.r5.state"]
