"""--selection client-* (issue #47): each client deploys the untrained model or a round's, chosen by a label-free
signal of its validation rows. The generators are deterministic and read only the rows they are given; no test
row or label reaches a choice; the untrained model is deployable; the per-client choice is what the saved
detectors (``fedgca score`` / ``predict``) use. On Flower the same choice, records and detectors (written by each
node), and under the default rule the detectors of the federation's round."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedgca import api, seeding
from fedgca.detector import load_client_detector
from fedgca.evaluation import candidates as selection_module
from fedgca.evaluation import signals
from fedgca.models import init_model

WBC = "adbench/42_WBC.npz"  # 2 clients, ~1 s a run


@pytest.mark.parametrize("kind", signals.GENERATORS)
def test_generators_are_deterministic_and_read_only_their_rows(kind):
    normals = np.random.default_rng(0).standard_normal((37, 5))
    a = signals.synthetic_anomalies(normals, kind, seeding.rng(100, "synthetic-anomalies", 0))
    b = signals.synthetic_anomalies(normals.copy(), kind, seeding.rng(100, "synthetic-anomalies", 0))
    assert a.shape == (200, 5) and np.array_equal(a, b) and np.isfinite(a).all()
    if kind == "outside":  # inside the widened box of the given rows, and so never beyond it
        span = normals.max(0) - normals.min(0)
        assert (a >= normals.min(0) - span / 2).all() and (a <= normals.max(0) + span / 2).all()
    if kind == "shuffle":  # every value of a column is one of that column's given values
        assert all(np.isin(a[:, j], normals[:, j]).all() for j in range(5))


def test_choose_per_client_or_one_for_a_shared_model():
    history = np.array([[1.0, 5.0], [2.0, 1.0], [np.nan, 0.5]])  # [candidate, client], lower is better
    assert signals.choose(history, "val-error", shared=False).tolist() == [0, 2]
    assert signals.choose(history, "val-error", shared=True).tolist() == [1, 1]  # a NaN mean never wins
    assert signals.choose(-history, "proxy-noise", shared=False).tolist() == [0, 2]  # higher is better
    assert signals.choose(np.array([[1.0], [1.0]]), "val-error", shared=False).tolist() == [0]  # first on ties
    with pytest.raises(ValueError, match="choose from"):
        signals.signal_of("client-proxy-nonsense")


def test_a_client_selection_needs_a_validation_split(data_dir, tmp_path):
    with pytest.raises(ValueError, match="--selection client-val-error reads each client's validation rows"):
        api.run(data_dir / WBC, "single", out=tmp_path / "r", rounds=1, val_fraction=0.0,
                selection="client-val-error")


def test_no_test_label_or_test_row_reaches_the_choice(wbc_federation):
    """The same run twice, the second time with the test labels permuted and the test rows replaced: every signal
    value and every choice is the same to the last bit; the test AUROC moved."""
    from fedgca.simulation.driver import Simulation

    seen = []
    for tamper in (False, True):
        _, fed = wbc_federation({"method": "single", "seed": 100, "rounds": 2, "selection": "client-proxy-mixed"},
                                tamper)
        sim = Simulation(fed)
        for _ in sim.rounds():
            pass
        seen.append((sim.selection.history, sim.selection.chosen(), sim.rows[-1]["auroc"]))
    assert seen[0][0] == seen[1][0] and seen[0][1] == seen[1][1]
    assert len(seen[0][0]) == 3  # the untrained models and two rounds'
    assert seen[0][2] != seen[1][2]


def _forced(monkeypatch, per_candidate):
    """Make the signal rate the candidates as ``per_candidate[j]`` (one value per client id; a Flower client's
    one-model stack reads its own)."""
    def measure(self):
        return [per_candidate[len(self.history)][cid] for cid in self.client_ids]
    monkeypatch.setattr(selection_module.ClientSelection, "measure", measure)


def test_the_untrained_model_and_a_per_client_choice_are_what_is_deployed(data_dir, tmp_path, monkeypatch):
    """Client 0 chooses the untrained model, client 1 round 2 of 3: the saved detectors (what ``fedgca score``
    and ``predict`` load) score as those models do; summary.json records the choice and its values."""
    _forced(monkeypatch, [[0.0, 9.0], [5.0, 5.0], [6.0, 1.0], [7.0, 2.0]])  # val-error: lower is better
    run = api.run(data_dir / WBC, "single", out=tmp_path / "chosen", rounds=3, seed=100,
                  selection="client-val-error")
    summary = json.loads((run.out / "summary.json").read_text())
    assert summary["selection"]["client_rounds"] == [0, 2] and summary["selection"]["untrained_share"] == 0.5
    assert summary["selection"]["values"][2] == [6.0, 1.0]
    assert summary["selected"]["client_rounds"] == [0, 2]
    monkeypatch.undo()
    # the reference models: the untrained one, and a 2-round run's final model (the same seed's trajectory)
    ref = api.run(data_dir / WBC, "single", out=tmp_path / "two", rounds=2, seed=100)
    assert load_client_detector(ref.out, 1).meta["round"] == 2  # its validation rule deployed its last round too
    det0, det1 = load_client_detector(run.out, 0), load_client_detector(run.out, 1)
    assert det0.meta["round"] == 0 and det1.meta["round"] == 2
    rows = np.random.default_rng(0).standard_normal((64, *det0.input_shape)).astype(np.float32)
    untrained = init_model(100, det0.input_shape, 0)
    with torch.no_grad():
        t = torch.as_tensor(rows)
        want0 = ((t - untrained(t)) ** 2).sum(dim=1).numpy()
    np.testing.assert_allclose(det0.decision_function(rows), want0, rtol=1e-5)
    np.testing.assert_array_equal(det1.decision_function(rows), load_client_detector(ref.out, 1).decision_function(rows))
    assert det0.predict(rows).shape == (64,)  # the untrained detector has its own threshold and flags rows
    assert np.isfinite(det0.threshold_) and det0.threshold_ != det1.threshold_


@pytest.mark.parametrize("method,selection", [("gca", "client-proxy-noise"), ("fedavg", "client-proxy-noise"),
                                              ("single", "ensemble-rounds")])
def test_a_killed_run_resumes_to_the_same_choice(data_dir, tmp_path, kill_after_round, method, selection):
    """Every candidate's values and each client's best model so far (an ensemble: every member) are in the
    checkpoint (a shared model: one choice for the federation)."""
    options = dict(rounds=3, seed=100, selection=selection)
    whole = api.run(data_dir / WBC, method, out=tmp_path / "whole", **options)
    kill_after_round(lambda: api.run(data_dir / WBC, method, out=tmp_path / "resumed", **options), 1)
    resumed = api.run(data_dir / WBC, method, out=tmp_path / "resumed", resume=True, **options)
    assert resumed.summary["selection"] == whole.summary["selection"]
    assert resumed.summary["selected"] == whole.summary["selected"]
    if method == "fedavg":
        assert len(set(whole.summary["selection"]["client_rounds"])) == 1
    for i in range(2):
        rows = np.random.default_rng(i).standard_normal((16, *load_client_detector(whole.out, i).input_shape))
        np.testing.assert_array_equal(load_client_detector(whole.out, i).decision_function(rows),
                                      load_client_detector(resumed.out, i).decision_function(rows))


@pytest.mark.parametrize("method,selection,forced", [
    ("gca", "client-val-error", [[0.0, 9.0, 9.0], [5.0, 5.0, 1.0], [6.0, 1.0, 7.0]]),  # clients: rounds 0, 2, 1
    ("fedavg", "client-proxy-noise", [[0.1, 0.1, 0.1], [0.9, 0.8, 0.9], [0.5, 0.5, 0.5]]),  # shared: round 1 of 2
    ("single", "ensemble-rounds", None),
])
def test_flower_deploys_what_the_simulator_deploys(data_dir, tmp_path, monkeypatch, method, selection, forced):
    """--selection on Flower (fedgca.flower.choice): candidate 0 by query.candidate, one value per round in each
    evaluation, the shared model kept by the server, query.deploy at the end. summary.json's ``selected`` and
    ``selection`` equal the simulator's to the last digit, and each node's detector (``detector-dir``) scores as the
    simulator's saved detector of that client."""
    from fedgca.config import RunConfig
    from fedgca.flower.simulation import simulate
    from fedgca.simulation.runner import run

    if forced is not None:
        _forced(monkeypatch, forced)
    cfg = RunConfig(dataset="academic", method=method, clients=3, rounds=2, recon_epochs=1, align_epochs=1,
                    local_epochs=1, seed=100, val_fraction=0.1, selection=selection)
    nodes = tmp_path / "flower"  # fedgca flower simulate: each node's detector-dir is the run's directory
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    assert fl["selected"] == sim["selected"] and fl["selection"] == sim["selection"]
    if forced is not None:
        want = [0, 2, 1] if method == "gca" else [1, 1, 1]
        assert fl["selection"]["client_rounds"] == want
    for i in range(3):
        node, saved = (load_client_detector(nodes, i), load_client_detector(tmp_path / "sim", i))
        rows = np.random.default_rng(i).standard_normal((32, *saved.input_shape)).astype(np.float32)
        assert node.meta["round"] == saved.meta["round"] and node.threshold_ == saved.threshold_
        assert node.preprocessor.to_dict() == saved.preprocessor.to_dict()  # raw records read the same way
        np.testing.assert_array_equal(node.decision_function(rows), saved.decision_function(rows))


