"""GCA's Phase 2 on sums: a diagonal Gaussian mixture fitted by EM from per-component sufficient statistics that
the clients compute and the server receives only summed over clients (secure aggregation, ``protocol.secagg``).

A client holds its round's upload sample (⌊ρ·N_i⌋ codes, as GCA samples them) and never sends it. Against the
mixture the server broadcasts it computes, for each component k, the responsibility total Σ γ_k, the sums
Σ γ_k·z and Σ γ_k·z² (the E-step); the server's M-step needs only their sums over clients. Before the first
mixture exists the clients send Σ z and Σ z² instead, and the server starts the mixture from those moments alone
(means drawn around the global mean with its seeded generator, the global variance, equal weights).

The statistics travel divided by the client's code count n_i and weighted by n_i, so that SecAgg+'s weighted mean
is Σ/Σ n_i, and divided by a public ``scale`` (its powers for Σ z²) so that they stay within SecAgg+'s clipping
range; the scale for the next round comes from the current mixture, the first from the moments.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedgca.protocol.clustering.base import ClusterSummary

REG_COVAR = 1e-6  # scikit-learn's GaussianMixture default, as the GMM backend


@dataclass(frozen=True)
class Mixture:
    means: np.ndarray  # [K, d]
    variances: np.ndarray  # [K, d]
    weights: np.ndarray  # [K], summing to 1
    scale: float  # the public scale the next statistics are sent in

    def payload(self) -> dict[str, np.ndarray]:
        """What the server broadcasts for the next E-step (float64: the clients' responsibilities)."""
        return {"means": self.means, "variances": self.variances, "weights": self.weights,
                "scale": np.array([self.scale])}

    @classmethod
    def empty(cls, scale: float) -> "Mixture":
        """No components: what the server sends before the first mixture (the clients answer with moments)."""
        return cls(np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0), scale)

    @classmethod
    def from_payload(cls, p: dict) -> "Mixture":
        return cls(np.asarray(p["means"], np.float64), np.asarray(p["variances"], np.float64),
                   np.asarray(p["weights"], np.float64), float(np.asarray(p["scale"]).ravel()[0]))


def moments(z: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """A client's first and second moments of its codes (in units of ``scale``), per code."""
    x = np.asarray(z, np.float64) / scale
    return {"m1": x.mean(axis=0), "m2": (x * x).mean(axis=0)}


def client_statistics(z: np.ndarray, mix: Mixture) -> dict[str, np.ndarray]:
    """What a client sends for ``mix``: its E-step statistics, or its moments when the mixture is still empty."""
    return moments(z, mix.scale) if len(mix.weights) == 0 else statistics(z, mix)


def statistics(z: np.ndarray, mix: Mixture) -> dict[str, np.ndarray]:
    """A client's E-step against ``mix``: per component Σγ, Σγ·z, Σγ·z² over its codes, per code, in units of
    the mixture's scale."""
    x = np.asarray(z, np.float64)
    log_p = -0.5 * (((x[:, None, :] - mix.means[None]) ** 2 / mix.variances[None]).sum(-1)
                    + np.log(2 * np.pi * mix.variances).sum(-1)[None]) + np.log(np.maximum(mix.weights, 1e-300))[None]
    log_p -= log_p.max(axis=1, keepdims=True)
    resp = np.exp(log_p)
    resp /= resp.sum(axis=1, keepdims=True)
    xs = x / mix.scale
    n = len(x)
    return {"s0": resp.sum(0) / n, "s1": resp.T @ xs / n, "s2": resp.T @ (xs * xs) / n}


def initial_mixture(m1: np.ndarray, m2: np.ndarray, scale: float, k: int, rng: np.random.Generator) -> Mixture:
    """The first mixture from the summed moments: K means drawn from N(mean, var), the global variance, equal
    weights (what the server may know: no client's codes)."""
    mean, var = m1 * scale, np.maximum(m2 - m1 * m1, 0.0) * scale ** 2 + REG_COVAR
    means = mean[None] + np.sqrt(var)[None] * rng.standard_normal((k, len(mean)))
    mix = Mixture(means, np.repeat(var[None], k, axis=0), np.full(k, 1.0 / k), scale)
    return Mixture(mix.means, mix.variances, mix.weights, next_scale(mix))


def m_step(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, previous: Mixture) -> Mixture:
    """The M-step from the summed statistics (in the previous mixture's scale); an emptied component keeps its
    previous parameters with weight 0."""
    c = previous.scale
    keep = s0 > 1e-12
    safe = np.where(keep, s0, 1.0)[:, None]
    means = np.where(keep[:, None], s1 / safe * c, previous.means)
    variances = np.where(keep[:, None], np.maximum(s2 / safe * c * c - means ** 2, 0.0) + REG_COVAR,
                         previous.variances)
    weights = np.where(keep, s0, 0.0)
    mix = Mixture(means, variances, weights / weights.sum(), c)
    return Mixture(mix.means, mix.variances, mix.weights, next_scale(mix))


def next_scale(mix: Mixture) -> float:
    """A scale in which every code the mixture expects (within 4 standard deviations) has |z|/scale ≤ 1."""
    return float(max(1.0, np.max(np.abs(mix.means) + 4 * np.sqrt(mix.variances))))


def broadcast(mix: Mixture, total_codes: int) -> ClusterSummary:
    """GCA's broadcast: the non-empty components' means and their expected code counts π_k·Σ n_i."""
    counts = mix.weights * total_codes
    keep = counts > 0
    return ClusterSummary(np.ascontiguousarray(mix.means[keep], dtype=np.float32),
                          np.ascontiguousarray(counts[keep], dtype=np.float64))
