"""Local epochs of many runs computed as one: the stacked engine's client axis extended across runs.

A run that trains under a :class:`EpochBroker` hands each local epoch (``loop.run_epoch``) to the broker and
waits. When every live run is waiting, the broker groups the epochs that can be computed as one — the same
architecture, batch size, trained parameters and loss form (``HandDifferentiated.form``) — and runs each group
as ONE stacked epoch over all its runs' clients: their parameters and Adam state concatenated along the client
axis, their shards padded to one, each client drawing its batches from its own generator as before. Each run
then gets its own clients' parameters, Adam state and epoch losses back. In the stacked engine a client's
computation does not depend on the other clients on the axis, so a run gives the numbers it gives alone
(``tests/test_lockstep.py``). An epoch that cannot be grouped (another loss form, a lone run) runs as it
would without the broker.

On a CPU core this buys little (a run there is compute-bound); on a GPU, where fedgca's shapes leave the card
launch-bound (docs/performance.md), it turns many small launches into few large ones.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedgca.training.loop import ClientShards, run_epoch
from fedgca.training.stacked import StackedAdam, StackedModels, concat_states, select_clients


@dataclass
class _Request:
    clients: StackedModels
    shards: ClientShards
    rngs: list
    batch_size: int
    loss_fn: Any
    keys: tuple[str, ...]
    participating: Tensor
    done: bool = False
    result: Tensor | None = None
    error: BaseException | None = None
    merged_with: int = 0  # how many runs shared its stacked epoch (1: alone)
    share: float = 0.0  # seconds of the (stacked) epoch's compute that were this run's: its share of the clients

    def group_key(self):
        """Epochs with equal keys compute as one stacked epoch (None: never grouped)."""
        form = getattr(self.loss_fn, "form", None)
        if form is None:
            return None
        shapes = tuple((k, tuple(v.shape[1:]), v.dtype) for k, v in self.clients.params.items())
        # as many mini-batch steps: a stacked epoch takes its longest member's steps for every member
        steps = -(-int(self.shards.sizes.max()) // self.batch_size)
        return (form, steps, self.batch_size, self.keys, shapes, tuple(self.shards.x.shape[2:]), self.shards.x.dtype,
                self.clients.device.type, id(self.clients.base.__class__), self.clients.optim.cfg)


@dataclass
class EpochBroker:
    """Collects the local epochs of the runs that joined it and computes them in stacked groups."""

    runs: int  # how many runs will train under it: each calls ``leave`` once, however it ends
    max_clients: int | None = None  # the most clients one stacked epoch may hold (memory); None: no limit
    stats: dict = field(default_factory=lambda: {"epochs": 0, "stacked_epochs": 0, "alone": 0})

    def __post_init__(self):
        self._cv = threading.Condition()
        self._live = int(self.runs)  # counted from the start, so that no run trains alone while others load
        self._pending: list[_Request] = []
        self._shard_cache: dict[tuple, ClientShards] = {}
        # id(a run's StackedModels) → [CPU seconds its thread spent inside epochs, its shares of the epochs' compute]
        self._spent: dict[int, list[float]] = {}

    def own_seconds(self, clients: StackedModels, thread_cpu: float) -> float:
        """A run's own compute time, given the CPU seconds its thread used (``time.thread_time``): what it computed
        outside its epochs, plus its share of each (stacked) epoch — not the time it waited for the other runs of
        the stack, nor the stacked epochs its thread happened to compute for all of them."""
        inside, share = self._spent.get(id(clients), (0.0, 0.0))
        return max(0.0, thread_cpu - inside) + share

    def attach(self, clients: StackedModels) -> None:
        """A run's models: their epochs come to this broker from now on."""
        clients.broker = self

    def leave(self) -> None:
        """A run is over (finished, failed, or never started): the others no longer wait for it."""
        with self._cv:
            self._live -= 1
            batch = self._take_if_ready()
        if batch:
            self._execute(batch)

    def _take_if_ready(self) -> list[_Request]:
        if self._pending and len(self._pending) >= self._live:
            batch, self._pending = self._pending, []
            return batch
        return []

    # ---- the epoch: called by loop.run_epoch in a run's thread ----
    def epoch(self, clients, shards, rngs, batch_size, loss_fn, keys, participating) -> Tensor:
        req = _Request(clients, shards, list(rngs), int(batch_size), loss_fn, tuple(keys), participating)
        cpu_in = time.thread_time()
        with self._cv:
            self._pending.append(req)
            batch = self._take_if_ready()
        if batch:
            self._execute(batch)
        with self._cv:
            while not req.done:
                self._cv.wait()
            spent = self._spent.setdefault(id(clients), [0.0, 0.0])
            spent[0] += time.thread_time() - cpu_in
            spent[1] += req.share
        if req.error is not None:
            raise req.error
        return req.result

    def _execute(self, batch: list[_Request]) -> None:
        groups: dict[Any, list[_Request]] = {}
        for req in batch:
            groups.setdefault(req.group_key() or ("alone", id(req)), []).append(req)
        try:
            for key, reqs in groups.items():
                for chunk in self._chunks(reqs):
                    self._run_group(chunk)
        finally:
            with self._cv:
                for req in batch:
                    req.done = True
                self._cv.notify_all()

    def _chunks(self, reqs: list[_Request]) -> list[list[_Request]]:
        if self.max_clients is None:
            return [reqs]
        out, cur, n = [], [], 0
        for r in reqs:
            c = r.clients.num_clients
            if cur and n + c > self.max_clients:
                out.append(cur)
                cur, n = [], 0
            cur.append(r)
            n += c
        return out + ([cur] if cur else [])

    def _run_group(self, reqs: list[_Request]) -> None:
        t0 = time.thread_time()  # the computing thread's CPU seconds: the unit of ``own_seconds``
        try:
            self._compute_group(reqs)
        finally:
            seconds, clients = time.thread_time() - t0, sum(r.clients.num_clients for r in reqs)
            for r in reqs:
                r.share = seconds * r.clients.num_clients / clients

    def _compute_group(self, reqs: list[_Request]) -> None:
        self.stats["epochs"] += len(reqs)
        if len(reqs) == 1:
            req = reqs[0]
            self.stats["alone"] += 1
            try:
                req.result = run_epoch(req.clients, req.shards, req.rngs, req.batch_size, req.loss_fn,
                                       list(req.keys), req.participating, broker=False)
                req.merged_with = 1
            except BaseException as err:  # noqa: BLE001 — handed to the run's own thread
                req.error = err
            return
        self.stats["stacked_epochs"] += 1
        try:
            merged = concat_models([r.clients for r in reqs])
            shards = self._merged_shards([r.shards for r in reqs])
            loss = reqs[0].loss_fn.merge([(r.loss_fn, r.clients.num_clients) for r in reqs], merged)
            part = torch.cat([r.participating.to("cpu", torch.bool) for r in reqs])
            losses = run_epoch(merged, shards, [g for r in reqs for g in r.rngs], reqs[0].batch_size, loss,
                               list(reqs[0].keys), part, broker=False)
            split_models(merged, [r.clients for r in reqs])
            start = 0
            for r in reqs:
                n = r.clients.num_clients
                r.result, r.merged_with = losses[start:start + n].clone(), len(reqs)
                start += n
        except BaseException as err:  # noqa: BLE001
            for r in reqs:
                r.error = err

    def _merged_shards(self, shards: list[ClientShards]) -> ClientShards:
        """The group's shards on one client axis, padded to the longest; made once per set of shards (a run's
        shards do not change), kept while the same set comes back."""
        key = tuple(id(s) for s in shards)
        hit = self._shard_cache.get(key)
        if hit is not None:
            return hit
        sizes = np.concatenate([s.sizes for s in shards])
        x = shards[0].x.new_zeros((len(sizes), int(sizes.max()), *shards[0].x.shape[2:]))
        start = 0
        for s in shards:
            x[start:start + s.num_clients, : s.x.shape[1]] = s.x
            start += s.num_clients
        merged = ClientShards(x, sizes)
        if len(self._shard_cache) > 64:  # groups change as runs finish: forget the old ones
            self._shard_cache.clear()
        self._shard_cache[key] = merged
        return merged


def concat_models(stacks: list[StackedModels]) -> StackedModels:
    """One stack of every client of ``stacks`` (same architecture), parameters and Adam state copied."""
    first = stacks[0]
    merged = StackedModels.__new__(StackedModels)
    merged.__dict__.update(first.__dict__)
    merged.broker = None
    merged.num_clients = sum(s.num_clients for s in stacks)
    merged.params = {k: torch.cat([s.params[k].detach() for s in stacks]).requires_grad_(True)
                     for k in first.params}
    merged.optim = StackedAdam(merged.params, first.optim.cfg, masked=first.optim.masked)
    merged.optim.load_state_dict(concat_states([s.optim.state_dict() for s in stacks]))
    return merged


@torch.no_grad()
def split_models(merged: StackedModels, stacks: list[StackedModels]) -> None:
    """Copy each stack's slice of ``merged`` (parameters, Adam state) back into it."""
    state = merged.optim.state_dict()
    start = 0
    for s in stacks:
        sl = slice(start, start + s.num_clients)
        for k, v in s.params.items():
            v.copy_(merged.params[k][sl])
        s.optim.load_state_dict(select_clients(state, sl))
        start += s.num_clients


__all__ = ["EpochBroker", "concat_models", "split_models"]
