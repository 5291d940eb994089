"""What every clustering backend shares: the broadcast summary and ``summary()``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The clustering backends by name, in the paper's table order: the one list RunConfig's --backend choices, the
# backend factory (``fit.BACKENDS``) and the reports read.
BACKEND_NAMES = ("gmm", "kmeans", "softkmeans", "minibatch")


@dataclass(frozen=True)
class ClusterSummary:
    """What the server broadcasts (SPEC §1 Phase 2): non-empty components only.

    centroids: float32 [K', dz]; counts: float64 [K'], every entry > 0.
    """

    centroids: np.ndarray
    counts: np.ndarray

    @property
    def k(self) -> int:
        """Number of broadcast components K'."""
        return int(len(self.counts))


def _summarise(centroids: np.ndarray, counts: np.ndarray, min_count: float = 0.0) -> ClusterSummary:
    """Keep components with N_k > min_count (SPEC §1: broadcast only non-empty ones)."""
    counts = np.asarray(counts, dtype=np.float64)
    keep = counts > min_count
    return ClusterSummary(
        centroids=np.ascontiguousarray(np.asarray(centroids)[keep], dtype=np.float32),
        counts=np.ascontiguousarray(counts[keep]),
    )


class _Backend:
    """Shared ``summary()`` for every backend (needs ``centroids_`` and ``counts_``)."""

    def batch_key(self, Z) -> tuple | None:
        """Fits with equal keys can share one batched computation (``fit_batch``); None, the default: this one
        cannot (a ``HostOrTorch`` backend's torch engine can)."""
        return None

    def summary(self, min_count: float = 0.0) -> ClusterSummary:
        """Centroids and counts of the components with N_k > ``min_count`` (default: non-empty)."""
        if not hasattr(self, "counts_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(Z) first")
        return _summarise(self.centroids_, self.counts_, min_count)


def _as_float64(Z) -> np.ndarray:
    return np.ascontiguousarray(Z, dtype=np.float64)


class HostOrTorch(_Backend):
    """A backend with a host engine ("sklearn": ``_fit_host``) and a torch engine on ``device`` (the device
    engine's GCA server's). Torch fits with equal :meth:`batch_key` share one batched computation
    (:meth:`fit_batch`, through the batched engine's broker), each with the numbers it gives alone. A subclass
    names what its torch fit depends on (``_batch_options``), runs it for many models (``_fit_torch``: per model a
    result, or the error its fit raises) and keeps a result (``_keep``)."""

    engine = "sklearn"
    device = None

    def _resolve_engine(self) -> str:
        if self.engine not in ("sklearn", "torch"):
            raise ValueError(f"unknown {type(self).__name__} engine {self.engine!r}; choose sklearn or torch")
        return self.engine

    def batch_key(self, Z) -> tuple | None:
        """Fits with equal keys run as one batched computation (:meth:`fit_batch`); None: the host's engine."""
        if self._resolve_engine() != "torch":
            return None
        return (type(self), np.shape(Z), *self._batch_options(), str(self.device or "cpu"))

    @classmethod
    def fit_batch(cls, models: list, Zs: list) -> list[BaseException | None]:
        """Fit ``models`` (equal :meth:`batch_key`) on their own codes as one computation, each to the numbers its
        own ``fit`` gives; per model, None or the error its ``fit`` would raise."""
        try:
            outs = cls._fit_torch(models, [_as_float64(Z) for Z in Zs])
        except ValueError as err:  # the codes' shape (fewer codes than clusters): every fit's error alike
            return [err] * len(models)
        errors = []
        for model, out in zip(models, outs, strict=True):
            model.engine_ = "torch"
            if not isinstance(out, BaseException):
                model._keep(out)
            errors.append(out if isinstance(out, BaseException) else None)
        return errors

    def fit(self, Z):
        self.engine_ = self._resolve_engine()
        if self.engine_ == "torch":
            (error,) = self.fit_batch([self], [Z])
            if error is not None:
                raise error
            return self
        return self._fit_host(_as_float64(Z))
