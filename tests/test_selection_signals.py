"""The signals study's script (scripts/selection_signals.py, issue #47 item 2): no test row or label reaches a
signal it measures, and its regret table picks per client or per federation. (The generators themselves:
tests/test_selection.py.)"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import selection_signals as sig  # noqa: E402


def test_no_test_label_or_test_row_reaches_a_signal(wbc_federation):
    """The same run measured twice, the second time with the test labels permuted and the test rows replaced by
    noise: every signal is the same to the last bit; only the oracle moved."""
    from fedgca.simulation.driver import Simulation

    measured = []
    for tamper in (False, True):
        cfg, fed = wbc_federation({"method": "single", "seed": 100, "rounds": 2}, tamper)
        method = Simulation(fed)
        rows = [sig._measure(fed, method, cfg.seed, 0)]
        method.run_round(0, lambda phase, epoch: None)
        rows.append(sig._measure(fed, method, cfg.seed, 1))
        measured.append(rows)
    for clean, tampered in zip(*measured):
        for s in sig.SIGNALS:
            if s != "last":
                assert clean[s] == tampered[s], s
        assert clean["test_auroc"] != tampered["test_auroc"]


def test_regret_picks_per_client_or_per_federation():
    """Per-client models: each client its own best round; a shared model: one round for all, by the mean."""
    rounds = [{"round": 0, "val_error": [1.0, 5.0], "test_auroc": [0.6, 0.9]},
              {"round": 1, "val_error": [2.0, 1.0], "test_auroc": [0.8, 0.7]}]
    own = {"shared_model": False, "rounds": rounds}
    assert sig.picks(own, "val_error") == [0, 1] and sig.picks(own, "last") == [1, 1]
    regret, round0, deployed = sig.run_regret(own, "val_error")
    assert regret == pytest.approx(100 * ((0.8 - 0.6) + (0.9 - 0.7)) / 2) and round0 == 0.5
    assert deployed == pytest.approx(100 * (0.6 + 0.7) / 2)
    shared = {"shared_model": True, "rounds": rounds}
    assert sig.picks(shared, "val_error") == [1, 1]  # mean 1.5 < 3.0
