"""What Flower's SecAgg+ computes, and nothing it hides: the quantised weighted mean of the clients' vectors.

Flower's ``secaggplus_mod`` (client) and ``SecAggPlusWorkflow`` (server) carry the protocol — key agreement,
Shamir shares, pairwise and private masks, dropout recovery; fedgca adds no cryptography. Each client scales its
vector by its quantised weight q_i / T (q_i = round(w_i / W · T), T the quantisation range, W the largest
weight), clips it to ±c, quantises it stochastically to [0, T] and sends it masked; the masks cancel in the sum
modulo M, from which the server recovers Σ_i q_i and the dequantised Σ_i (q_i/T)·x_i, and returns
(Σ_i (q_i/T)·x_i) / (Σ_i q_i / T) — a weighted mean whose weights are the quantised w_i.

``secure_mean`` computes that same value from the clients' vectors without masks (they cancel exactly in integer
arithmetic modulo M), with Flower's own quantisation functions and the same stochastic rounding draws: the
in-process simulator's sum, equal to the last bit to what a Flower server unmasks. The rounding draws come from
NumPy's global generator (Flower's ``_stochastic_round``); both drivers seed it per client and round
(``rounding_seed``) around the call and restore it after.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_combine,
    factor_extract,
    parameters_mod,
    parameters_multiply,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize

from fedgca import seeding


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+'s parameters (Flower's names): the values are clipped to ±``clipping_range`` and quantised to
    [0, ``quantization_range``]; sums are taken modulo ``modulus_range``; ``max_weight`` is W (fedgca: the largest
    N_i the server registered, so that every q_i ≤ T); each client's secrets are split into ``num_shares`` shares
    of which ``reconstruction_threshold`` recover them — a round survives dropouts while that many remain."""

    max_weight: float
    num_shares: float = 1.0  # a fraction: of the sampled clients
    reconstruction_threshold: float = 0.5  # a fraction: of the shares
    clipping_range: float = 8.0
    quantization_range: int = 2 ** 22
    modulus_range: int = 2 ** 32


def masked_bytes(arrays: dict) -> int:
    """Bytes of one client's masked vector: its quantised weight and every value, as int64 (Flower's masks)."""
    return 8 * (1 + sum(int(np.prod(a.shape)) for a in arrays.values()))


def rounding_seed(seed: int, round_idx: int, client_id: int) -> int:
    """The seed of a client's stochastic rounding in a round (NumPy's global generator takes 32 bits)."""
    return seeding.int_seed(seed, "secagg-rounding", round_idx, client_id) % 2 ** 32


@contextlib.contextmanager
def seeded_rounding(seed: int):
    """NumPy's global generator seeded for one client's quantisation, and restored afterwards."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def client_vector(arrays: list[np.ndarray], weight: float, s: SecAggSettings) -> list[np.ndarray]:
    """What ``secaggplus_mod`` makes of a client's arrays before masking them: its quantised weight, then the
    quantised weighted arrays (under ``seeded_rounding``)."""
    q_ratio = round(weight / s.max_weight * s.quantization_range)
    scaled = parameters_multiply(arrays, q_ratio / s.quantization_range)
    return factor_combine(q_ratio, quantize(scaled, s.clipping_range, s.quantization_range))


def server_mean(total: list[np.ndarray], participants: int, s: SecAggSettings) -> list[np.ndarray]:
    """What ``SecAggPlusWorkflow`` makes of the unmasked sum (already reduced modulo M) of ``participants``
    clients' vectors: the weighted mean, float64."""
    q_total, summed = factor_extract(total)
    out = dequantize(summed, s.clipping_range, s.quantization_range)
    offset = -(participants - 1) * s.clipping_range
    for vec in out:
        vec += offset
        vec *= s.quantization_range / q_total
    return out


def secure_mean(vectors: list[list[np.ndarray]], weights: list[float], seeds: list[int],
                s: SecAggSettings) -> list[np.ndarray]:
    """The weighted mean SecAgg+ returns for these clients' arrays (each client's rounding seeded by ``seeds``)."""
    total = None
    for arrays, w, sd in zip(vectors, weights, seeds):
        with seeded_rounding(sd):
            v = [a.astype(np.int64) for a in client_vector(arrays, w, s)]
        total = v if total is None else [a + b for a, b in zip(total, v)]
    return server_mean(parameters_mod(total, s.modulus_range), len(vectors), s)
