"""The stacked simulator reproduces C independent per-client loops (SPEC §1; issue: stacked == reference)."""
import copy

import numpy as np
import torch

from fedgca import seeding
from fedgca.models import TabularAE
from fedgca.protocol import gca
from fedgca.protocol.clustering import ClusterSummary
from fedgca.training import gca as gca_training
from fedgca.training.loop import ClientShards
from fedgca.training.reference import ReferenceClient, reference_gca_round
from fedgca.training.stacked import StackedModels

SIZES = [120, 75, 31, 98]  # unequal: 3, 2, 1 and 2 batches of 50 → clients idle at the end of epochs


def _setup(dx=6, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    models = [TabularAE(dx).to(dtype) for _ in SIZES]
    rng = np.random.default_rng(seed)
    data = [rng.normal(size=(n, dx)) for n in SIZES]
    return models, data


def _simulated_round(stack, shards, cfg, seed, r, part=None):
    part = torch.ones(len(SIZES), dtype=torch.bool) if part is None else part
    ids = range(len(SIZES))
    for e in range(cfg.recon_epochs):
        gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(seed, "recon", (r, e), ids), cfg, part)
    uploads = gca_training.encode_uploads(stack, shards, seeding.client_rngs(seed, "upload", (r,), ids), cfg.rho, part)
    payload = gca.broadcast_payload(gca.aggregate_codes(uploads, cfg, seeding.int_seed(seed, "cluster", r)))
    summary = ClusterSummary(payload["centroids"], payload["counts"])
    for e in range(cfg.align_epochs):
        gca_training.alignment_epoch(stack, shards, seeding.client_rngs(seed, "align", (r, e), ids), cfg, summary, part)
    return uploads, payload


def test_stacked_equals_per_client_reference_with_unequal_shards():
    # float64: Adam divides by sqrt(v) + 1e-8, which turns float32 rounding in
    # near-zero gradients into lr-sized differences; in float64 the two
    # summation orders agree to ~1e-12 and any logic difference shows.
    models, data = _setup(dtype=torch.float64)
    cfg = gca.GCAConfig(k=4, rho=0.3, recon_epochs=2, align_epochs=2)
    refs = [ReferenceClient(copy.deepcopy(m), d, cid=i) for i, (m, d) in enumerate(zip(models, data))]
    stack = StackedModels(models)
    shards = ClientShards.from_arrays(data, dtype=torch.float64)
    for r in range(2):
        up_sim, pay_sim = _simulated_round(stack, shards, cfg, seed=7, r=r)
        ref = reference_gca_round(refs, cfg, seed=7, r=r)
        for a, b in zip(up_sim, ref["uploads"]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(pay_sim["centroids"], ref["payload"]["centroids"], rtol=1e-5, atol=1e-6)
    for i, ref_client in enumerate(refs):
        for name, p in ref_client.model.state_dict().items():
            torch.testing.assert_close(stack.params[name][i].detach(), p, rtol=1e-9, atol=1e-10)
        # Adam state too: step counts and moments per tensor
        for name, p in ref_client.model.named_parameters():
            st = ref_client.optim.state[p]
            assert int(stack.optim.step_count[name][i]) == int(st["step"])
            torch.testing.assert_close(stack.optim.exp_avg[name][i], st["exp_avg"], rtol=1e-9, atol=1e-12)
            torch.testing.assert_close(stack.optim.exp_avg_sq[name][i], st["exp_avg_sq"], rtol=1e-9, atol=1e-15)


def test_idle_client_takes_no_step():
    models, data = _setup()
    stack, shards = StackedModels(models), ClientShards.from_arrays(data)
    cfg = gca.GCAConfig(recon_epochs=1)
    gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(0, "recon", (0, 0), range(4)), cfg,
                             torch.ones(4, dtype=torch.bool))
    steps = stack.optim.step_count["encoder.0.weight"].tolist()
    assert steps == [3, 2, 1, 2]  # ceil(N_i / 50): no step once a client has run out of batches


