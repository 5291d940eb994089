"""The saved per-client detector: PyOD's conventions, and the same τ as the evaluation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.detector import (
    AnomalyDetector,
    client_detectors,
    load_client_detector,
    save_client_detectors,
)
from fedgca.evaluation.metrics import evaluate_clients
from fedgca.models import init_model
from fedgca.simulation.federation import build_federation


def test_saved_threshold_equals_the_evaluations(tmp_path, data_dir):
    cfg = RunConfig(dataset="academic", clients=4, rounds=1)
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    save_client_detectors(tmp_path, client_detectors(fed, fed.clients))
    res = evaluate_clients(fed.clients, fed.shards, fed.test_x, fed.dataset.test_y, cfg.resolved().quantile)
    for i in range(4):
        det = AnomalyDetector.load(tmp_path / "clients" / f"client_{i:03d}")
        assert det.threshold_ == res["thresholds"][i]  # exactly: one rule (evaluation.threshold.quantile_threshold)
        assert det.contamination == pytest.approx(0.25)


def test_load_client_detector_checks_the_manifest(tmp_path, data_dir):
    from fedgca import rundir

    cfg = RunConfig(dataset="academic", clients=2, rounds=1)
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    rundir.record(tmp_path, *save_client_detectors(tmp_path, client_detectors(fed, fed.clients)))
    assert load_client_detector(tmp_path, 1).threshold_ is not None
    model = tmp_path / "clients" / "client_001" / "model.pt"
    model.write_bytes(model.read_bytes()[:-10])
    with pytest.raises(rundir.RunFileError, match="truncated"):
        load_client_detector(tmp_path, 1)


def test_a_detector_saved_alone_is_checked_against_its_own_manifest(tmp_path):
    """A detector that travels without its run (a Flower node's, one saved through the API) carries its own
    manifest: an edited threshold or a truncated model is refused with one line, not scored."""
    from fedgca import rundir

    rng = np.random.default_rng(0)
    det = AnomalyDetector(init_model(0, (7,), 0), contamination=0.25, meta={"input_shape": [7]})
    det.fit(rng.normal(size=(100, 7)).astype(np.float32))
    det.save(tmp_path)
    assert AnomalyDetector.load(tmp_path).threshold_ == det.threshold_
    doc = tmp_path / "detector.json"
    doc.write_text(doc.read_text().replace('"threshold": ', '"threshold": 1'))
    with pytest.raises(rundir.RunFileError, match="detector.json: modified"):
        AnomalyDetector.load(tmp_path)


def test_follows_pyod_conventions():
    """Against PyOD's own BaseDetector: threshold_, labels_, predict and predict_proba('linear')."""
    pyod_base = pytest.importorskip("pyod.models.base")

    model = init_model(0, (7,), 0)
    rng = np.random.default_rng(0)
    train, test = rng.normal(size=(300, 7)).astype(np.float32), rng.normal(size=(50, 7)).astype(np.float32) * 2
    ours = AnomalyDetector(model, contamination=0.25).fit(train)

    class Reference(pyod_base.BaseDetector):
        def __init__(self, contamination=0.1):
            super().__init__(contamination=contamination)

        def fit(self, X, y=None):
            self._set_n_classes(y)  # what PyOD's own detectors do in fit
            self.decision_scores_ = self.decision_function(X)
            self._process_decision_scores()
            return self

        def decision_function(self, X):
            return ours.decision_function(X)

    ref = Reference(contamination=0.25).fit(train)
    assert ours.threshold_ == pytest.approx(ref.threshold_, rel=1e-12)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_array_equal(ours.decision_scores_, ref.decision_scores_)
    np.testing.assert_array_equal(ours.predict(test), ref.predict(test))
    np.testing.assert_allclose(ours.predict_proba(test), ref.predict_proba(test, method="linear"), atol=1e-6)
    assert ours.labels_.mean() == pytest.approx(0.25, abs=1 / 300)


def test_contamination_is_validated():
    with pytest.raises(ValueError, match="contamination"):
        AnomalyDetector(torch.nn.Identity(), contamination=1.5)