@pytest.mark.parametrize("method,options", [
    # per-client models: each node keeps the federation's round (here round 2 of 3, kept through the last)
    ("gca", {"dataset": "academic", "lr": 0.03, "val_fraction": 0.1, "rounds": 3}),
    ("fedavg", {"dataset": "academic", "lr": 0.1, "val_fraction": 0.1, "rounds": 3}),  # shared: the server keeps it
    ("single", {"dataset": "magic", "val_fraction": 0.0, "rounds": 2}),  # no validation split: the final round
])
def test_flower_nodes_write_the_detectors_the_simulator_saves(data_dir, tmp_path, method, options):
    """The default rule on Flower: every node writes the detector of the round the federation selected (the
    summary's ``selected``) under the run's directory, as the simulator saves it: the same round, threshold,
    preprocessing and scores."""
    from fedgca.config import RunConfig
    from fedgca.flower.simulation import simulate
    from fedgca.simulation.runner import run

    cfg = RunConfig(method=method, clients=3, recon_epochs=1, align_epochs=1, local_epochs=1, seed=100, **options)
    fl = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    sim = run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    assert fl["selected"] == sim["selected"]
    rounds = set()
    for i in range(3):
        node, saved = load_client_detector(tmp_path / "flower", i), load_client_detector(tmp_path / "sim", i)
        assert node.meta["round"] == saved.meta["round"] and node.threshold_ == saved.threshold_
        assert node.preprocessor.to_dict() == saved.preprocessor.to_dict()
        rows = np.random.default_rng(i).standard_normal((32, *saved.input_shape)).astype(np.float32)
        np.testing.assert_array_equal(node.decision_function(rows), saved.decision_function(rows))
        rounds.add(node.meta["round"])
    assert rounds == {sim["selected"]["round"]} == {({"gca": 2, "fedavg": 1}).get(method, 2)}
    # a node's detector carries its own manifest (the run's is the server's): an edited file is refused
    from fedgca import rundir
    from fedgca.detector import client_dir

    doc = client_dir(tmp_path / "flower", 2) / "detector.json"
    doc.write_text(doc.read_text().replace('"quantile": ', '"quantile": 0'))
    with pytest.raises(rundir.RunFileError, match="modified"):
        load_client_detector(tmp_path / "flower", 2)


