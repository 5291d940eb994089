"""Server-side extraction attacks and leakage metrics (SPEC §6)."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

from fedgca import rundir
from fedgca.attacks.flipping import direct_decodes, flipped_loss, train_surrogate
from fedgca.attacks.inversion import invert, invert_model, make_starts
from fedgca.attacks.metrics import (
    leakage_metrics,
    nearest_by_mse,
    select_reference_bank,
)
from fedgca.models import TabularAE, build_model


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: one intra-op thread is much faster than two on a busy 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _frozen(model):
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _overfit(model, x, steps=200):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - x) ** 2).sum(1).mean().backward()
        opt.step()
    return _frozen(model)


# ---------------------------------------------------------------- inversion


def test_inversion_recovers_memorised_points_but_not_from_untrained_ae():
    gen = torch.Generator().manual_seed(1)
    secret = torch.randn(5, 5, generator=gen)
    reference = torch.randn(100, 5, generator=gen)
    starts = make_starts(50, (5,), seed=100)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        memorised = _overfit(TabularAE(5), secret)
        untrained = _frozen(TabularAE(5))
    kw = dict(lr=3e-2, max_steps=150)  # fewer steps than the preset, to stay fast
    leaked = leakage_metrics(secret, invert(memorised, starts, **kw).outputs, reference)
    blind = leakage_metrics(secret, invert(untrained, starts, **kw).outputs, reference)
    assert leaked["ntmse"] < 0.5  # 0.003-0.28 over 8 seeds tried; untrained: 2.5-5
    assert leaked["delta_cos"] > 0
    assert blind["ntmse"] > 1.5
    assert blind["delta_cos"] < 0


def test_batched_inversion_equals_each_start_alone_and_stopped_starts_stay_put():
    with torch.random.fork_rng():
        torch.manual_seed(3)
        model = TabularAE(4).eval()  # parameters keep requires_grad: invert must not fill .grad
    starts = make_starts(6, (4,), seed=200)
    kw = dict(lr=5e-2, max_steps=150, patience=5, rel_tol=1e-3)
    batched = invert(model, starts, **kw)
    assert all(p.grad is None for p in model.parameters())
    steps = batched.steps.tolist()
    assert min(steps) < kw["max_steps"], "need a start that stops early"
    assert max(steps) > min(steps), "need starts that stop at different times"
    for s in range(len(starts)):
        alone = invert(model, starts[s : s + 1], **kw)
        assert int(alone.steps[0]) == steps[s]
        torch.testing.assert_close(batched.x_last[s], alone.x_last[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(batched.x_best[s], alone.x_best[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(batched.losses[s], alone.losses[0], rtol=1e-4, atol=1e-7)
    # a start frozen at step k is exactly where it was after its own k steps
    early = int(np.argmin(steps))
    shorter = invert(model, starts, **{**kw, "max_steps": steps[early]})
    torch.testing.assert_close(batched.x_last[early], shorter.x_last[early], rtol=1e-5, atol=1e-6)


def test_inversion_steps_are_torch_adam_steps():
    """No patience stop, no bounds: the last state is torch.optim.Adam's after max_steps steps on ||x − T(x)||²."""
    with torch.random.fork_rng():
        torch.manual_seed(5)
        model = TabularAE(4).eval()
    start = make_starts(1, (4,), seed=7)
    ours = invert(model, start, lr=1e-2, max_steps=40, patience=10_000, rel_tol=0.0)
    x = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=1e-2)
    for _ in range(40):
        opt.zero_grad()
        (x - model(x)).pow(2).sum().backward()
        opt.step()
    torch.testing.assert_close(ours.x_last, x.detach(), rtol=0, atol=1e-6)
    assert int(ours.steps[0]) == 40


def test_inversion_keeps_best_state_and_reports_its_outputs():
    model = _frozen(TabularAE(3))
    starts = make_starts(8, (3,), seed=300)
    res = invert(model, starts, max_steps=40)
    with torch.no_grad():
        torch.testing.assert_close(res.outputs, model(res.x_best))
        own = ((res.x_best - model(res.x_best)) ** 2).sum(1)
        start_loss = ((starts - model(starts)) ** 2).sum(1)
    torch.testing.assert_close(res.losses, own, rtol=1e-5, atol=1e-7)
    assert torch.all(res.losses <= start_loss)
    assert not res.outputs.requires_grad


def test_vision_inversion_stays_in_bounds():
    with torch.random.fork_rng():
        torch.manual_seed(4)
        model = build_model((1, 8, 8))
    res = invert_model(model, (1, 8, 8), seed=100, n_starts=4, lr=0.5, max_steps=15)
    assert res.x_best.shape == (4, 1, 8, 8)
    assert res.x_best.min() >= -1.0 and res.x_best.max() <= 1.0
    assert res.x_last.min() >= -1.0 and res.x_last.max() <= 1.0
    assert res.outputs.min() >= -1.0 and res.outputs.max() <= 1.0
    assert model.training  # mode restored


