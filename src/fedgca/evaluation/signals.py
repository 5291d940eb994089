"""Label-free selection signals (issue #47): how good a client's model is, from its own validation normals alone.

A run chooses which model each client deploys — the untrained one (round 0) or a round's — by one of
``SELECTIONS``. Every signal reads only a client's held-out validation normals ``V`` and its model's scores; no
test row or label reaches one (tests/test_selection.py tampers with both and requires the same choice).

* ``val-error``: the mean reconstruction error on ``V`` (the lowest wins);
* ``proxy-<generator>``: a proxy AUROC — the model's scores on ``V`` against synthetic anomalies made from ``V``
  by one generator of ``GENERATORS`` (the highest wins). The synthetic rows are drawn once per client with the run
  seed and the client id, the same rows at every round.

docs/results/adbench/signals measures each against the test-label oracle on the 25 shared ADBench files.
"""
from __future__ import annotations

import numpy as np

from fedgca import seeding

GENERATORS = ("shuffle", "noise", "outside", "mixed")
# The run option's choices: today's rule (one round for the federation, the lowest mean validation error over the
# trained rounds) and the per-client rules over the untrained model and every round's.
FEDERATION_VAL_ERROR = "federation-val-error"
# No choice: each client deploys the mean of its models' standardised scores over the untrained model and every
# round's (a snapshot ensemble; each model's reconstruction error standardised on the client's validation rows).
ENSEMBLE_ROUNDS = "ensemble-rounds"
SELECTIONS = (FEDERATION_VAL_ERROR, "client-val-error", *(f"client-proxy-{g}" for g in GENERATORS), ENSEMBLE_ROUNDS)
PURPOSE = "synthetic-anomalies-{}"  # seeding purpose of a generator's rows (the signals study used the same)


def synthetic_anomalies(normals: np.ndarray, kind: str, rng: np.random.Generator, count: int | None = None) \
        -> np.ndarray:
    """Synthetic anomalies made from a client's own validation normals ``normals`` [n, ...] alone: [m, d] with
    m = ``count`` or max(200, n), d the flattened row size.

    * ``shuffle``: each feature drawn from its own column independently (the marginals kept, every dependence
      between features broken: a row no normal would have as a whole — ADBench's dependency anomalies);
    * ``noise``: a normal row moved by Gaussian noise of one column standard deviation per feature (a local
      perturbation: an anomaly near the normal manifold — ADBench's local anomalies);
    * ``outside``: uniform in the box of the columns' ranges widened by half their span each side (ADBench's
      global anomalies);
    * ``mixed``: a third of each.
    """
    x = np.asarray(normals, dtype=np.float64).reshape(len(normals), -1)
    n, d = x.shape
    if n == 0:
        raise ValueError("no validation rows to make synthetic anomalies from")
    m = count or max(200, n)
    if kind == "shuffle":
        return np.stack([x[rng.integers(0, n, m), j] for j in range(d)], axis=1)
    if kind == "noise":
        sd = x.std(axis=0) if n > 1 else np.ones(d)
        return x[rng.integers(0, n, m)] + rng.standard_normal((m, d)) * np.where(sd > 0, sd, 1.0)
    if kind == "outside":
        lo, hi = x.min(axis=0), x.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        return rng.uniform(lo - span / 2, hi + span / 2, (m, d))
    if kind == "mixed":
        parts = [synthetic_anomalies(x, k, rng, -(-m // 3)) for k in ("shuffle", "noise", "outside")]
        return np.concatenate(parts)[:m]
    raise ValueError(f"unknown generator {kind!r}; choose from {', '.join(GENERATORS)}")


def client_anomalies(normals: np.ndarray, kind: str, seed: int, client_id: int) -> np.ndarray:
    """Client ``client_id``'s synthetic anomalies for a run of ``seed``, shaped like its rows."""
    x = np.asarray(normals)
    fake = synthetic_anomalies(x, kind, seeding.rng(seed, PURPOSE.format(kind), client_id))
    return fake.reshape(-1, *x.shape[1:])


def signal_of(selection: str) -> str:
    """The signal a selection rule reads: ``val-error`` or ``proxy-<generator>``."""
    if selection not in SELECTIONS or selection == ENSEMBLE_ROUNDS:
        raise ValueError(f"unknown selection signal {selection!r}; choose from "
                         f"{', '.join(s for s in SELECTIONS if s != ENSEMBLE_ROUNDS)}")
    return "val-error" if selection == FEDERATION_VAL_ERROR else selection.removeprefix("client-")


def higher_is_better(signal: str) -> bool:
    return signal.startswith("proxy-")


def generator_of(signal: str) -> str | None:
    return signal.removeprefix("proxy-") if signal.startswith("proxy-") else None


def proxy_auroc(normal_scores: np.ndarray, fake_scores: np.ndarray) -> float:
    """AUROC of a model's scores with the validation normals as negatives and the synthetic rows as positives."""
    from fedgca.evaluation.metrics import auroc_rows

    s = np.concatenate([np.asarray(normal_scores, np.float64), np.asarray(fake_scores, np.float64)])[None, :]
    y = np.r_[np.zeros(len(normal_scores), bool), np.ones(len(fake_scores), bool)]
    if not np.isfinite(s).all():  # a diverged model ranks nothing
        return float("nan")
    return float(auroc_rows(s, y)[0])


def choose(history: np.ndarray, signal: str, shared: bool) -> np.ndarray:
    """Each client's chosen candidate from ``history`` [candidates, clients] of ``signal``'s values (candidate j
    is the model after j rounds, 0 = untrained): the best value per client, or — where every client deploys one
    shared model — the best mean over clients, one candidate for all. The first best wins ties; a NaN never does."""
    h = np.asarray(history, dtype=np.float64)
    if higher_is_better(signal):
        h = -h
    h = np.where(np.isfinite(h), h, np.inf)
    if shared:
        return np.full(h.shape[1], int(np.argmin(h.mean(axis=1))))
    return np.argmin(h, axis=0)


def standardisation(validation_scores: np.ndarray) -> tuple[float, float]:
    """(mean, std) of a model's scores on a client's validation normals: what makes models' scores comparable in
    an ensemble (a std of 0 counts as 1e-12)."""
    v = np.asarray(validation_scores, dtype=np.float64)
    return float(v.mean()), max(float(v.std()), 1e-12)
