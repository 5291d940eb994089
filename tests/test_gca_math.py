"""SPEC §1 math: alignment weights, nearest centroid, alignment loss, upload sizes."""
import numpy as np
import pytest
import torch

from fedgca.protocol import gca


def _weights_by_hand(counts, gamma=1.0, w_max=6.0, eps=1e-6):
    n_hat = [max(c, eps) for c in counts]
    n_bar = sum(n_hat) / len(n_hat)
    w_t = [min(w_max, (n_bar / n) ** gamma) for n in n_hat]
    mean = sum(w_t) / len(w_t)
    return [w / (mean + eps) for w in w_t]


def test_weights_equal_counts_are_one():
    w = gca.alignment_weights(torch.tensor([5.0, 5.0, 5.0, 5.0]))
    assert torch.allclose(w, torch.full((4,), 1 / (1 + 1e-6), dtype=torch.float64))


def test_weights_hand_computed_case():
    # counts 10, 30: N̄ = 20; w̃ = (2, 2/3); mean 4/3 → w = (1.5, 0.5) up to ε
    w = gca.alignment_weights(torch.tensor([10.0, 30.0]))
    assert w.tolist() == pytest.approx([2 / (4 / 3 + 1e-6), (2 / 3) / (4 / 3 + 1e-6)], rel=1e-12)
    assert w.tolist() == pytest.approx([1.5, 0.5], rel=1e-5)


def test_weights_cap_and_zero_count():
    counts = [0.0, 1.0, 100.0, 1000.0]  # zero count → N̂ = ε → w̃ capped at w_max
    w = gca.alignment_weights(torch.tensor(counts))
    assert w.tolist() == pytest.approx(_weights_by_hand(counts), rel=1e-12)
    # Both sparse clusters hit the cap in the code: equal weights, and their ratio to an uncapped
    # cluster (N = 100) is w_max / (N̄ / 100) — without the cap it would be (N̄ / ε) / (N̄ / 100).
    n_bar = np.mean([max(c, 1e-6) for c in counts])
    assert w[0] == w[1]
    assert float(w[0] / w[2]) == pytest.approx(6.0 / (n_bar / 100.0), rel=1e-12)


@pytest.mark.parametrize("gamma,w_max", [(0.5, 6.0), (2.0, 3.0), (1.0, 100.0)])
def test_weights_random_against_hand_formula(gamma, w_max):
    counts = np.random.default_rng(0).integers(0, 50, size=12).astype(float).tolist()
    w = gca.alignment_weights(torch.tensor(counts), gamma=gamma, w_max=w_max)
    assert w.tolist() == pytest.approx(_weights_by_hand(counts, gamma, w_max), rel=1e-12)


def test_uniform_ablation():
    assert gca.alignment_weights(torch.tensor([1.0, 50.0]), uniform=True).tolist() == [1.0, 1.0]


def test_nearest_centroid_brute_force():
    g = torch.Generator().manual_seed(0)
    z, mu = torch.randn(3, 40, 16, generator=g), torch.randn(7, 16, generator=g)
    assign, sq = gca.nearest_centroid(z, mu)
    for c in range(3):
        for b in range(40):
            d = [float(((z[c, b] - mu[k]) ** 2).sum()) for k in range(7)]
            assert int(assign[c, b]) == int(np.argmin(d))
            assert float(sq[c, b]) == pytest.approx(min(d), rel=1e-5)


def test_alignment_loss_treats_centroids_and_weights_as_constants():
    z = torch.randn(10, 4, requires_grad=True)
    mu = torch.randn(3, 4, requires_grad=True)
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    gca.alignment_per_row(z, mu, w).sum().backward()
    assert z.grad is not None and mu.grad is None and w.grad is None


def test_upload_size_floor_and_sampling():
    assert gca.upload_size(79, 0.5) == 39 and gca.upload_size(100, 0.29) == 29
    idx = gca.sample_upload(np.random.default_rng(1), 565, 0.25)
    assert len(idx) == 141 and len(set(idx.tolist())) == 141 and idx.max() < 565


@pytest.mark.parametrize("bad,msg", [
    (np.full((3, 16), np.nan, np.float32), "NaN"),
    (np.zeros((3, 15), np.float32), "shape"),
    (np.zeros((3, 16), np.float64), "dtype"),
    (np.zeros((11, 16), np.float32), "rows"),
    ([[0.0] * 16], "numpy"),
])
def test_validate_upload_rejects(bad, msg):
    with pytest.raises(gca.UploadError, match=msg):
        gca.validate_upload(bad, max_rows=10, latent_dim=16)


def test_nearest_centroid_gradients_equal_differentiating_the_min_over_all_centroids():
    """The assignment is found without autograd; values, assignments and the gradients of a layer whose
    output is transposed into the codes (as the stacked encoder's is) equal the all-K min's, bit for bit."""
    import torch

    from fedgca.protocol.gca import nearest_centroid

    gen = torch.Generator().manual_seed(3)
    centroids = torch.randn(80, 16, generator=gen)
    weights = torch.rand(80, generator=gen) * 5 + 0.5
    x = torch.randn(4, 8, 50, generator=gen)
    w0, b0 = torch.randn(4, 16, 8, generator=gen), torch.randn(4, 16, 1, generator=gen)
    grads = []
    for all_k in (True, False):
        w, b = w0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
        z = torch.baddbmm(b, w, x).transpose(1, 2)  # [4, 50, 16], feature stride 50
        if all_k:
            sq, assign = (z.unsqueeze(-2) - centroids).pow(2).sum(-1).min(dim=-1)
        else:
            assign, sq = nearest_centroid(z, centroids)
        loss = (weights[assign] * sq).mean(-1).sum()
        grads.append((assign, *torch.autograd.grad(loss, [w, b])))
    (a_all, gw_all, gb_all), (a_one, gw_one, gb_one) = grads
    assert torch.equal(a_all, a_one)
    assert torch.equal(gw_all, gw_one) and torch.equal(gb_all, gb_one)


@pytest.mark.parametrize("k", [10, 80])
def test_nearest_assignment_keeps_the_codes_layout(k):
    """Codes on the midpoints between two centroids, nudged in the last bits, make the argmin hang on the
    distances' last bits. For the stacked encoder's transposed codes, nearest_assignment picks what the
    out-of-place all-K distances pick, whereas a contiguous copy of the same codes picks differently: the
    layout decides the summation order, so the fast path must not change it."""
    gen = torch.Generator().manual_seed(k)
    centroids = torch.randn(k, 16, generator=gen)
    pairs = torch.randint(0, k, (2, 10 * 50), generator=gen)
    mid = (centroids[pairs[0]] + centroids[pairs[1]]) / 2
    z = (mid + 1e-7 * torch.randn(mid.shape, generator=gen)).reshape(10, 50, 16)
    z = z.transpose(1, 2).contiguous().transpose(1, 2)  # feature stride 50, as the encoder's output
    reference = (z.unsqueeze(-2) - centroids).pow(2).sum(-1).argmin(dim=-1)
    assert torch.equal(gca.nearest_assignment(z, centroids), reference)
    assert not torch.equal(gca.nearest_assignment(z.contiguous(), centroids), reference)