def test_starts_are_fixed_per_seed_and_leave_global_rng_alone():
    state = torch.get_rng_state()
    a = make_starts(100, (22,), seed=100)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, make_starts(100, (22,), seed=100))
    assert not torch.equal(a, make_starts(100, (22,), seed=200))
    assert abs(float(a.mean())) < 0.1 and abs(float(a.std()) - 1) < 0.1
    v = make_starts(10, (3, 8, 8), seed=100)
    assert v.min() >= -1 and v.max() <= 1 and v.min() < -0.9 and v.max() > 0.9
    with pytest.raises(ValueError):
        make_starts(2, (3,), seed=1, kind="audio")


# ------------------------------------------------------------------ metrics


def _brute_force(targets, outputs, reference):
    def nearest(x, pool):
        best, best_d = None, float("inf")
        for p in pool:
            d = sum((float(a) - float(b)) ** 2 for a, b in zip(x, p)) / len(x)
            if d < best_d:
                best, best_d = p, d
        return best, best_d

    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    mr, mh, cr, ch = [], [], [], []
    for x in targets:
        r, dr = nearest(x, outputs)
        h, dh = nearest(x, reference)
        mr.append(dr), mh.append(dh), cr.append(cos(x, r)), ch.append(cos(x, h))
    return np.mean(mr) / np.mean(mh), np.mean(cr) - np.mean(ch)


def test_metrics_match_brute_force_with_chunking_and_images():
    rng = np.random.default_rng(0)
    targets, reference = rng.normal(size=(30, 1, 2, 3)), rng.normal(size=(9, 1, 2, 3))
    outputs = rng.normal(size=(7, 1, 2, 3)).astype(np.float32).astype(np.float64)  # exact as a float32 tensor
    flat = [a.reshape(len(a), -1) for a in (targets, outputs, reference)]
    ntmse, dcos = _brute_force(*flat)
    got = leakage_metrics(targets, torch.as_tensor(outputs, dtype=torch.float32), reference, chunk_rows=4)
    assert got["ntmse"] == pytest.approx(ntmse, rel=1e-12)
    assert got["delta_cos"] == pytest.approx(dcos, rel=1e-12, abs=1e-12)
    assert (got["n_targets"], got["n_outputs"], got["n_reference"]) == (30, 7, 9)
    brute_idx = [int(np.argmin(((flat[1] - x) ** 2).sum(1))) for x in flat[0]]
    assert nearest_by_mse(targets, outputs, chunk_rows=4).tolist() == brute_idx


def test_metrics_perfect_reconstruction_gives_zero_ntmse():
    x = np.random.default_rng(1).normal(size=(12, 5))
    got = leakage_metrics(x, x[::-1].copy(), x[:3] + 1.0)
    assert got["ntmse"] == 0.0
    assert got["cos_output"] == pytest.approx(1.0)


def test_cosine_is_measured_against_the_mse_nearest_output():
    target = np.array([[1.0, 0.0]])
    near = [0.9, 0.3]  # MSE 0.05, cosine 0.949
    aligned = [3.0, 0.0]  # MSE 2.0, cosine 1 (the cosine-best output)
    got = leakage_metrics(target, np.array([aligned, near]), np.array([[0.0, 1.0]]))
    assert got["mse_output"] == pytest.approx(0.05)
    assert got["cos_output"] == pytest.approx(0.9 / np.sqrt(0.9))
    assert got["ntmse"] == pytest.approx(0.05 / 1.0)
    assert got["delta_cos"] == pytest.approx(0.9 / np.sqrt(0.9) - 0.0)


def test_metrics_stay_memory_light_on_large_target_sets():
    rng = np.random.default_rng(2)
    got = leakage_metrics(rng.normal(size=(25_000, 22)), rng.normal(size=(100, 22)), rng.normal(size=(100, 22)))
    assert 0.5 < got["ntmse"] < 2.0 and abs(got["delta_cos"]) < 0.2


def test_reference_bank_is_fixed_per_seed():
    a = select_reference_bank(1000, 100, seed=100)
    assert len(a) == len(set(a.tolist())) == 100 and np.all(np.diff(a) > 0)
    assert np.array_equal(a, select_reference_bank(1000, 100, seed=100))
    assert not np.array_equal(a, select_reference_bank(1000, 100, seed=200))
    with pytest.raises(ValueError):
        select_reference_bank(50, 100, seed=1)


# ----------------------------------------------------------------- flipping


def test_surrogate_signature_takes_only_codes_shape_and_hyperparameters():
    params = list(inspect.signature(train_surrogate).parameters)
    assert params[0] == "codes" and params[1] == "input_shape"
    assert set(params) == {
        "codes", "input_shape", "seed", "lr", "batch_size", "val_fraction",
        "max_epochs", "patience", "rel_tol", "device",
    }


