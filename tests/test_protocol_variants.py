"""The parameter-sharing protocol variants (--optimizer-state, --baseline-eval) change only what they name."""
from __future__ import annotations

import csv

import pytest
import torch

from fedgca import rundir, seeding
from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.evaluation.metrics import evaluate_clients
from fedgca.models import init_model
from fedgca.protocol import fedavg
from fedgca.simulation.federation import build_federation
from fedgca.simulation.runner import run
from fedgca.training.reference import ReferenceClient
from fedgca.training.stacked import StackedModels

TINY = dict(dataset="academic", method="fedavg", clients=3, rounds=2, local_epochs=2, seed=100)


def _global_after(tmp_path, data_dir, **kw) -> dict:
    run(RunConfig(**{**TINY, **kw}), tmp_path, data_dir=data_dir, progress=False)
    return rundir.load_tensors(tmp_path / "checkpoint.pt")["method"]["global"]


def _reference_fedavg(data_dir, reset: bool) -> dict:
    """Plain per-client loops: torch.optim.Adam per client, fresh each round when ``reset``."""
    cfg = RunConfig(**TINY).resolved()
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    shape, sizes = fed.dataset.input_shape, fed.shards.sizes
    global_params = {k: v.detach().clone() for k, v in init_model(cfg.seed, shape, 0).state_dict().items()}
    clients = [ReferenceClient(init_model(cfg.seed, shape, i), fed.shards.client(i).numpy(), i) for i in range(3)]
    for r in range(cfg.rounds):
        for c in clients:
            c.model.load_state_dict(global_params)
            if reset:
                c.optim = torch.optim.Adam(c.model.parameters(), lr=cfg.lr)
                c.sched = torch.optim.lr_scheduler.StepLR(c.optim, cfg.lr_step, cfg.lr_gamma)
            for e in range(cfg.local_epochs):
                c.epoch(seeding.rng(cfg.seed, "local", r, e, c.cid), cfg.batch_size, c.recon_per_row)
        stacked = {k: torch.stack([c.model.state_dict()[k].detach() for c in clients]) for k in global_params}
        global_params = fedavg.aggregate(global_params, stacked, sizes)
    return global_params


@pytest.mark.parametrize("state", ["keep", "reset"])
def test_optimizer_state_matches_per_client_torch_adam(tmp_path, data_dir, state):
    ours = _global_after(tmp_path / state, data_dir, optimizer_state=state)
    same = _reference_fedavg(data_dir, reset=state == "reset")
    other = _reference_fedavg(data_dir, reset=state != "reset")
    gap_same = max(float((ours[k] - same[k]).abs().max()) for k in same)
    gap_other = max(float((ours[k] - other[k]).abs().max()) for k in same)
    assert gap_same < 1e-5  # the stacked engine vs per-client loops: float32 rounding only
    assert gap_other > 100 * max(gap_same, 1e-7)  # and the variant really changes the training


def test_baseline_eval_local_scores_the_pre_aggregation_models(tmp_path, data_dir):
    cfg = RunConfig(**{**TINY, "rounds": 1, "baseline_eval": "local"})
    s = run(cfg, tmp_path, data_dir=data_dir, progress=False)
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [(r["phase"], r["paper"]) for r in rows] == [("local", "1"), ("round", "0")]
    # the local row is the evaluation of what each client uploaded (its model before aggregation)
    ckpt = rundir.load_tensors(tmp_path / "checkpoint.pt")
    fed = build_federation(cfg, DataSource.builtin(cfg.dataset, data_dir))
    uploaded = StackedModels([init_model(cfg.seed, fed.dataset.input_shape, i) for i in range(3)])
    with torch.no_grad():
        for k, p in uploaded.params.items():
            p.copy_(ckpt["method"]["last_upload"][k])
    res = evaluate_clients(uploaded, fed.shards, fed.test_x, fed.dataset.test_y, 0.75)
    assert float(rows[0]["accuracy"]) == pytest.approx(res["accuracy"], abs=1e-12)
    assert float(rows[0]["auroc"]) == pytest.approx(res["auroc"], abs=1e-12)
    assert s["peak"]["phase"] == "local" and s["final"]["phase"] == "round"
    # ... and the global default is untouched by the option's existence
    g = run(RunConfig(**{**TINY, "rounds": 1}), tmp_path / "global", data_dir=data_dir, progress=False)
    assert g["peak"]["phase"] == "round" and g["final"]["accuracy"] == s["final"]["accuracy"]


def test_a_local_evaluation_run_holds_the_global_runs_rows(tmp_path, data_dir):
    """Evaluating draws no randomness: a --baseline-eval local run's "round" rows are a global run's rows,
    so one run serves both variants of the investigation (reporting.variants)."""
    def rows(path):
        return [{k: v for k, v in r.items() if k != "paper"}
                for r in csv.DictReader((path / "metrics.csv").open()) if r["phase"] == "round"]

    run(RunConfig(**{**TINY, "baseline_eval": "local"}), tmp_path / "local", data_dir=data_dir, progress=False)
    run(RunConfig(**TINY), tmp_path / "global", data_dir=data_dir, progress=False)
    assert rows(tmp_path / "local") == rows(tmp_path / "global") and len(rows(tmp_path / "global")) == 2


