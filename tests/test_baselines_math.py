"""SPEC §2 server rules on stacked tensors."""
import numpy as np
import pytest
import torch

from fedgca.protocol import dpfedavg, fedavg, fednova, fedprox


def _stacked(c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(c, 5, 3, generator=g), "b": torch.randn(c, 3, generator=g)}


def test_fedavg_weighted_by_sizes():
    st, sizes = _stacked(), np.array([10, 20, 30, 40])
    out = fedavg.aggregate({k: v[0] for k, v in st.items()}, st, sizes)
    for k, v in st.items():
        expected = sum(v[i] * sizes[i] for i in range(4)) / sizes.sum()
        torch.testing.assert_close(out[k], expected)


def test_fedavg_of_identical_models_is_a_no_op():
    st = _stacked()
    same = {k: v[:1].expand_as(v).clone() for k, v in st.items()}
    out = fedavg.aggregate({k: v[0] for k, v in same.items()}, same, [5, 7, 11, 13])
    for k in st:
        torch.testing.assert_close(out[k], same[k][0])


def test_fednova_with_equal_tau_equals_fedavg():
    st, sizes = _stacked(), np.array([10, 20, 30, 40])
    glob = {k: v.mean(0) + 0.3 for k, v in st.items()}
    tau = torch.full((4,), 37.0)
    nova = fednova.aggregate(glob, st, sizes, tau)
    avg = fedavg.aggregate(glob, st, sizes)
    for k in st:
        torch.testing.assert_close(nova[k], avg[k], rtol=1e-5, atol=1e-6)


def test_fednova_unequal_tau_brute_force():
    st, sizes = _stacked(), np.array([100, 60, 50, 51])
    glob = {k: torch.zeros_like(v[0]) for k, v in st.items()}
    tau = fednova.local_steps(sizes, 10, 50)
    assert tau.tolist() == [20.0, 20.0, 10.0, 20.0]
    out = fednova.aggregate(glob, st, sizes, tau)
    p = sizes / sizes.sum()
    tau_eff = float((p * tau.numpy()).sum())
    for k, v in st.items():
        d = [(glob[k] - v[i]) / float(tau[i]) for i in range(4)]
        expected = glob[k] - tau_eff * sum(float(p[i]) * d[i] for i in range(4))
        torch.testing.assert_close(out[k], expected, rtol=1e-5, atol=1e-6)


def test_fedprox_coefficient_relation_and_term():
    assert fedprox.effective_coefficient(1e-2, 50) == pytest.approx(1e-4)
    st = _stacked()
    glob = {k: v[0] for k, v in st.items()}
    term = fedprox.proximal_term(st, glob)
    assert term[0] == 0
    manual = sum(float(((st[k][2] - glob[k]) ** 2).sum()) for k in st)
    assert float(term[2]) == pytest.approx(manual, rel=1e-5)


def test_dp_clipping_bounds_norm_and_leaves_small_deltas():
    deltas = {"w": torch.zeros(3, 4), "b": torch.zeros(3, 2)}
    deltas["w"][0, 0] = 3.0  # norm 5 with b[0,0] = 4
    deltas["b"][0, 0] = 4.0
    deltas["w"][1, 1] = 0.5  # norm 0.5 ≤ S: unchanged
    clipped, norms = dpfedavg.clip_deltas(deltas, 1.0)
    assert norms.tolist() == pytest.approx([5.0, 0.5, 0.0])
    new_norms = torch.sqrt(sum(v.pow(2).sum(-1) for v in clipped.values()))
    assert float(new_norms[0]) == pytest.approx(1.0, rel=1e-6)
    assert torch.equal(clipped["w"][1], deltas["w"][1]) and torch.equal(clipped["b"][1], deltas["b"][1])
    g = torch.Generator().manual_seed(0)
    big = {"w": torch.randn(10, 50, generator=g) * 10}
    c2, _ = dpfedavg.clip_deltas(big, 1.0)
    assert (c2["w"].norm(dim=1) <= 1.0 + 1e-5).all()


def test_dp_noise_std_matches_sigma_s_over_m():
    m, shape = 8, (200, 250)  # 50,000 entries
    glob = {"w": torch.zeros(shape, dtype=torch.float64)}
    stacked = {"w": torch.zeros((m, *shape), dtype=torch.float64)}  # zero deltas: pure noise
    out, _ = dpfedavg.aggregate(glob, stacked, np.ones(m), clip=1.0, sigma=2.0,
                                generator=torch.Generator().manual_seed(1))
    assert float(out["w"].std()) == pytest.approx(2.0 * 1.0 / m, rel=0.02)
    assert abs(float(out["w"].mean())) < 0.01 * 2.0 / m * 10


def test_rdp_epsilon_is_finite_and_decreases_with_noise():
    e1 = dpfedavg.rdp_epsilon(sigma=1.0, rounds=10, sampling_rate=1.0, delta=1e-5)
    e2 = dpfedavg.rdp_epsilon(sigma=4.0, rounds=10, sampling_rate=1.0, delta=1e-5)
    assert np.isfinite(e1) and e2 < e1