def test_alignment_leaves_decoder_and_its_adam_state_bit_identical():
    models, data = _setup()
    stack, shards = StackedModels(models), ClientShards.from_arrays(data)
    cfg = gca.GCAConfig(recon_epochs=1, align_epochs=2, k=3)
    part = torch.ones(4, dtype=torch.bool)
    gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(0, "recon", (0, 0), range(4)), cfg, part)
    before = {k: (stack.params[k].detach().clone(), stack.optim.exp_avg[k].clone(),
                  stack.optim.exp_avg_sq[k].clone(), stack.optim.step_count[k].clone()) for k in stack.params}
    summary = ClusterSummary(np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32),
                             np.array([5.0, 1.0, 0.0]))
    gca_training.alignment_epoch(stack, shards, seeding.client_rngs(0, "align", (0, 0), range(4)), cfg, summary, part)
    for k in stack.decoder_keys:
        for a, b in zip(before[k], (stack.params[k], stack.optim.exp_avg[k], stack.optim.exp_avg_sq[k],
                                    stack.optim.step_count[k])):
            assert torch.equal(a, b), k
    assert any(not torch.equal(before[k][0], stack.params[k]) for k in stack.encoder_keys)


def test_partial_participation_only_moves_participants():
    models, data = _setup()
    stack, shards = StackedModels(models), ClientShards.from_arrays(data)
    before = {k: v.detach().clone() for k, v in stack.params.items()}
    part = torch.tensor([True, False, True, False])
    cfg = gca.GCAConfig(k=3, rho=0.5, recon_epochs=1, align_epochs=1)
    uploads, _ = _simulated_round(stack, shards, cfg, seed=3, r=0, part=part)
    assert uploads[1] is None and uploads[3] is None and len(uploads[0]) == 60
    for k, v in stack.params.items():
        assert torch.equal(v[1], before[k][1]) and torch.equal(v[3], before[k][3])
        assert not torch.equal(v[0], before[k][0])


def test_stacked_adam_is_bit_identical_to_independent_fused_adams():
    """Random activity makes step counts drift apart and StepLR splits the learning rates:
    every client still gets exactly torch.optim.Adam(fused=True)'s update, bit for bit."""
    from fedgca.training.stacked import AdamConfig, StackedAdam

    gen = torch.Generator().manual_seed(0)
    n_clients, shapes = 5, {"w": (3, 4), "b": (3,)}
    stacked = {k: torch.randn(n_clients, *s, generator=gen) for k, s in shapes.items()}
    cfg = AdamConfig(lr_step=2)  # lr drops after 2 epochs: clients end up on different learning rates
    opt = StackedAdam(stacked, cfg)
    solo = [{k: stacked[k][i].clone().requires_grad_(True) for k in shapes} for i in range(n_clients)]
    refs = [torch.optim.Adam(list(p.values()), lr=cfg.lr, fused=True) for p in solo]
    sched = [torch.optim.lr_scheduler.StepLR(o, cfg.lr_step, cfg.lr_gamma) for o in refs]
    split_lrs = 0
    for epoch in range(5):
        split_lrs += len(set(opt.lr().tolist())) > 1
        epoch_active = torch.rand(n_clients, generator=gen) < 0.7
        for _ in range(4):
            active = epoch_active & (torch.rand(n_clients, generator=gen) < 0.6)
            grads = {k: torch.randn(n_clients, *s, generator=gen) for k, s in shapes.items()}
            only = sorted(shapes)[: 1 + epoch % 2]  # sometimes a tensor gets no gradient (frozen)
            opt.step({k: grads[k] for k in only}, active.nonzero().flatten().tolist())
            for i in map(int, active.nonzero().flatten()):
                for k in only:
                    solo[i][k].grad = grads[k][i].clone()
                refs[i].step()
                refs[i].zero_grad(set_to_none=True)
        opt.end_epoch(epoch_active)
        for i in map(int, epoch_active.nonzero().flatten()):
            sched[i].step()
    assert split_lrs and len(set(opt.step_count["b"].tolist())) > 2  # the hard cases did occur
    for i in range(n_clients):
        for k in shapes:
            assert torch.equal(stacked[k][i], solo[i][k].detach()), (i, k)
            state = refs[i].state.get(solo[i][k], {})
            assert int(opt.step_count[k][i]) == int(state.get("step", 0))
            if state:
                assert torch.equal(opt.exp_avg[k][i], state["exp_avg"])
                assert torch.equal(opt.exp_avg_sq[k][i], state["exp_avg_sq"])