def test_variants_leave_old_run_names_alone():
    base = RunConfig(dataset="magic", method="fedavg")
    assert base.key() == RunConfig(dataset="magic", method="fedavg", baseline_eval="global").key()
    assert base.key() != RunConfig(dataset="magic", method="fedavg", baseline_eval="local").key()
    assert base.key() != RunConfig(dataset="magic", method="fedavg", optimizer_state="reset").key()


def test_flower_refuses_local_evaluation():
    from fedgca.flower.rounds import run_server

    with pytest.raises(ValueError, match="simulator only"):
        run_server(None, RunConfig(**{**TINY, "baseline_eval": "local"}).resolved(), None)


def test_validation_threshold(tmp_path, data_dir):
    """--threshold val-quantile: τ_i is the quantile of client i's validation scores; only τ changes."""
    from fedgca.detector import load_client_detector
    from fedgca.evaluation.metrics import shard_scores
    from fedgca.evaluation.threshold import quantile_threshold

    with pytest.raises(ValueError, match="--val-fraction"):
        RunConfig(dataset="academic", threshold="val-quantile").resolved()
    kw = dict(dataset="academic", method="gca", clients=3, rounds=1, recon_epochs=1, align_epochs=1,
              val_fraction=0.2, seed=100)
    val = run(RunConfig(**kw, threshold="val-quantile"), tmp_path / "val", data_dir=data_dir, progress=False)
    train = run(RunConfig(**kw), tmp_path / "train", data_dir=data_dir, progress=False)
    assert val["final"]["auroc"] == train["final"]["auroc"]  # same models: the ranking is untouched
    assert val["final"]["accuracy"] != train["final"]["accuracy"]
    # the saved detector's τ is the quantile of its validation rows' scores under the final model
    fed = build_federation(RunConfig(**kw, threshold="val-quantile"), DataSource.builtin(kw["dataset"], data_dir))
    fed.clients.load_state_dict(rundir.load_tensors(tmp_path / "val" / "checkpoint.pt")["clients"])
    scores = shard_scores(fed.clients, fed.val_shards)
    for i in range(3):
        det = load_client_detector(tmp_path / "val", i)
        assert det.threshold_ == quantile_threshold(scores[i], 0.75)
        assert det.meta["threshold_rows"] == "validation"


def test_validation_threshold_on_flower_matches_the_simulator(tmp_path, data_dir):
    from fedgca.flower.simulation import simulate

    cfg = RunConfig(dataset="magic", method="fedavg", clients=3, rounds=2, local_epochs=1, val_fraction=0.1,
                    threshold="val-quantile", seed=100)
    simulate(cfg, tmp_path / "flower", data_dir=data_dir)
    run(cfg, tmp_path / "sim", data_dir=data_dir, progress=False)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "sim" / "metrics.csv").read_bytes()


def test_eval_local_epochs_evaluates_the_local_models_after_every_local_epoch(tmp_path, data_dir):
    """The diagnostic (issue #33): rows of phase local-epoch after each of the E local epochs; the one after the
    last epoch is the pre-aggregation evaluation (--baseline-eval local's row), and training is unchanged."""
    import csv as _csv

    from fedgca.simulation.runner import run as run_sim

    base = dict(dataset="academic", method="fedavg", rounds=2, local_epochs=3, seed=100)
    diag = run_sim(RunConfig(**base, eval_local_epochs=True, baseline_eval="local"), tmp_path / "d", data_dir=data_dir,
                   progress=False)
    plain = run_sim(RunConfig(**base), tmp_path / "p", data_dir=data_dir, progress=False)
    rows = list(_csv.DictReader((tmp_path / "d" / "metrics.csv").open()))
    local_epoch = [r for r in rows if r["phase"] == "local-epoch"]
    assert [(r["round"], r["epoch"]) for r in local_epoch] == [(str(r), str(e)) for r in (1, 2) for e in (1, 2, 3)]
    local = [r for r in rows if r["phase"] == "local"]
    for r in (1, 2):
        last = next(x for x in local_epoch if x["round"] == str(r) and x["epoch"] == "3")
        pre = next(x for x in local if x["round"] == str(r))
        assert last["accuracy"] == pre["accuracy"] and last["auroc"] == pre["auroc"]
    assert set(diag["local_epoch_peak_accuracy"]) == {"1", "2", "3"}
    from fedgca.reporting.tables import raw_csv

    table = list(_csv.DictReader(raw_csv([diag, plain]).splitlines()))  # runs.csv keeps the per-epoch peaks
    assert [float(v) for v in table[0]["local_epoch_peak_accuracy"].split(";")] == \
        [diag["local_epoch_peak_accuracy"][e] for e in ("1", "2", "3")] and table[1]["local_epoch_peak_accuracy"] == ""
    # evaluating does not train: the global model's rounds are the plain run's
    g = [r for r in rows if r["phase"] == "round"]
    p = [r for r in _csv.DictReader((tmp_path / "p" / "metrics.csv").open()) if r["phase"] == "round"]
    assert [x["accuracy"] for x in g] == [x["accuracy"] for x in p]
    assert plain["final"]["accuracy"] == diag["final"]["accuracy"]
    with pytest.raises(ValueError, match="parameter-sharing"):
        RunConfig(dataset="academic", method="gca", eval_local_epochs=True).resolved()
