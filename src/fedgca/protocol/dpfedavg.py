"""DP-FedAvg (SPEC §2): clipped, noised FedAvg — a noisy-update baseline, not a certified mechanism."""
from __future__ import annotations

import torch
from torch import Tensor

from fedgca.protocol.fedavg import Params, sample_weights


def clip_deltas(deltas: Params, clip: float) -> tuple[Params, Tensor]:
    """Δ_i · min(1, S/||Δ_i||) with ||Δ_i|| the global L2 norm over all of client i's tensors."""
    norms = torch.sqrt(sum(d.pow(2).flatten(1).sum(-1) for d in deltas.values()))
    scale = torch.clamp(clip / norms.clamp_min(1e-12), max=1.0)
    return {k: d * scale.view(-1, *[1] * (d.dim() - 1)) for k, d in deltas.items()}, norms


def aggregate(global_params: Params, stacked: Params, sizes, *, clip: float, sigma: float,
              generator: torch.Generator) -> tuple[Params, Tensor]:
    """θ + Σ p_i clip(Δ_i) + N(0, (σ·S/m)²) per entry, m = number of participants."""
    deltas = {k: stacked[k] - global_params[k].unsqueeze(0) for k in global_params}
    clipped, norms = clip_deltas(deltas, clip)
    p = sample_weights(sizes)
    std = sigma * clip / len(p)
    out = {}
    for k, g in global_params.items():
        # drawn on the CPU by the seeded generator on every device (fedgca.devices), then moved
        noise = (torch.randn(g.shape, generator=generator, dtype=g.dtype, device="cpu") * std).to(g.device)
        out[k] = g + torch.einsum("c,c...->...", p.to(g.device, g.dtype), clipped[k]) + noise
    return out, norms


def rdp_epsilon(*, sigma: float, rounds: int, sampling_rate: float, delta: float) -> float:
    """(ε, δ) an RDP accountant (Google's dp-accounting) assigns to this noise configuration.

    User-level: one client's whole contribution is the unit; its clipped delta
    has sensitivity S/m in a uniformly weighted mean, against noise std σS/m —
    noise multiplier σ — sampled with rate q = m/C, composed over the rounds.
    That is what the noise *would* give; the baseline itself (N_i weighting,
    no secure aggregation) is not certified.
    """
    import dp_accounting

    event = dp_accounting.GaussianDpEvent(sigma)
    if sampling_rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(sampling_rate, event)
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    return float(accountant.get_epsilon(delta))


def accounting_record(*, sigma: float, clip: float, delta: float, rounds: int, clients: int, participants: int,
                      clip_norms: list[list[float]] | None = None) -> dict:
    """summary.json's ``dp`` block: what this noise gives under user-level RDP, and how often updates were clipped."""
    import numpy as np

    eps = rdp_epsilon(sigma=sigma, rounds=rounds, sampling_rate=participants / clients, delta=delta)
    fraction = (float(np.mean([np.mean(np.array(n) > clip) for n in clip_norms])) if clip_norms else None)
    return {"epsilon": eps, "delta": delta, "noise_multiplier": sigma, "clip": clip,
            "accountant": "RDP (dp-accounting), user-level",
            "label": "what this noise would give under user-level RDP accounting; "
                     "the baseline itself is not a certified DP mechanism",
            "fraction_clipped": fraction}
