"""A state's tensors as one flat buffer per dtype: how every checkpoint is written.

A checkpoint's state is tensors in dicts, lists and tuples (a run's: 61 tensors for FedAvg, 85 for GCA, with
their Adam state and the selected round's models). ``torch.save`` pickles each tensor on its own, ≈ 30 µs of
Python apiece (its reduce, its storage's record), which made serializing a tabular run's 1.3 MB state 2.2 ms of
its thread a round, more than its bytes cost; and off the CPU each storage is a blocking read back of its own.
``pack`` gathers the tensors of each (device, dtype) into one buffer — one copy, one read back on a GPU — and
replaces each tensor in a new tree by a reference to its slice; the packed form pickles as a handful of tensors
and small containers, and is itself tensors and plain containers, so it loads under ``weights_only=True``.

The pack is a snapshot: its buffers are copies and its containers new, so the run may change its tensors in
place and append to its lists while a thread writes the pack. A tensor that appears twice is stored once and
comes back as one tensor; a view comes back as a tensor of its own values (only those are stored, not its
whole base).
"""
from __future__ import annotations

import math
from collections import OrderedDict

import torch

MARK = "fedgca_packed_tensors"  # a packed state's top-level key; its value is the format's version
REF = "fedgca_tensor"  # the one key of a reference: [buffer, offset, shape]
VERSION = 1


def pack(obj) -> dict:
    """``obj`` (tensors in dicts, lists and tuples) as ``{MARK: 1, "buffers": [...], "tree": ...}``: host
    buffers, one per (device, dtype), and ``obj``'s tree with each tensor replaced by ``{REF: [i, offset,
    shape]}``."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    sizes: dict[tuple, int] = {}
    refs: dict[int, dict] = {}

    def ref(t: torch.Tensor) -> dict:
        if id(t) not in refs:
            key = (t.device, t.dtype)
            refs[id(t)] = {REF: [list(groups).index(key) if key in groups else len(groups), sizes.get(key, 0),
                                 list(t.shape)]}
            groups.setdefault(key, []).append(t)
            sizes[key] = sizes.get(key, 0) + t.numel()
        return refs[id(t)]

    tree = _map(obj, lambda o: isinstance(o, torch.Tensor), ref)
    buffers = [torch.cat([t.detach().reshape(-1) for t in group]).to("cpu") for group in groups.values()]
    return {MARK: VERSION, "buffers": buffers, "tree": tree}


def is_packed(obj) -> bool:
    return isinstance(obj, dict) and MARK in obj


def unpack(packed: dict):
    """The state ``pack`` packed, each tensor its own copy; a ``ValueError`` naming what is wrong when the pack
    is not one ``pack`` wrote (a reference out of its buffer, a foreign version)."""
    if packed.get(MARK) != VERSION or set(packed) != {MARK, "buffers", "tree"}:
        raise ValueError(f"a packed state of an unknown format (version {packed.get(MARK)!r})")
    buffers = packed["buffers"]
    if not isinstance(buffers, list) or not all(isinstance(b, torch.Tensor) and b.dim() == 1 for b in buffers):
        raise ValueError("a packed state whose buffers are not flat tensors")
    done: dict[int, torch.Tensor] = {}

    def tensor(ref: dict) -> torch.Tensor:
        if id(ref) not in done:
            where = ref[REF]
            if not (isinstance(where, list) and len(where) == 3 and isinstance(where[2], list)
                    and all(type(x) is int and x >= 0 for x in (where[0], where[1], *where[2]))
                    and where[0] < len(buffers)
                    and where[1] + math.prod(where[2]) <= buffers[where[0]].numel()):
                raise ValueError(f"a tensor reference outside the packed buffers ({where!r})")
            i, start, shape = where
            done[id(ref)] = buffers[i][start:start + math.prod(shape)].view(shape).clone()
        return done[id(ref)]

    return _map(packed["tree"], lambda o: isinstance(o, dict) and set(o) == {REF}, tensor)


def _map(obj, leaf, fn):
    """``obj`` in new dicts, lists and tuples, with ``fn`` applied to what ``leaf`` picks (a tensor, a reference).
    A hand walk, not torch's pytree: it must stop at a reference, which pytree would walk into, and it is ≈ 5×
    faster on a run's state."""
    if leaf(obj):
        return fn(obj)
    if isinstance(obj, dict):
        items = {k: _map(v, leaf, fn) for k, v in obj.items()}
        return OrderedDict(items) if isinstance(obj, OrderedDict) else items
    if isinstance(obj, list):
        return [_map(v, leaf, fn) for v in obj]
    if type(obj) is tuple:  # not a subclass (torch.Size, a named tuple): pickled as it is
        return tuple(_map(v, leaf, fn) for v in obj)
    return obj