def test_whole_tensor_adam_steps_are_bit_identical_to_independent_fused_adams():
    """When every client steps with one step count, tensors whose per-client slice is a whole number of
    SIMD groups take one kernel call for all clients (``StackedAdam._whole_tensor_keys``); the others, and
    every step after the counts drift apart, go client by client. Either way each client gets exactly
    torch.optim.Adam(fused=True)'s update, bit for bit — and on this CPU the whole-tensor path did run."""
    from fedgca.training.stacked import _SIMD_FLOATS, AdamConfig, StackedAdam

    gen = torch.Generator().manual_seed(1)
    n_clients, shapes = 6, {"w": (16, 8), "h": (64,), "tail": (5,), "odd": (3, 7)}
    stacked = {k: torch.randn(n_clients, *s, generator=gen) for k, s in shapes.items()}
    opt = StackedAdam(stacked, AdamConfig())
    solo = [{k: stacked[k][i].clone().requires_grad_(True) for k in shapes} for i in range(n_clients)]
    refs = [torch.optim.Adam(list(p.values()), lr=1e-3, fused=True) for p in solo]
    whole_calls = []
    real = opt._whole_tensor_keys
    opt._whole_tensor_keys = lambda grads: whole_calls.append(real(grads)) or whole_calls[-1]
    everyone = torch.ones(n_clients, dtype=torch.bool)
    for step in range(40):
        active = everyone if step < 15 or step >= 30 else torch.rand(n_clients, generator=gen) < 0.5
        if step == 30:  # counts drifted in steps 15-29: bring them back together (a reset round)
            opt.reset()
            for r in refs:
                r.state.clear()
        scale = 10.0 ** float(torch.randint(-6, 3, (1,), generator=gen))
        grads = {k: scale * torch.randn(n_clients, *s, generator=gen) for k, s in shapes.items()}
        opt.step(grads, active.nonzero().flatten().tolist())
        for i in map(int, active.nonzero().flatten()):
            for k in shapes:
                solo[i][k].grad = grads[k][i].clone()
            refs[i].step()
            refs[i].zero_grad(set_to_none=True)
    for i in range(n_clients):
        for k in shapes:
            state = refs[i].state[solo[i][k]]
            assert torch.equal(stacked[k][i], solo[i][k].detach()), (i, k)
            assert torch.equal(opt.exp_avg[k][i], state["exp_avg"]) and torch.equal(opt.exp_avg_sq[k][i],
                                                                                     state["exp_avg_sq"]), (i, k)
            assert int(opt.step_count[k][i]) == int(state["step"])
    if torch.backends.cpu.get_cpu_capability() in _SIMD_FLOATS:
        assert {"w", "h"} <= set().union(*whole_calls) and not {"tail", "odd"} & set().union(*whole_calls)


def test_batched_mlp_forward_and_gradients_equal_vmap():
    """The Linear/ReLU fast path computes what vmap(functional_call) computes, values and gradients."""
    from torch.func import functional_call, vmap

    from fedgca.models import TabularAE
    from fedgca.training.stacked import StackedModels

    torch.manual_seed(0)
    stack = StackedModels([TabularAE(7) for _ in range(3)])
    x = torch.randn(3, 11, 7)
    general = vmap(lambda p, xb: functional_call(stack.base, p, (xb,)))
    fast, ref = stack.reconstruct(x), general(stack.params, x)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    keys = list(stack.params)
    g_fast = torch.autograd.grad(fast.pow(2).sum(), [stack.params[k] for k in keys])
    g_ref = torch.autograd.grad(ref.pow(2).sum(), [stack.params[k] for k in keys])
    for k, a, b in zip(keys, g_fast, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=k)
        assert a.is_contiguous(), k  # no strided copy before the fused Adam step


