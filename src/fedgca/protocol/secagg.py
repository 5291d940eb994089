"""Secure aggregation's arithmetic, once for both drivers: what a client's vector holds, how it is put on SecAgg+'s
integer grid, and what the server reads from the sum.

Flower's ``secaggplus_mod`` (client) and ``SecAggPlusWorkflow`` (server) carry the protocol — key agreement, Shamir
shares, pairwise and private masks (drawn by ``protocol.masks``), dropout recovery. They sum integer vectors modulo
M: each client's values, mapped to [0, T], plus masks that cancel in the sum. fedgca hands Flower vectors that are
already on that grid (``to_flower``), so Flower's own rounding is exact and the sum is an exact integer vector,
independent of NumPy's global generator and of the order clients arrive in. Every client reports the same weight to
Flower (``max_weight`` = 1: Flower's q_i = T for everyone); the weights fedgca needs travel *inside* the vector.

A vector is a ``Layout``: named ``Part``\\ s, each a count element (1 if the client contributes the part, else 0)
and, for a weighted part, the client's quantised weight q_i = round(w_i·T) (w_i = its weight over the federation's
largest), then its values — each on one grid element (stochastic rounding from a generator fedgca seeds per client,
round and part: steps of δ = 2c/T) or, ``exact``, on two (a high and a low limb: the sum to about 2⁻⁵⁶·c), and
for ``flags`` parts a finite flag per value. A client without the part (a non-participant, a non-finite model)
sends it as absent: count 0, weight 0, values 0 — so the server cannot tell who did not contribute beyond what the
sums say. The server reads, per part: how many contributed, their weight total, and the mean of the values (a
weighted part: Σq_i·x_i / Σq_i; else the mean over contributors, NaN where not every contributor's value was
finite). The in-process simulator sums the same integer vectors (``secure_sum``); the Flower server recovers them
from the workflow's output (``recover_sums``) and decodes them with the same ``decode`` — both drivers get the same
floats to the last bit.

The overflow rule (``SecAggSettings.capacity``): one element of a sum of n clients is at most n·T; M = 2⁶² (the
masked vector is int64 on the wire whatever M is, so a wider modulus costs nothing) holds it, and the recovery from
the workflow's float mean is exact, for n up to 2¹⁹ clients. A federation larger than that is refused at start
(``check_capacity``); Flower's own default (M = 2³², T = 2²²) would wrap silently beyond 1,023 clients.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from fedgca import seeding

MIN_CONTRIBUTIONS = 2  # a sum of one client is that client's values: refused in both drivers
# A figure (a metric, a selection value) travels as v / 2^20 on two grid elements: |v| up to 8·2^20, its sum to
# about 1e-11 — what a secure method's server learns of an evaluation is the mean over clients, never a client's.
METRIC_SCALE = 2.0 ** 20
_EXACT_RECOVERY = 2 ** 19  # the most clients whose sum recover_sums reads back exactly from the workflow's floats


def _power_of_two(x) -> bool:
    f = Fraction(x)
    return f > 0 and (f.numerator & (f.numerator - 1)) == 0 and (f.denominator & (f.denominator - 1)) == 0


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+'s parameters (Flower's names): ±``clipping_range`` (c) is what one grid element carries, in
    ``quantization_range`` (T) steps; sums are taken modulo ``modulus_range`` (M); each client's secrets are split
    into ``num_shares`` shares (a fraction: of the exchange's clients) of which ``reconstruction_threshold`` (a
    fraction of the shares, at least 2) recover them — a sum survives dropouts while that many remain.
    ``max_weight``: Flower's weight scale; every fedgca client reports weight 1, so Flower's own weighting is 1."""

    num_shares: float = 1.0
    reconstruction_threshold: float = 0.5
    clipping_range: float = 8.0
    quantization_range: int = 2 ** 30
    modulus_range: int = 2 ** 62
    max_weight: float = 1.0

    def __post_init__(self):
        c, t, m = self.clipping_range, self.quantization_range, self.modulus_range
        if not (_power_of_two(c) and _power_of_two(t) and _power_of_two(m)) or t >= 2 ** 31 or m > 2 ** 62 or m <= t:
            raise ValueError(f"SecAgg+ settings need powers of two with T < 2^31 (Flower rounds to int32) and "
                             f"T < M ≤ 2^62: got c={c}, T={t}, M={m}")

    @property
    def step(self) -> float:
        """δ = 2c/T: one grid step (a power of two: scaling by it is exact)."""
        return 2 * self.clipping_range / self.quantization_range

    @property
    def capacity(self) -> int:
        """The most clients one sum holds without wrapping modulo M and reads back exactly."""
        return min((self.modulus_range - 1) // self.quantization_range, _EXACT_RECOVERY)

    def flower(self) -> dict:
        """``SecAggPlusWorkflow``'s keyword arguments."""
        return dataclasses.asdict(self)


def check_capacity(clients: int, s: SecAggSettings) -> None:
    """Refuse a secure run whose sums could wrap (the overflow rule of the module docstring), in one line."""
    if clients > s.capacity:
        raise ValueError(f"secure aggregation over {clients} clients: a sum holds at most {s.capacity} (modulus "
                         f"2^{s.modulus_range.bit_length() - 1}, {s.quantization_range} levels per value); "
                         "split the federation")


def refusal(count: int) -> str | None:
    """Why a sum of ``count`` contributions is not used (None: it is): one rule for both drivers."""
    if count < MIN_CONTRIBUTIONS:
        return (f"{count} contribution{'s' if count != 1 else ''} (a sum of fewer than {MIN_CONTRIBUTIONS} is a "
                "client's own values)")
    return None


@dataclass(frozen=True)
class Part:
    """One named piece of a summed vector (see the module docstring)."""

    name: str
    size: int
    weighted: bool = False  # a weight element, and the values times the client's weight
    exact: bool = False  # two grid elements a value (≈ float64), else one (stochastic rounding, steps of δ)
    scale: float = 1.0  # values travel divided by it (a power of two), clipped to ±c
    flags: bool = False  # a finite flag per value: a non-finite value is sent as 0 and not counted

    def __post_init__(self):
        if self.size < 0 or not _power_of_two(self.scale):
            raise ValueError(f"part {self.name!r}: size ≥ 0 and a power-of-two scale, got {self.size}, {self.scale}")

    @property
    def width(self) -> int:
        return 1 + self.weighted + self.size * (2 if self.exact else 1) + (self.size if self.flags else 0)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Part":
        return cls(str(d["name"]), int(d["size"]), bool(d["weighted"]), bool(d["exact"]), float(d["scale"]),
                   bool(d["flags"]))


Layout = tuple  # of Part, in vector order


def width(layout: Layout) -> int:
    return sum(p.width for p in layout)


def masked_bytes(layout: Layout) -> int:
    """Bytes of one client's masked vector: Flower's weight element and every element of the layout, int64."""
    return 8 * (1 + width(layout))


@dataclass
class Contribution:
    """A client's values for one part, and its weight w_i ∈ [0, 1] (weighted parts: its weight over the largest)."""

    values: np.ndarray
    weight: float = 1.0


@dataclass(frozen=True)
class Summed:
    """What the server reads of one part: contributors, their weight total Σq_i/T, the values' mean."""

    count: int
    weight: float
    mean: np.ndarray


def rounding_rng(seed: int, round_idx: int, client_id: int, part: str) -> np.random.Generator:
    """The generator of a client's stochastic rounding of one part in one round (both drivers draw the same)."""
    return seeding.rng(seed, f"secagg-rounding/{part}", round_idx, client_id)


def rounding(seed: int, round_idx: int, client_id: int) -> Callable[[str], np.random.Generator]:
    """``encode``'s ``rng_of`` for a client's parts of a round (both drivers)."""
    return lambda part: rounding_rng(seed, round_idx, client_id, part)


def encode(layout: Layout, contributions: dict[str, Contribution], s: SecAggSettings,
           rng_of: Callable[[str], np.random.Generator]) -> np.ndarray:
    """A client's vector on the grid: int64 levels in [0, T] (``to_flower`` turns them into what Flower quantises).
    Parts not in ``contributions`` are absent; a weighted or unflagged part with a non-finite value is absent too."""
    t, half = s.quantization_range, s.quantization_range // 2
    out = []
    for p in layout:
        c = contributions.get(p.name)
        x = None if c is None else np.asarray(c.values, dtype=np.float64).ravel()
        if x is not None and x.size != p.size:
            raise ValueError(f"part {p.name!r} holds {p.size} values, got {x.size}")
        finite = np.isfinite(x) if x is not None else None
        if x is not None and not p.flags and not finite.all():
            x = None  # a client checks what it sends: a non-finite model or statistic is not sent
        q = 0
        if x is not None and p.weighted:
            q = int(round(min(max(float(c.weight), 0.0), 1.0) * t))
            x = x * (q / t)
        if x is None or (p.weighted and q == 0):
            x, finite, present = np.zeros(p.size), np.zeros(p.size, dtype=bool), 0
        else:
            present = 1
        u = np.clip(np.where(finite, x, 0.0) / p.scale, -s.clipping_range, s.clipping_range)
        y = u / s.step  # exact: δ is a power of two
        head = [present] + ([q] if p.weighted else [])
        if p.exact:
            hi = np.floor(y)
            lo = np.rint((y - hi) * t)  # y − ⌊y⌋ and its scaling by T are exact
            body = np.stack([hi + half, lo], axis=1).ravel()
        else:
            base = np.floor(y)
            body = base + half + (rng_of(p.name).random(p.size) < (y - base))
        out += [np.asarray(head, dtype=np.int64), body.astype(np.int64)]
        if p.flags:
            out.append(finite.astype(np.int64))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def decode(layout: Layout, sums: np.ndarray, n: int, s: SecAggSettings) -> dict[str, Summed]:
    """What the server reads from the exact sums of ``n`` clients' vectors (``encode``), part by part."""
    sums = np.asarray(sums, dtype=np.int64)
    if sums.shape != (width(layout),):
        raise ValueError(f"a summed vector of {sums.size} elements, the layout has {width(layout)}")
    t, c = s.quantization_range, Fraction(s.clipping_range)
    out, at = {}, 0
    for p in layout:
        count = int(sums[at])
        q_total = int(sums[at + 1]) if p.weighted else 0
        at += 1 + p.weighted
        k = sums[at:at + p.size * (2 if p.exact else 1)]
        at += k.size
        finite = sums[at:at + p.size] if p.flags else np.full(p.size, count)
        at += p.size if p.flags else 0
        denominator = Fraction(q_total, t) if p.weighted else Fraction(count)
        if denominator == 0:
            out[p.name] = Summed(count, 0.0, np.full(p.size, np.nan))
            continue
        if p.exact:  # Σu = (Σhi·T + Σlo)·δ/T − n·c, as an exact rational
            hi, lo = k[0::2], k[1::2]
            total = [(Fraction(int(h) * t + int(lo_)) * Fraction(s.step) / t - n * c) for h, lo_ in zip(hi, lo)]
            mean = np.array([float(v * Fraction(p.scale) / denominator) for v in total])
        else:  # Σu = Σk·δ − n·c (exact in float64 for n within the capacity)
            mean = (k.astype(np.float64) * s.step - n * float(c)) * p.scale / float(denominator)
        out[p.name] = Summed(count, float(Fraction(q_total, t)), np.where(finite == count, mean, np.nan))
    return out


def sum_vectors(vectors: list[np.ndarray]) -> np.ndarray:
    """The exact sum of clients' ``encode``\\ d vectors (what SecAgg+ unmasks, before Flower's dequantisation)."""
    return np.sum(np.stack(vectors), axis=0, dtype=np.int64)


def secure_sum(layout: Layout, contributions: list[dict[str, Contribution]], rngs: list[Callable],
               s: SecAggSettings) -> dict[str, Summed]:
    """The simulator's sum: what the server reads from these clients' vectors (one ``rng_of`` per client)."""
    if len(contributions) > s.capacity:
        raise ValueError(f"a sum of {len(contributions)} clients exceeds the capacity {s.capacity}")
    vectors = [encode(layout, c, s, rng) for c, rng in zip(contributions, rngs)]
    return decode(layout, sum_vectors(vectors), len(vectors), s)


# ---------------------------------------------------------------------------- Flower's side of the grid


def to_flower(levels: np.ndarray, s: SecAggSettings) -> np.ndarray:
    """Levels k ∈ [0, T] as the float values k·δ − c, which Flower's quantisation maps back to k exactly."""
    return np.asarray(levels, dtype=np.float64) * s.step - s.clipping_range


def recover_sums(mean: np.ndarray, n: int, s: SecAggSettings) -> np.ndarray:
    """The exact integer sums of ``n`` clients' levels from the workflow's output ((Σk·δ − n·c)/n, float64)."""
    if n > s.capacity:
        raise ValueError(f"a sum of {n} clients exceeds the capacity {s.capacity}")
    k = (np.asarray(mean, dtype=np.float64) * n + n * s.clipping_range) / s.step
    levels = np.rint(k)
    if not np.all(np.abs(k - levels) < 0.25):
        raise ValueError("the secure sum is not a sum of fedgca vectors (values off the grid)")
    return levels.astype(np.int64)
