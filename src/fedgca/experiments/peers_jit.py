"""Imported by the local pool's fork server when a bench fits peers (``pool.PEER_PRELOAD``): PyOD's AutoEncoder
scores rows with a numba function (``pyod.utils.stat_models.pairwise_distances_no_broadcast``) that numba compiles
on its first call — ~8 s on this machine, more than the whole 50-epoch fit on a small ADBench file, and paid again
in every peer worker, since each fit runs in a fresh fork of the server. Compiled here, once, before the server
forks, every worker inherits the machine code.
"""
import numpy as np
from pyod.utils.stat_models import pairwise_distances_no_broadcast

# the types PyOD's AutoEncoder passes (its torch tensors' .numpy()): float32 rows in C order; numba compiles per type
_ROWS = np.zeros((1, 1), dtype=np.float32)
pairwise_distances_no_broadcast(_ROWS, _ROWS)