def test_stacked_conv_ae_equals_per_client_reference_with_unequal_shards():
    """The vision model through the same stacked engine: one GCA round equals C separate loops."""
    from fedgca.models.conv import ConvAE

    torch.manual_seed(1)
    sizes = [60, 35, 12]  # 2, 1 and 1 batches of 50
    models = [ConvAE(1, 8, 8).to(torch.float64) for _ in sizes]
    rng = np.random.default_rng(1)
    data = [rng.uniform(-1, 1, size=(n, 1, 8, 8)) for n in sizes]
    cfg = gca.GCAConfig(k=3, rho=0.5, recon_epochs=1, align_epochs=1, cluster_preset="vision",
                        cluster_options={"n_init": 2})
    refs = [ReferenceClient(copy.deepcopy(m), d, cid=i) for i, (m, d) in enumerate(zip(models, data))]
    stack = StackedModels(models)
    shards = ClientShards.from_arrays(data, dtype=torch.float64)
    part = torch.ones(len(sizes), dtype=torch.bool)
    ids = range(len(sizes))
    gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(3, "recon", (0, 0), ids), cfg, part)
    uploads = gca_training.encode_uploads(stack, shards, seeding.client_rngs(3, "upload", (0,), ids), cfg.rho, part)
    payload = gca.broadcast_payload(gca.aggregate_codes(uploads, cfg, seeding.int_seed(3, "cluster", 0)))
    gca_training.alignment_epoch(stack, shards, seeding.client_rngs(3, "align", (0, 0), ids), cfg,
                        ClusterSummary(payload["centroids"], payload["counts"]), part)
    ref = reference_gca_round(refs, cfg, seed=3, r=0)
    for a, b in zip(uploads, ref["uploads"]):
        assert a.shape == (b.shape[0], 16 * 2 * 2)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    for i, ref_client in enumerate(refs):
        for name, p in ref_client.model.state_dict().items():
            torch.testing.assert_close(stack.params[name][i].detach(), p, rtol=1e-9, atol=1e-10)


def test_client_stack_trains_on_exactly_as_inside_the_stack():
    """A client lifted out of the stack (parameters + Adam state) takes the same next epoch."""
    models, data = _setup(dtype=torch.float64)
    cfg = gca.GCAConfig(k=4, rho=0.3, recon_epochs=1, align_epochs=1)
    stack = StackedModels(models)
    shards = ClientShards.from_arrays(data, dtype=torch.float64)
    _simulated_round(stack, shards, cfg, seed=7, r=0)
    solo = stack.client_stack(2, models[0])
    solo_shard = ClientShards.from_arrays([data[2]], dtype=torch.float64)
    part = torch.ones(len(SIZES), dtype=torch.bool)
    gca_training.reconstruction_epoch(stack, shards, seeding.client_rngs(7, "recon", (1, 0), range(len(SIZES))), cfg, part)
    gca_training.reconstruction_epoch(solo, solo_shard, seeding.client_rngs(7, "recon", (1, 0), [2]), cfg,
                             torch.ones(1, dtype=torch.bool))
    for k in stack.params:
        torch.testing.assert_close(solo.params[k][0], stack.params[k][2], rtol=1e-9, atol=1e-12)
        assert int(solo.optim.step_count[k][0]) == int(stack.optim.step_count[k][2])


def test_stacked_conv_pass_is_each_clients_own_pass_bit_for_bit():
    """Non-MLP parts run client by client: each client's output and gradients are exactly what its model
    alone computes (float32, no tolerance), where vmap's grouped convolution only came close."""
    from fedgca.models.conv import ConvAE
    from fedgca.training.stacked import StackedModels

    torch.manual_seed(2)
    models = [ConvAE(1, 8, 8) for _ in range(3)]
    stack = StackedModels(models)
    x = torch.randn(3, 5, 1, 8, 8)
    out = stack.reconstruct(x)
    grads = torch.autograd.grad(out.pow(2).sum(), list(stack.params.values()))
    for i, m in enumerate(models):
        own = m(x[i])
        assert torch.equal(out[i], own)
        for (name, p), g in zip(m.named_parameters(), grads):
            assert torch.equal(g[i], torch.autograd.grad(own.pow(2).sum(), p, retain_graph=True)[0]), name


