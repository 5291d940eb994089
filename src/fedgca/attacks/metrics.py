"""Leakage metrics of the server-side extraction attacks (SPEC §6).

Targets T = the victim's complete training shard, outputs R = the attack's
reconstructions T(x*), reference bank H = 100 normal records excluded from
training (fixed per seed). For each target x:

* r*(x) = the MSE-nearest output, h*(x) = the MSE-nearest reference record;
* NTMSE = mean_x MSE(x, r*(x)) / mean_x MSE(x, h*(x));
* Δcos = mean_x cos(x, r*(x)) − mean_x cos(x, h*(x)) — cosine against the
  MSE-selected records, not the cosine-best ones.

Higher NTMSE and lower Δcos = less leakage. Images are flattened to vectors.
Everything is computed in float64 with numpy; the pairwise distances are
chunked over targets so 25,000 × 100 (or image-sized rows) stays light.
"""
from __future__ import annotations

import numpy as np

from fedgca import seeding
from fedgca.devices import to_numpy

CHUNK_ROWS = 2048
COS_EPS = 1e-12

__all__ = ["leakage_metrics", "nearest_by_mse", "select_reference_bank", "CHUNK_ROWS"]


def _as_matrix(a) -> np.ndarray:
    """A [N, d] float64 array from a numpy array or torch tensor of shape [N, ...]."""
    if hasattr(a, "detach"):
        a = to_numpy(a)
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(len(a), -1)


def nearest_by_mse(targets, candidates, *, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """Index of the MSE-nearest candidate for every target (first index on ties).

    Squared distances via ||x||² − 2 x·c + ||c||² (the ||x||² term is constant
    per row and dropped for the argmin), ``chunk_rows`` targets at a time.
    """
    x, c = _as_matrix(targets), _as_matrix(candidates)
    if x.shape[1] != c.shape[1]:
        raise ValueError(f"feature widths differ: targets {x.shape[1]}, candidates {c.shape[1]}")
    if len(c) == 0:
        raise ValueError("no candidates to compare against")
    c_sq = np.einsum("ij,ij->i", c, c)
    out = np.empty(len(x), dtype=np.int64)
    for start in range(0, len(x), chunk_rows):
        block = x[start : start + chunk_rows]
        out[start : start + len(block)] = np.argmin(c_sq[None, :] - 2.0 * block @ c.T, axis=1)
    return out


def _mse_and_cos(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise MSE (mean over features) and cosine similarity of paired rows."""
    mse = np.mean((x - y) ** 2, axis=1)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    cos = np.einsum("ij,ij->i", x, y) / np.maximum(norms, COS_EPS)
    return mse, cos


def leakage_metrics(targets, outputs, reference, *, chunk_rows: int = CHUNK_ROWS) -> dict:
    """NTMSE and Δcos of SPEC §6 for targets [N, ...], outputs [R, ...], reference [H, ...].

    Returns ``ntmse``, ``delta_cos`` and their parts: ``mse_output`` /
    ``mse_reference`` (mean_x MSE to r*(x) / h*(x)), ``cos_output`` /
    ``cos_reference`` (mean_x cosine to the same records), plus the row
    counts. Cosine with an all-zero vector counts as 0.
    """
    x, r, h = _as_matrix(targets), _as_matrix(outputs), _as_matrix(reference)
    if len(x) == 0:
        raise ValueError("no targets")
    r_star = r[nearest_by_mse(x, r, chunk_rows=chunk_rows)]
    h_star = h[nearest_by_mse(x, h, chunk_rows=chunk_rows)]
    mse_r, cos_r = _mse_and_cos(x, r_star)
    mse_h, cos_h = _mse_and_cos(x, h_star)
    mse_output, mse_reference = float(mse_r.mean()), float(mse_h.mean())
    cos_output, cos_reference = float(cos_r.mean()), float(cos_h.mean())
    ntmse = mse_output / mse_reference if mse_reference > 0 else float("inf") if mse_output > 0 else float("nan")
    return {
        "ntmse": ntmse,
        "delta_cos": cos_output - cos_reference,
        "mse_output": mse_output,
        "mse_reference": mse_reference,
        "cos_output": cos_output,
        "cos_reference": cos_reference,
        "n_targets": len(x),
        "n_outputs": len(r),
        "n_reference": len(h),
    }


def select_reference_bank(n_total: int, n_ref: int = 100, *, seed: int) -> np.ndarray:
    """Sorted indices of the ``n_ref`` reference records among ``n_total`` (SPEC §6).

    Fixed per seed (a private generator keyed by the seed and the purpose
    "reference_bank"); the caller excludes these rows from training.
    """
    if not 0 <= n_ref <= n_total:
        raise ValueError(f"cannot pick {n_ref} reference records from {n_total}")
    gen = seeding.rng(seed, "reference_bank")
    return np.sort(gen.choice(n_total, size=n_ref, replace=False))
