"""Imported by the local pool's fork server when a bench fits peers (``pool.PEER_PRELOAD``): PyOD's AutoEncoder
scores rows with a numba function (``pyod.utils.stat_models.pairwise_distances_no_broadcast``) that numba compiles
on its first call — ~8 s on this machine, more than the whole 50-epoch fit on a small ADBench file, paid by each peer
worker on its first fit and recorded as that fit's time. Compiled here, once, before the server forks, every worker
inherits the machine code.
"""
import numpy as np
from pyod.utils.stat_models import pairwise_distances_no_broadcast

# numba compiles per argument type: the AutoEncoder scores float32 rows in C order (its CPU tensors' arrays)
_ROWS = np.zeros((1, 1), dtype=np.float32)
pairwise_distances_no_broadcast(_ROWS, _ROWS)
