"""The detection threshold τ (SPEC §5's one rule: the q-quantile of a client's training or validation scores) and
how reliable a τ from n rows is — used by the evaluation of both drivers, the detectors and the federation's
warning."""
from __future__ import annotations

import math

import numpy as np


def quantile_threshold(train_scores: np.ndarray, q: float = 0.75) -> float:
    """τ = the q-quantile of a client's training scores (numpy's linear interpolation): SPEC §5's one rule."""
    return float(np.quantile(train_scores, q))


# below this many validation rows a client's τ cannot keep its promise to ±10 pp (its flag rate's sd ≥ 9 pp)
FEW_THRESHOLD_ROWS = 20


def threshold_flag_rate(n: int, q: float = 0.75) -> tuple[float, float]:
    """(mean, sd) over clients of the share of new normal rows flagged by τ = the q-quantile (linear
    interpolation) of n exchangeable validation scores: F(τ) = (1−w)·U_(k) + w·U_(k+1) for uniform order
    statistics (h = q(n−1), k = ⌊h⌋+1, w = h − ⌊h⌋), whose means and covariances are Beta moments."""
    h = q * (n - 1)
    k, w = int(math.floor(h)) + 1, h - math.floor(h)
    j = min(k + 1, n)

    def cov(a: int, b: int) -> float:  # Cov(U_(a), U_(b)), a ≤ b
        return a * (n + 1 - b) / ((n + 1) ** 2 * (n + 2))

    mean = ((1 - w) * k + w * j) / (n + 1)
    var = (1 - w) ** 2 * cov(k, k) + w ** 2 * cov(j, j) + 2 * w * (1 - w) * cov(k, j)
    return 1 - mean, math.sqrt(var)


def few_threshold_rows(sizes, q: float = 0.75) -> str | None:
    """One line when the smallest client's τ comes from fewer than ``FEW_THRESHOLD_ROWS`` scores, else None."""
    n = int(min(sizes))
    if n >= FEW_THRESHOLD_ROWS:
        return None
    rate, sd = threshold_flag_rate(n, q)
    return (f"a client's threshold comes from {n} validation rows: predict() will flag about "
            f"{100 * rate:.0f} % of new normal rows (not {100 * (1 - q):.0f} %), ± {100 * sd:.0f} pp from "
            f"client to client; a larger --val-fraction or fewer --clients give it {FEW_THRESHOLD_ROWS}+ rows")


def quantile_thresholds(train_scores: list[np.ndarray], q: float = 0.75) -> np.ndarray:
    """τ_i for each client (``quantile_threshold`` per client)."""
    return np.array([quantile_threshold(s, q) for s in train_scores])
