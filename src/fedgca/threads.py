"""How many threads a process computes with: torch's intra-op pool and numpy/scipy's BLAS.

Small autoencoders gain nothing from intra-op threads, and BLAS on the tiny matrices of a tabular GMM
(16×16 covariances) is several times slower with more than one thread when cores are shared; a run
gets ``torch_threads`` for torch and one BLAS thread (unless the user set the BLAS variables).
"""
from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under ``taskset``), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


# A run's torch intra-op threads unless told otherwise: `fedgca run --threads`, a Flower node's `torch-threads`.
DEFAULT_TORCH_THREADS = 1

_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
_LIMITS: list = []  # keeps the BLAS limit in force for the life of the process


def limit_threads(torch_threads: int) -> None:
    user_set = any(v in os.environ for v in _BLAS_ENV)
    for v in _BLAS_ENV:
        os.environ.setdefault(v, "1")
    import scipy.linalg  # noqa: F401  (load the BLAS libraries so that the limit reaches them)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(torch_threads)
    if not user_set:
        _LIMITS.append(threadpool_limits(1, user_api="blas"))