def test_surrogate_is_deterministic_leaves_global_rng_and_learns():
    # codes on a 3-dim subspace of R^16, as an AE's codes of low-dimensional data would be
    basis = np.random.default_rng(5).normal(size=(3, 16))
    codes = (np.random.default_rng(6).normal(size=(60, 3)) @ basis).astype(np.float32)
    state = torch.get_rng_state()
    kw = dict(seed=100, max_epochs=15)
    a = train_surrogate(codes, (5,), **kw)
    assert torch.equal(torch.get_rng_state(), state)
    b = train_surrogate(codes, (5,), **kw)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    init = train_surrogate(codes, (5,), seed=100, max_epochs=0)
    assert flipped_loss(a, codes) < 0.5 * flipped_loss(init, codes)
    other = train_surrogate(codes, (5,), seed=200, max_epochs=0)
    assert not torch.equal(next(init.parameters()), next(other.parameters()))
    assert direct_decodes(a, codes).shape == (60, 5)
    assert not a.training
    assert a.fit_info["n_val"] == 6 and a.fit_info["n_train"] == 54 and a.fit_info["epochs"] <= 15
    assert init.fit_info["epochs"] == 0 and init.fit_info["best_epoch"] == 0
    with pytest.raises(ValueError):
        train_surrogate(codes[:, :8], (5,), seed=1, max_epochs=1)


def test_surrogate_restores_best_validation_weights_and_stops_early():
    codes = np.random.default_rng(7).normal(size=(40, 16)).astype(np.float32)
    model = train_surrogate(codes, (5,), seed=300, val_fraction=0.0, lr=5e-2, max_epochs=200, patience=3, rel_tol=1e-2)
    info = model.fit_info
    assert info["n_val"] == 0 and info["epochs"] < 200  # stopped by patience
    assert info["best_epoch"] <= info["epochs"]
    # with no validation rows the training codes play that role: the kept weights are the best seen
    assert flipped_loss(model, codes) == pytest.approx(info["best_val_loss"], rel=1e-6)


# ---------------------------------------------------------------------------- `fedgca attack` on real runs


def _tiny_run(tmp_path, data_dir, method):
    from fedgca.config import RunConfig
    from fedgca.simulation.runner import run

    cfg = RunConfig(dataset="academic", method=method, rounds=2, recon_epochs=1, align_epochs=1, local_epochs=1,
                    seed=100)
    run(cfg, tmp_path / method, data_dir=data_dir, progress=False)
    return tmp_path / method


SMALL = {"surrogate_options": {"max_epochs": 3}, "inversion_options": {"max_steps": 5}}


def test_attack_on_a_fedavg_run_inverts_the_victims_last_upload(tmp_path, data_dir):
    from fedgca.attacks.run import attack_run
    from fedgca.models import TabularAE

    out = _tiny_run(tmp_path, data_dir, "fedavg")
    rec = attack_run(out, victim=3, data_dir=data_dir, **SMALL)
    assert rec["method"] == "fedavg" and rec["victim"] == 3 and rec["upload_round"] == 2
    assert rec["n_targets"] == 79 and rec["n_outputs"] == 100 and rec["n_reference"] == 100
    assert np.isfinite(rec["ntmse"]) and rec["ntmse"] > 0 and np.isfinite(rec["delta_cos"])
    assert json.loads((out / "attack.json").read_text())["ntmse"] == rec["ntmse"]
    npz = np.load(out / "attack_outputs.npz")
    assert npz["outputs"].shape == (100, 22) and npz["reference"].shape == (100, 22)
    # the upload is the victim's locally trained model, not the global average every client holds now
    ckpt = rundir.load_tensors(out / "checkpoint.pt")
    upload = {k: v[3] for k, v in ckpt["method"]["last_upload"].items()}
    assert any(not torch.equal(upload[k], ckpt["method"]["global"][k]) for k in upload)
    model = TabularAE(22)
    model.load_state_dict(upload)


def test_attack_on_a_gca_run_sees_only_codes_and_is_deterministic(tmp_path, data_dir):
    from fedgca.attacks.run import attack_run

    out = _tiny_run(tmp_path, data_dir, "gca")
    first = attack_run(out, victim=0, data_dir=data_dir, **SMALL)
    again = attack_run(out, victim=0, data_dir=data_dir, **SMALL)
    assert first["n_codes"] == 39  # ⌊0.5 · 79⌋: the victim's usual upload
    assert first["ntmse"] == again["ntmse"] and first["delta_cos"] == again["delta_cos"]
    assert set(first["direct_decodes"]) >= {"ntmse", "delta_cos"}
    assert np.load(out / "attack_outputs.npz")["direct_decodes"].shape == (39, 22)


def test_attack_refuses_methods_that_send_nothing(tmp_path, data_dir):
    from fedgca.cli.main import main as cli_main

    out = _tiny_run(tmp_path, data_dir, "single")
    assert cli_main(["attack", "--run", str(out), "--data-dir", str(data_dir)]) == 2


def test_vision_attack_grid_png(tmp_path):
    from fedgca.attacks.run import save_grid

    rng = np.random.default_rng(0)
    targets = rng.uniform(-1, 1, size=(12, 1, 28, 28)).astype(np.float32)
    outputs = np.concatenate([targets[:3], rng.uniform(-1, 1, size=(5, 1, 28, 28)).astype(np.float32)])
    path = save_grid(tmp_path / "grid.png", targets, outputs)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rgb = rng.uniform(-1, 1, size=(4, 3, 32, 32)).astype(np.float32)
    assert save_grid(tmp_path / "rgb.png", rgb, rgb).stat().st_size > 0
