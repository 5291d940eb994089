"""DeepDream-style input optimisation against a reconstruction map (SPEC §6).

Given a reconstruction map T (the victim's autoencoder for white-box
inversion, or the server's surrogate T̃ = D̃ ∘ Ẽ for GCA latent-only
flipping), each of S starts x⁽⁰⁾ independently minimises ||x − T(x)||²₂ with
Adam on x (lr 1e-2, at most 1000 steps), keeps the best state it has seen and
stops after ``patience`` (10) consecutive steps whose relative improvement of
its best loss is below ``rel_tol`` (1e-3). Vision inputs are projected onto
[−1, 1] after every step; tabular inputs are unbounded. The attack's output is
T(x*) for every start.

All S starts run in ONE batched computation. Adam is elementwise and T acts on
rows independently, so a batched step equals S independent Adam steps; a start
that has stopped is frozen (its x, Adam moments and step count no longer
change) and is no longer fed through T. Each start is one "client" of the
engine's ``StackedAdam`` (torch's fused Adam kernel, each start with its own
step count; bit-identical to a ``torch.optim.Adam`` per start), so the
per-start freezing is exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from fedgca import seeding
from fedgca.training.stacked import AdamConfig, StackedAdam

N_STARTS = 100
VISION_BOUNDS = (-1.0, 1.0)

__all__ = [
    "InversionResult",
    "invert",
    "invert_model",
    "make_starts",
    "start_kind",
    "N_STARTS",
    "VISION_BOUNDS",
]


@dataclass
class InversionResult:
    """Outcome of :func:`invert` for S starts.

    ``x_best``: best state of each start [S, ...]; ``outputs``: T(x_best),
    detached — the attack's output R (SPEC §6); ``losses``: ||x_best −
    T(x_best)||² per start [S]; ``steps``: Adam steps each start took [S]
    (< max_steps for a start that stopped early); ``x_last``: the state each
    start ended in (diagnostic: a stopped start does not move afterwards).
    """

    x_best: Tensor
    outputs: Tensor
    losses: Tensor
    steps: Tensor
    x_last: Tensor


def start_kind(input_shape: tuple[int, ...]) -> str:
    """"tabular" for vector inputs, "vision" for (C, H, W) images."""
    return "tabular" if len(input_shape) == 1 else "vision"


def make_starts(
    n: int, input_shape: tuple[int, ...], *, seed: int, kind: str | None = None
) -> Tensor:
    """The n fixed, seed-determined starts x⁽⁰⁾ shared by all methods (SPEC §6).

    Standard normal for ``kind="tabular"``, uniform in [−1, 1] for
    ``kind="vision"`` (default: inferred from the shape). Drawn from a private
    :class:`torch.Generator`, so torch's global RNG is untouched. Returns a
    float32 tensor [n, *input_shape].
    """
    kind = kind or start_kind(input_shape)
    gen = torch.Generator(device="cpu").manual_seed(seeding.int_seed(seed, "inversion_starts"))
    shape = (int(n), *map(int, input_shape))
    if kind == "tabular":
        return torch.randn(shape, generator=gen, device="cpu")
    if kind == "vision":
        return torch.rand(shape, generator=gen, device="cpu") * 2.0 - 1.0
    raise ValueError(f"unknown start kind {kind!r} (expected 'tabular' or 'vision')")


def _per_start_loss(T: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """||x − T(x)||²₂ per row (sum over all feature dims)."""
    return (x - T(x)).pow(2).flatten(1).sum(dim=1)


def invert(
    T: Callable[[Tensor], Tensor],
    starts: Tensor,
    *,
    lr: float = 1e-2,
    max_steps: int = 1000,
    patience: int = 10,
    rel_tol: float = 1e-3,
    bounds: tuple[float, float] | None = None,
) -> InversionResult:
    """Minimise ||x − T(x)||²₂ from every start independently, batched (SPEC §6).

    ``T`` must act row-wise (eval mode, no batch statistics). Per start: the
    loss of the current state is evaluated, the best state is updated when the
    loss is lower, the relative improvement (best_prev − best)/best_prev of
    its best loss is compared with ``rel_tol`` — ``patience`` consecutive
    steps below it stop the start — and otherwise one Adam step is taken
    (then projected onto ``bounds`` if given). The state reached after the
    last allowed step is evaluated too. Gradients are taken w.r.t. x only
    (the parameters of T receive no ``.grad``).
    """
    if patience < 1:
        raise ValueError("patience must be >= 1")
    x = starts.detach().clone()
    if bounds is not None:
        x.clamp_(*bounds)
    n = len(x)
    # lr never decays here: one StepLR step per "epoch" and no epoch ever ends
    adam = StackedAdam({"x": x}, AdamConfig(lr=lr))
    full_grad = torch.zeros_like(x)
    best_x = x.clone()
    best_loss = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
    stale = torch.zeros(n, dtype=torch.long, device=x.device)
    active = torch.ones(n, dtype=torch.bool, device=x.device)

    for step in range(max_steps + 1):
        idx = active.nonzero().flatten()
        if len(idx) == 0:
            break
        with torch.enable_grad():
            xa = x[idx].requires_grad_(True)
            loss = _per_start_loss(T, xa)
            grad = torch.autograd.grad(loss.sum(), xa)[0] if step < max_steps else None
        loss = loss.detach()
        prev = best_loss[idx]
        improved = loss < prev
        new_best = torch.where(improved, loss, prev)
        best_x[idx[improved]] = x[idx[improved]]
        best_loss[idx] = new_best
        if step == max_steps:
            break
        if step > 0:  # the first evaluation only initialises the best state
            rel = (prev - new_best) / prev.clamp_min(torch.finfo(x.dtype).tiny)
            stale[idx] = torch.where(rel < rel_tol, stale[idx] + 1, torch.zeros_like(stale[idx]))
            stop = stale[idx] >= patience
            active[idx[stop]] = False
            keep = ~stop
            idx, grad = idx[keep], grad[keep]
        if len(idx):
            full_grad[idx] = grad
            adam.step({"x": full_grad}, idx.tolist())  # idx: the running starts, ascending
            if bounds is not None:
                x[idx] = x[idx].clamp(*bounds)

    with torch.no_grad():
        outputs = T(best_x).detach()
    return InversionResult(best_x, outputs, best_loss, adam.step_count["x"].long(), x)


def invert_model(
    model: nn.Module,
    input_shape: tuple[int, ...],
    *,
    seed: int,
    n_starts: int = N_STARTS,
    **kwargs,
) -> InversionResult:
    """SPEC §6 input optimisation against an autoencoder ``model`` (its forward is T).

    Builds the seed's shared starts (:func:`make_starts`), bounds [−1, 1] for
    vision inputs (none for tabular), runs :func:`invert` with the model in
    eval mode and restores the model's train/eval mode afterwards. ``kwargs``
    go to :func:`invert` (lr, max_steps, patience, rel_tol).
    """
    kind = start_kind(input_shape)
    param = next(model.parameters(), None)
    starts = make_starts(n_starts, input_shape, seed=seed, kind=kind)
    if param is not None:
        starts = starts.to(device=param.device, dtype=param.dtype)
    kwargs.setdefault("bounds", VISION_BOUNDS if kind == "vision" else None)
    was_training = model.training
    model.eval()
    try:
        return invert(model, starts, **kwargs)
    finally:
        model.train(was_training)
