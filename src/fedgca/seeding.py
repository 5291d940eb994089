"""Every random draw in a run is derived from (seed, purpose, round, epoch, client).

Nothing carries RNG state from one round to the next, so a resumed run, the
in-process simulator and a Flower client all draw exactly the same numbers.
"""
from __future__ import annotations

import contextlib
import threading
import zlib

import numpy as np

# torch's global generator is one per process: seeding it and drawing from it must not interleave between
# threads (the batched engine runs each run in a thread of its own); every draw from it in fedgca (module
# initialisers, in models.build_model) happens under this lock
TORCH_GLOBAL_RNG = threading.RLock()


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


@contextlib.contextmanager
def torch_global_seed(seed: int):
    """torch's global CPU generator seeded with ``seed`` for the block (library code that draws from it: module
    initialisers), restored after and held by one thread at a time."""
    import torch

    with TORCH_GLOBAL_RNG, torch.random.fork_rng(devices=[]), torch.device("cpu"):
        # the CPU generator alone: ``torch.manual_seed`` would also reseed every accelerator's generators, which
        # fork_rng(devices=[]) does not restore, and where none is initialised it queues those seeds with a
        # formatted stack each time (~2 ms a call, paid per model built)
        torch.default_generator.manual_seed(seed)
        yield
