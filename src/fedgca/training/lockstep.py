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

A GCA server's clustering comes to the broker the same way (``clustering``): the fits that can share one
batched computation (``batch_key``: the device engine's full-covariance torch GMM and torch K-means, codes of
one shape) wait with the epochs and are fitted as one (``GMMBackend.fit_batch``), each to the numbers it gives
alone; any other fit (scikit-learn's, on a CPU) runs in its run's own thread, as without the broker. So does
the device engine's scoring (``scores``, from ``evaluation.metrics``): the runs' models on one client axis, their
rows padded to one block, one forward pass and one read back to the host for all of them — of the scores, or,
for the test rows, of what the runs compute from them on the device (their clients' detection metrics, all
runs' as one computation: ``evaluation.metrics.RowMetrics``).

On a CPU core this buys little (a run there is compute-bound); on a GPU, where fedgca's shapes leave the card
launch-bound (docs/performance.md), it turns many small launches into few large ones.
"""
from __future__ import annotations

import copy
import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedgca.training.loop import ClientShards, run_epoch
from fedgca.training.stacked import StackedAdam, StackedModels


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
class _FitRequest:
    """A clustering model to fit on a run's codes; requests with equal ``key`` are fitted as one."""

    model: Any
    Z: np.ndarray
    key: tuple
    done: bool = False
    error: BaseException | None = None
    share: float = 0.0

    def group_key(self):
        return ("fit", self.key)


@dataclass
class _ScoreRequest:
    """Rows to score with a run's models (``evaluation.metrics``): x [M, d] shared by its clients or [C, M, d]
    each its own; requests with equal ``group_key`` are scored as one."""

    clients: StackedModels
    x: Tensor
    compute: Any  # (models, rows) → scores [C, M]: the scoring function, handed in (evaluation is above training)
    # None: the scores are the result; else what is computed from them before the read back, for every request
    # of the group with the same kind and row count at once: ``type(then).of_many(thens, scores)``
    then: Any = None
    done: bool = False
    result: Tensor | None = None
    error: BaseException | None = None
    share: float = 0.0

    def group_key(self):
        shapes = tuple((k, tuple(v.shape[1:]), v.dtype) for k, v in self.clients.params.items())
        return ("scores", shapes, tuple(self.x.shape[-1:]), self.x.dtype, self.clients.device.type,
                id(self.clients.base.__class__), self.compute)

    def nbytes(self, rows: int) -> int:
        return self.clients.num_clients * rows * self.x.shape[-1] * self.x.element_size()


@dataclass
class EpochBroker:
    """Collects the local epochs of the runs that joined it and computes them in stacked groups."""

    runs: int  # how many runs will train under it: each calls ``leave`` once, however it ends
    max_clients: int | None = None  # the most clients one stacked epoch may hold (memory); None: no limit
    max_score_bytes: int = 1 << 30  # the most bytes of padded rows one stacked scoring gathers (memory)
    max_cache_bytes: int = 2 << 30  # the most bytes of merged shards and rows kept between epochs and evaluations
    stats: dict = field(default_factory=lambda: {"epochs": 0, "stacked_epochs": 0, "alone": 0, "fits": 0,
                                                 "batched_fits": 0, "scorings": 0, "stacked_scorings": 0})

    def __post_init__(self):
        self._cv = threading.Condition()
        self._live = int(self.runs)  # counted from the start, so that no run trains alone while others load
        self._pending: list[_Request] = []
        self._blocks: dict[tuple, tuple[list, Any]] = {}  # merged shards and rows, by their sources (_cached_block)
        # id(a run's StackedModels) → [CPU seconds its thread spent inside epochs, its shares of the epochs' compute]
        self._spent: dict[int, list[float]] = {}

    def own_seconds(self, clients: StackedModels, thread_cpu: float) -> float:
        """A run's own compute time, given the CPU seconds its thread used (``time.thread_time``): what it computed
        outside its epochs, plus its share of each (stacked) epoch — not the time it waited for the other runs of
        the stack, nor the stacked epochs its thread happened to compute for all of them."""
        inside, share = self._spent.get(id(clients), (0.0, 0.0))
        return max(0.0, thread_cpu - inside) + share

    def attach(self, clients: StackedModels) -> None:
        """A run's models: their epochs (and those of their slot views) come to this broker from now on."""
        clients.broker, clients.broker_owner = self, id(clients)

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
        self._submit(req, clients.broker_owner)
        return req.result

    # ---- scoring: called by evaluation.metrics in a run's thread (the device engine's scoring) ----
    def scores(self, clients: StackedModels, x: Tensor, compute, then=None) -> Tensor:
        """``compute(clients, x)`` — scores [C, M], on the host — computed with the other runs' scorings; with
        ``then``, what it computes from the scores (with the other runs' alike: ``then.of_many``)."""
        req = _ScoreRequest(clients, x, compute, then)
        self._submit(req, clients.broker_owner)
        return req.result

    # ---- a clustering fit: called by protocol.clustering.cluster_codes in a GCA server's (a run's) thread ----
    def clustering(self, clients: StackedModels):
        """The ``fit(model, Z)`` of the run whose models are ``clients`` (``cluster_codes``'s ``fit``)."""
        return functools.partial(self.fit, clients.broker_owner)

    def fit(self, owner: int, model, Z: np.ndarray):
        """``model`` fitted on ``Z``: with the other runs' alike fits as one computation where the model can
        share one (``model.batch_key``), else here in the run's thread."""
        key = model.batch_key(Z)
        if key is None:
            return model.fit(Z)
        self._submit(_FitRequest(model, Z, key), owner)
        return model

    def _submit(self, req, owner: int) -> None:
        """Hand ``req`` over, compute the pending requests if every live run now waits, wait until ``req`` is
        done; its computing time is ``owner``'s (a run's ``id(clients)``) share of its group's."""
        cpu_in = time.thread_time()
        with self._cv:
            self._pending.append(req)
            batch = self._take_if_ready()
        if batch:
            self._execute(batch)
        with self._cv:
            while not req.done:
                self._cv.wait()
            spent = self._spent.setdefault(owner, [0.0, 0.0])
            spent[0] += time.thread_time() - cpu_in
            spent[1] += req.share
        if req.error is not None:
            raise req.error

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

    def _chunks(self, reqs: list) -> list[list]:
        if isinstance(reqs[0], _ScoreRequest):  # padded rows within the memory budget
            out, cur = [], []
            for r in reqs:
                rows = max(q.x.shape[-2] for q in [*cur, r])
                if cur and sum(q.nbytes(rows) for q in [*cur, r]) > self.max_score_bytes:
                    out.append(cur)
                    cur = []
                cur.append(r)
            return out + ([cur] if cur else [])
        if self.max_clients is None or isinstance(reqs[0], _FitRequest):
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

    def _run_group(self, reqs: list) -> None:
        t0 = time.thread_time()  # the computing thread's CPU seconds: the unit of ``own_seconds``
        kind = type(reqs[0])
        try:
            {_Request: self._compute_group, _FitRequest: self._fit_group, _ScoreRequest: self._score_group}[kind](reqs)
        finally:  # each run's share: by its clients (a fit: one each)
            seconds = time.thread_time() - t0
            weights = [1 if kind is _FitRequest else r.clients.num_clients for r in reqs]
            for r, w in zip(reqs, weights):
                r.share = seconds * w / sum(weights)

    def _fit_group(self, reqs: list[_FitRequest]) -> None:
        self.stats["fits"] += len(reqs)
        self.stats["batched_fits"] += len(reqs) > 1
        try:
            errors = type(reqs[0].model).fit_batch([r.model for r in reqs], [r.Z for r in reqs])
        except BaseException as err:  # noqa: BLE001 — handed to each run's own thread
            if len(reqs) == 1:
                errors = [err]
            else:  # the batch failed as a whole (memory): each fit alone, so only a run that fails alone fails
                for r in reqs:
                    self._fit_group([r])
                return
        for r, err in zip(reqs, errors, strict=True):
            r.error = err

    def _score_group(self, reqs: list[_ScoreRequest]) -> None:
        """One scoring for every request: the runs' models on one client axis, each client's rows (a run's
        shared rows repeated for each of its clients) padded to the longest; one read back to the host. A client's
        scores do not depend on the others on the axis nor on the padding (``tests/test_device_engine.py``)."""
        self.stats["scorings"] += len(reqs)
        self.stats["stacked_scorings"] += len(reqs) > 1
        try:
            with torch.no_grad():  # this thread may be any run's, in the middle of its own (autograd) work
                self._score_into(reqs, self._merged_rows(reqs))
        except BaseException as err:  # noqa: BLE001 — handed to the run's own thread
            if len(reqs) == 1:
                reqs[0].error = err
            else:  # the pass failed as a whole (memory): each run alone, so only a run that fails alone fails
                for r in reqs:
                    self._score_group([r])

    def _merged_rows(self, reqs: list[_ScoreRequest]) -> Tensor:
        """The requests' rows on one client axis (a run's shared rows repeated for each of its clients), padded to
        the longest. A run scores the same tensors every evaluation (its test, validation and own rows), so the
        block is made once per set and kept: after a stack's first evaluation its scorings copy nothing per run."""
        if len(reqs) == 1:
            return reqs[0].x
        counts = [r.clients.num_clients for r in reqs]
        return self._cached_block([r.x for r in reqs], tuple(counts), lambda: _pad_cat(
            [r.x.expand(n, *r.x.shape[-2:]) for r, n in zip(reqs, counts)]))

    @staticmethod
    def _score_into(reqs: list[_ScoreRequest], x: Tensor) -> None:
        counts = [r.clients.num_clients for r in reqs]
        scores = reqs[0].compute(concat_params([r.clients for r in reqs]), x)
        on_host = scores.cpu().split(counts) if any(r.then is None for r in reqs) else None  # one read back
        reduced: dict[tuple, list] = {}  # the scores' reductions of one kind and row count: one computation
        for i, (r, part) in enumerate(zip(reqs, scores.split(counts))):
            rows = r.x.shape[-2]
            if r.then is None:
                r.result = on_host[i][:, :rows]
            else:
                reduced.setdefault((type(r.then), rows), []).append((r, part[:, :rows]))
        for (kind, _), members in reduced.items():
            for (r, _), result in zip(members, kind.of_many([r.then for r, _ in members], [p for _, p in members])):
                r.result = result

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
        draws = [[g.bit_generator.state for g in r.rngs] for r in reqs]
        split = False
        try:
            merged = concat_models([r.clients for r in reqs])
            shards = self._merged_shards([r.shards for r in reqs])
            loss = reqs[0].loss_fn.merge([(r.loss_fn, r.clients.num_clients) for r in reqs], merged)
            part = torch.cat([r.participating.to("cpu", torch.bool) for r in reqs])
            losses = run_epoch(merged, shards, [g for r in reqs for g in r.rngs], reqs[0].batch_size, loss,
                               list(reqs[0].keys), part, broker=False)
            split = True
            split_models(merged, [r.clients for r in reqs])
            for r, part in zip(reqs, losses.split([r.clients.num_clients for r in reqs])):
                r.result, r.merged_with = part, len(reqs)  # a view: one fresh tensor [ΣC], never written
        except BaseException as err:  # noqa: BLE001
            if split:  # a run's models may hold the stacked epoch's result already: no second try
                for r in reqs:
                    r.error = err
                return
            # the stacked epoch failed as a whole (memory), the runs' models untouched: each run's epoch alone,
            # from the same draws (its numbers are the same), so only a run that fails alone fails
            for r, states in zip(reqs, draws):
                for g, state in zip(r.rngs, states):
                    g.bit_generator.state = state
                self._compute_group([r])

    def _merged_shards(self, shards: list[ClientShards]) -> ClientShards:
        """The group's shards on one client axis, padded to the longest; made once per set of shards (a run's
        shards do not change), kept while the same set comes back."""
        return self._cached_block(shards, (), lambda: ClientShards(_pad_cat([s.x for s in shards]),
                                                                   np.concatenate([s.sizes for s in shards])))

    def _cached_block(self, sources: list, extra: tuple, build):
        """``build()``, kept for the same ``sources`` (the very objects: the entry holds them, so their ids are
        not reused while it lives) and ``extra``. The cache is forgotten when it would pass 64 entries or
        ``max_cache_bytes`` (groups change as runs finish); a block larger than that is not kept."""
        key = (*(id(s) for s in sources), extra)
        hit = self._blocks.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], sources, strict=True)):
            return hit[1]
        block = build()
        size = _nbytes(block)
        if len(self._blocks) >= 64 or sum(_nbytes(b) for _, b in self._blocks.values()) + size > self.max_cache_bytes:
            self._blocks.clear()
        if size <= self.max_cache_bytes:
            self._blocks[key] = (list(sources), block)
        return block


