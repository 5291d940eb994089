"""Every random draw in a run is derived from (seed, purpose, round, epoch, client).

Nothing carries RNG state from one round to the next, so a resumed run, the
in-process simulator and a Flower client all draw exactly the same numbers.
"""
from __future__ import annotations

import zlib

import numpy as np


def _purpose_code(purpose: str) -> int:
    return zlib.crc32(purpose.encode())


def rng(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A generator for one purpose ("batches", "upload", "cluster", ...) and integer keys."""
    return np.random.default_rng([int(seed), _purpose_code(purpose), *map(int, keys)])


def client_rngs(seed: int, purpose: str, keys: tuple[int, ...], client_ids) -> list[np.random.Generator]:
    """One generator per client, keyed by the client's global id (not its slot)."""
    return [rng(seed, purpose, *keys, int(c)) for c in client_ids]


def int_seed(seed: int, purpose: str, *keys: int) -> int:
    """A 31-bit integer seed for libraries that want one (scikit-learn, torch)."""
    return int(rng(seed, purpose, *keys).integers(0, 2**31 - 1))