def test_a_flower_client_whose_rounds_were_rejected_deploys_its_untrained_model(data_dir, tmp_path):
    """A GCA client whose uploads are refused every round (NaN codes) is never evaluated after round 0: its later
    candidates count as NaN and it deploys its untrained model; the others choose as usual."""
    from flower_hooks import faulty_client_app

    from fedgca.config import RunConfig
    from fedgca.flower.simulation import simulate

    cfg = RunConfig(dataset="magic", method="gca", clients=3, rounds=2, recon_epochs=1, align_epochs=1, seed=100,
                    val_fraction=0.1, selection="client-val-error")
    s = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120, client_app=faulty_client_app(),
                 node_extra={2: {"fault": "nan-codes"}})
    values = np.array(s["selection"]["values"], dtype=float)  # [candidate][client]
    assert values.shape == (3, 3) and np.isnan(values[1:, 2]).all() and np.isfinite(values[:, :2]).all()
    assert s["selection"]["client_rounds"][2] == 0 and s["selection"]["client_rounds"][:2] == [2, 2]
    assert np.isfinite(s["selected"]["per_client"]["auroc"]).all()


def test_an_ensemble_of_rounds_is_what_is_deployed_and_reported(data_dir, tmp_path):
    """--selection ensemble-rounds: each client's detector holds its R + 1 models (the untrained one first), scores
    the standardised mean of their reconstruction errors, survives save and load, and summary.json's selected
    metrics are those of the saved detectors on the test rows."""
    from fedgca.data.source import open_source
    from fedgca.evaluation.metrics import auroc_rows
    from fedgca.evaluation.signals import standardisation

    run = api.run(data_dir / WBC, "gca", out=tmp_path / "ens", rounds=2, seed=100, selection="ensemble-rounds")
    det = load_client_detector(run.out, 1)
    assert len(det.members) == 3 and run.summary["selection"]["members"] == 3
    untrained = init_model(100, det.input_shape, 1)
    for a, b in zip(det.members[0].state_dict().values(), untrained.state_dict().values()):
        assert torch.equal(a, b)
    rows = np.random.default_rng(2).standard_normal((40, *det.input_shape)).astype(np.float32)
    by_hand = np.mean([(((torch.as_tensor(rows) - m(torch.as_tensor(rows))) ** 2).sum(1).detach().numpy() - mu) / sd
                       for m, (mu, sd) in zip(det.members, det.standardise)], axis=0)
    np.testing.assert_allclose(det.decision_function(rows), by_hand, rtol=1e-4, atol=1e-5)
    assert det.standardise[0] == tuple(run.summary["selection"]["standardise"][0][1])
    mean, std = standardisation(np.array([1.0, 3.0]))
    assert (mean, std) == (2.0, 1.0)
    data = open_source(data_dir / WBC).load(100)
    aurocs = [auroc_rows(load_client_detector(run.out, i).decision_function(data.test_x)[None, :],
                         np.asarray(data.test_y).astype(bool))[0] for i in range(2)]
    assert run.summary["selected"]["auroc"] == pytest.approx(float(np.mean(aurocs)), abs=1e-9)