def _joined(stacks: list[StackedModels], params: dict[str, Tensor]) -> StackedModels:
    """``stacks[0]``'s architecture with ``params`` (every client of ``stacks`` on one axis), under no broker."""
    merged = copy.copy(stacks[0])
    merged.broker = merged.broker_owner = merged.optim = None
    merged.num_clients = sum(s.num_clients for s in stacks)
    merged.params = params
    return merged


def concat_models(stacks: list[StackedModels]) -> StackedModels:
    """One stack of every client of ``stacks`` (same architecture), parameters and Adam state copied."""
    first = stacks[0]
    merged = _joined(stacks, {k: torch.cat([s.params[k].detach() for s in stacks]).requires_grad_(True)
                              for k in first.params})
    merged.optim = StackedAdam.joined([s.optim for s in stacks], merged.params)
    return merged


def concat_params(stacks: list[StackedModels]) -> StackedModels:
    """Every client of ``stacks`` on one axis, for forward passes only (no Adam state; a stack alone is itself)."""
    if len(stacks) == 1:
        return stacks[0]
    return _joined(stacks, {k: torch.cat([s.params[k] for s in stacks]) for k in stacks[0].params})  # no_grad


def _nbytes(block) -> int:
    """A cached block's bytes: a tensor's, or a ClientShards' rows."""
    t = block.x if isinstance(block, ClientShards) else block
    return t.numel() * t.element_size()


def _pad_cat(blocks: list[Tensor]) -> Tensor:
    """Blocks of rows [C_i, M_i, ...] on one client axis [ΣC_i, max M_i, ...], zero-padded to the longest."""
    out = blocks[0].new_zeros((sum(len(b) for b in blocks), max(b.shape[1] for b in blocks), *blocks[0].shape[2:]))
    start = 0
    for b in blocks:
        out[start:start + len(b), : b.shape[1]] = b
        start += len(b)
    return out


@torch.no_grad()
def split_models(merged: StackedModels, stacks: list[StackedModels]) -> None:
    """Copy each stack's slice of ``merged`` (parameters, Adam state) back into it: the parameters and moments of
    every stack in one multi-tensor copy."""
    counts = [s.num_clients for s in stacks]
    dst, src = [], []
    for k, p in merged.params.items():
        dst += [s.params[k] for s in stacks]
        src += p.detach().split(counts)
    merged.optim.split_into([s.optim for s in stacks], dst, src)


__all__ = ["EpochBroker", "concat_models", "concat_params", "split_models"]
