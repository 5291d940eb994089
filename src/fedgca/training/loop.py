"""Mini-batch epochs over stacked clients (shared by every method and by Flower clients)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

import numpy as np
import torch
from torch import Tensor

from fedgca.devices import to_numpy
from fedgca.training.stacked import StackedModels

# loss_fn(x_batch [C, B, *shape], mask [C, B]) -> per-client loss [C]
LossFn = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class HandDifferentiated:
    """A LossFn with a hand-written backward pass beside it (``StackedModels.loss_and_grads``):
    ``loss_and_grads(x_batch, mask)`` -> (loss [C], {parameter name: gradient}), autograd's gradients bit
    for bit. ``run_epoch`` steps with it instead of recording a graph."""

    value: LossFn
    loss_and_grads: Callable[[Tensor, Tensor], tuple[Tensor, dict[str, Tensor]]]
    # For the batched engine (``training.lockstep``): losses of one ``form`` from several runs become one
    # loss over their concatenated clients, ``merge([(loss, its clients), ...], merged_clients)``, reading
    # each run's ``merge_data`` (its centroids, ...); form None: never merged.
    form: Hashable | None = None
    merge: Callable[[list, StackedModels], "HandDifferentiated"] | None = field(default=None, compare=False)
    merge_data: object = field(default=None, compare=False)

    def __call__(self, xb: Tensor, mask: Tensor) -> Tensor:
        return self.value(xb, mask)


@dataclass
class ClientShards:
    """Each client's local rows, padded to a common length along a client axis."""

    x: Tensor  # [C, N_max, *input_shape]
    sizes: np.ndarray  # [C] real row counts

    @classmethod
    def from_arrays(cls, arrays: list[np.ndarray], dtype: torch.dtype = torch.float32,
                    device: torch.device | str = "cpu") -> "ClientShards":
        sizes = np.array([len(a) for a in arrays], dtype=np.int64)
        shape = arrays[0].shape[1:]
        x = torch.zeros((len(arrays), int(sizes.max()), *shape), dtype=dtype, device=device)
        for i, a in enumerate(arrays):
            x[i, : len(a)] = torch.as_tensor(a, dtype=dtype, device=device)
        return cls(x, sizes)

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    def client(self, i: int) -> Tensor:
        return self.x[i, : self.sizes[i]]

    def only(self, i: int) -> "ClientShards":
        """Client i's rows alone, as a one-client ClientShards (a view, no padding)."""
        return ClientShards(self.x[i : i + 1, : self.sizes[i]], self.sizes[i : i + 1].copy())


def batch_plan(rngs: list[np.random.Generator], sizes: np.ndarray, batch_size: int) -> tuple[Tensor, Tensor]:
    """One epoch's shuffled mini-batches for every client, in lock-step.

    Returns indices [S, C, B] and a row mask [S, C, B] (0 for padding), with
    S = the largest client's batch count; a client with fewer batches has
    all-zero masks in the trailing steps and does not step there.
    Each client's permutation comes from its own generator, so a lone client
    (the reference loop, a Flower client) draws exactly what it draws here.
    """
    return tuple(torch.from_numpy(a) for a in host_batch_plan(rngs, sizes, batch_size))


def host_batch_plan(rngs: list[np.random.Generator], sizes: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``batch_plan`` as NumPy arrays (int64 indices, float32 mask)."""
    n_steps = int(np.ceil(sizes.max() / batch_size))
    idx = np.zeros((n_steps * batch_size, len(sizes)), dtype=np.int64)
    mask = np.zeros_like(idx, dtype=np.float32)
    for c, n in enumerate(sizes):
        idx[:n, c] = rngs[c].permutation(int(n))
        mask[:n, c] = 1.0
    shape = (n_steps, batch_size, len(sizes))
    return idx.reshape(shape).transpose(0, 2, 1).copy(), mask.reshape(shape).transpose(0, 2, 1).copy()


def run_epoch(
    clients: StackedModels,
    shards: ClientShards,
    rngs: list[np.random.Generator],
    batch_size: int,
    loss_fn: LossFn,
    keys: list[str],
    participating: Tensor,
    broker: bool = True,
) -> Tensor:
    """One local epoch of mini-batch Adam for the participating clients, on parameters ``keys``.

    Returns each client's mean batch loss over the epoch [C] (0 for absent clients). Models that joined a
    batched engine's broker (``training.lockstep``) hand the epoch to it (``broker=False``: the broker's own
    call), which computes it together with other runs' epochs.
    """
    if broker and clients.broker is not None:
        return clients.broker.epoch(clients, shards, rngs, batch_size, loss_fn, keys, participating)
    dev = shards.device
    idx, mask = host_batch_plan(rngs, shards.sizes, batch_size)  # drawn on the host
    mask *= to_numpy(participating).astype(np.float32)[:, None]  # 0/1 times 0/1: exact wherever computed
    # which clients step at each step [S, C], read off the host's plan: nothing inside the loop reads the device
    active_host = mask.sum(-1) > 0
    idx, mask = torch.from_numpy(idx).to(dev), torch.from_numpy(mask).to(dev)
    active_steps = torch.from_numpy(active_host).to(dev)  # the device engine's step reads it there
    # the fused step: the stepping clients' indices
    stepping = None if clients.optim.masked else [np.flatnonzero(row).tolist() for row in active_host]
    steps_on = torch.from_numpy(active_host.astype(np.float32)).to(dev)
    rows = torch.arange(shards.num_clients, device=dev).unsqueeze(-1)
    total, n_batches = torch.zeros(shards.num_clients, device=dev), torch.zeros(shards.num_clients, device=dev)
    params = [clients.params[k] for k in keys]
    for step in range(idx.shape[0]):
        if not active_host[step].any():
            continue
        xb = shards.x[rows, idx[step]]
        if isinstance(loss_fn, HandDifferentiated):
            loss, grads = loss_fn.loss_and_grads(xb, mask[step])
            grads = {k: grads[k] for k in keys}
        else:
            loss = loss_fn(xb, mask[step])
            grads = dict(zip(keys, torch.autograd.grad(loss.sum(), params)))
        clients.optim.step_active(grads, active_steps[step], None if stepping is None else stepping[step])
        active = steps_on[step]
        total += loss.detach() * active
        n_batches += active
    clients.optim.end_epoch(participating)
    return total / n_batches.clamp_min(1)
