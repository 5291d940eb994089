"""Mini-batch epochs over stacked clients (shared by every method and by Flower clients)."""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable

import numpy as np
import torch
from torch import Tensor

from fedgca.devices import to_numpy
from fedgca.training.stacked import StackedModels

log = logging.getLogger("fedgca")

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


# CUDA graphs: an epoch of at least this many steps captures its step once and replays it (a capture costs about
# as much as a few eager steps); FEDGCA_CUDA_GRAPHS=0 keeps every step eager
GRAPH_MIN_STEPS = 4
_graphs_failed = False  # a capture that failed once (an op torch cannot capture): eager for the rest of the process
# One capture at a time in a process (torch's rule), while the batched engine's other stacks keep launching on
# their own streams: hence a lock, and "thread_local" capture, under which only the capturing thread's unsafe calls
# (an allocation, a synchronisation) break it, not another stack's. torch.cuda.graph's context is not used: it
# synchronises the whole device and empties the allocator's cache on entry, which every stack would pay per epoch.
_capture_lock = threading.Lock()
_capture_streams: dict = {}  # device -> the side stream captures run on


def _capture(graph, step: Callable[[], None]) -> None:
    with _capture_lock:
        dev = torch.cuda.current_device()
        side = _capture_streams.get(dev)
        if side is None:
            side = _capture_streams[dev] = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                step()
            finally:
                graph.capture_end()


class StepProgram:
    """The device engine's mini-batch step on fixed buffers: the batch's row indices, mask and stepping clients are
    copied into them, and the step — gather, forward, hand-written backward, ``StackedAdam.step_masked``, the
    epoch's loss sums — reads nothing else that changes. So on CUDA it is captured once per epoch and replayed
    (``torch.cuda.CUDAGraph``): one launch per step instead of one per operation, the launch overhead that bounds a
    GPU at fedgca's shapes (../shared/GPU.md). Elsewhere, or when capture is off or fails, the same function runs
    eagerly, which is how the CPU checks it (tests/test_device_engine.py): the numbers of ``run_epoch``'s own
    loop, bit for bit.
    """

    def __init__(self, clients: StackedModels, shards: ClientShards, loss_fn: HandDifferentiated, keys, batch_size,
                 n_steps: int):
        n, dev = shards.num_clients, shards.device
        self.clients, self.shards, self.loss_fn, self.keys = clients, shards, loss_fn, list(keys)
        self.idx = torch.zeros(n, batch_size, dtype=torch.long, device=dev)
        self.mask = torch.zeros(n, batch_size, device=dev)
        self.active = torch.zeros(n, dtype=torch.bool, device=dev)
        self.rows = torch.arange(n, device=dev).unsqueeze(-1)
        self.total, self.n_batches = torch.zeros(n, device=dev), torch.zeros(n, device=dev)
        self.steps = 0
        self.graph = None
        self.capture = (dev.type == "cuda" and n_steps >= GRAPH_MIN_STEPS and not _graphs_failed
                        and os.environ.get("FEDGCA_CUDA_GRAPHS", "1") != "0")

    def step(self) -> None:
        xb = self.shards.x[self.rows, self.idx]
        loss, grads = self.loss_fn.loss_and_grads(xb, self.mask)
        self.clients.optim.step_masked({k: grads[k] for k in self.keys}, self.active)
        on = self.active.to(self.total.dtype)
        self.total.add_(loss * on)
        self.n_batches.add_(on)

    def run(self, idx: Tensor, mask: Tensor, active: Tensor) -> None:
        self.idx.copy_(idx)
        self.mask.copy_(mask)
        self.active.copy_(active)
        if self.graph is not None:
            self.graph.replay()
        elif self.capture and self.steps >= 1:  # the first step ran eagerly: cuBLAS and the allocator are warm
            self._capture_and_replay()
        else:
            self.step()
        self.steps += 1

    def _capture_and_replay(self) -> None:
        global _graphs_failed
        graph = torch.cuda.CUDAGraph()
        try:
            _capture(graph, self.step)
        except Exception as err:  # noqa: BLE001 — the eager step is the fallback; a capture records, never runs
            _graphs_failed = True
            self.capture = False
            log.warning("CUDA graph capture failed (%s): the steps run eagerly", err)
            self.step()
            return
        self.graph = graph
        graph.replay()


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
    if clients.optim.masked and isinstance(loss_fn, HandDifferentiated):
        steps = np.flatnonzero(active_host.any(-1))
        program = StepProgram(clients, shards, loss_fn, keys, batch_size, len(steps))
        for step in steps:
            program.run(idx[step], mask[step], active_steps[step])
        clients.optim.end_epoch(participating)
        return program.total / program.n_batches.clamp_min(1)
    # the fused step (the CPU), and losses differentiated by autograd: the stepping clients' indices
    stepping = None if clients.optim.masked else [np.flatnonzero(row).tolist() for row in active_host]
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
        active = active_steps[step]
        clients.optim.step_active(grads, active, None if stepping is None else stepping[step])
        total += loss.detach() * active
        n_batches += active
    clients.optim.end_epoch(participating)
    return total / n_batches.clamp_min(1)