def test_conv_scoring_in_channels_last_matches_each_models_own_pass():
    """Scoring runs the conv AE in channels-last layout (faster on oneDNN): the same reconstruction as the
    model's own NCHW pass up to float rounding, for 1- and 3-channel images; the stacked weights are untouched."""
    from fedgca.models.conv import ConvAE
    from fedgca.training.stacked import StackedModels

    for channels in (1, 3):
        torch.manual_seed(channels)
        models = [ConvAE(channels, 8, 8) for _ in range(2)]
        stack = StackedModels(models)
        before = {k: v.clone() for k, v in stack.params.items()}
        x = torch.randn(6, channels, 8, 8)
        for i, m in enumerate(models):
            with torch.no_grad():
                own = m(x)
            got = stack.reconstruct_client(i, x)
            assert got.shape == own.shape
            if channels == 3:  # the layout the scoring pass ran in (for one channel the two coincide)
                assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()
            torch.testing.assert_close(got, own, rtol=1e-5, atol=1e-6)
        assert all(torch.equal(v, before[k]) and v.is_contiguous() for k, v in stack.params.items())


def _autograd_loss_and_grads(stack, loss_fn, xb, mask, keys):
    loss = loss_fn(xb, mask)
    return loss.detach(), dict(zip(keys, torch.autograd.grad(loss.sum(), [stack.params[k] for k in keys])))


def test_hand_backward_gives_autograds_gradients_bit_for_bit():
    """Reconstruction (whole AE; alone and with FedProx's proximal term) and alignment (encoder only) losses, 1 and 3
    clients, float32 and float64, padded rows and an idle client: the hand-written backward pass returns exactly
    autograd's loss and gradients, in its layouts."""
    from fedgca.training.gca import alignment_loss
    from fedgca.training.local import ProximalTerm, reconstruction_loss
    from fedgca.training.loop import HandDifferentiated

    for n_clients, dx, dtype in ((1, 10, torch.float32), (3, 37, torch.float32), (3, 6, torch.float64)):
        torch.manual_seed(n_clients)
        stack = StackedModels([TabularAE(dx).to(dtype) for _ in range(n_clients)])
        xb = torch.randn(n_clients, 50, dx, dtype=dtype)
        mask = torch.ones(n_clients, 50)  # float32 whatever the model's dtype, as batch_plan makes it
        mask[0, 31:] = 0  # a short last batch
        if n_clients > 1:
            mask[1] = 0  # a client with no batch left
        centroids, counts = torch.randn(7, 16, dtype=dtype), torch.tensor([5.0, 1, 0, 9, 3, 3, 2])
        weights = gca.alignment_weights(counts)
        # the round's global model: near the clients' (as after a download and a few steps), one per parameter
        global_params = {k: v.detach()[0] + 0.01 * torch.randn_like(v.detach()[0]) for k, v in stack.params.items()}
        for loss_fn, keys in ((reconstruction_loss(stack, 1), list(stack.params)),
                              (reconstruction_loss(stack, 1, ProximalTerm(1e-4, stack.params, global_params)),
                               list(stack.params)),
                              (reconstruction_loss(stack, 1, ProximalTerm(0.37, stack.params, global_params)),
                               list(stack.params)),
                              (alignment_loss(stack, centroids, weights), stack.encoder_keys)):
            assert isinstance(loss_fn, HandDifferentiated)
            want_loss, want = _autograd_loss_and_grads(stack, loss_fn, xb, mask, keys)
            got_loss, got = loss_fn.loss_and_grads(xb, mask)
            assert torch.equal(got_loss, want_loss)
            assert sorted(got) == sorted(keys)
            for k in keys:
                assert torch.equal(got[k], want[k]), k
                assert got[k].stride() == want[k].stride(), k
            assert got[keys[0]].abs().sum() > 0  # a test of something: the gradients are not all zero


def test_autograd_path_remains_for_models_and_losses_without_a_hand_backward():
    from fedgca.models.conv import ConvAE
    from fedgca.protocol import fedprox
    from fedgca.training.local import reconstruction_loss
    from fedgca.training.loop import HandDifferentiated

    conv = StackedModels([ConvAE(1, 8, 8)])
    assert not conv.hand_backward
    assert not isinstance(reconstruction_loss(conv, 3), HandDifferentiated)
    mlp = StackedModels([TabularAE(5)])
    prox = lambda: 1e-4 * fedprox.proximal_term(mlp.params, {k: v.detach() for k, v in mlp.params.items()})  # noqa: E731
    assert not isinstance(reconstruction_loss(mlp, 1, prox), HandDifferentiated)
