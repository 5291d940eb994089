"""GCA latent-only flipping: a surrogate trained from uploaded codes alone (SPEC §6).

The server sees only the victim's uploaded codes Z (M rows of dz values). It
trains a FRESH autoencoder of the public architecture for the input shape —
``build_model(input_shape)``, i.e. Ẽ = ``model.encoder``: R^dx → R^dz and
D̃ = ``model.decoder``: R^dz → R^dx — on the *flipped* objective

    (1/M) Σ_z ||z − Ẽ(D̃(z))||²₂,

(per batch: sum over code dims, mean over the batch), Adam lr 1e-2, batch
50, 10% of the codes held out for validation, at most 1000 epochs, early
stopping with patience 20 on relative improvement 1e-4 of the validation
loss, best-validation weights restored. The attack then runs the usual
100-start input optimisation (:mod:`fedgca.attacks.inversion`) on
T̃ = D̃ ∘ Ẽ, which is simply the surrogate's ``forward``.

:func:`train_surrogate` takes only the codes, the public input shape and
hyperparameters: it has no way to receive the victim's parameters, gradients
or records. It draws every random number (initialisation, split, batch
order) from the seed without touching torch's global RNG.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor, nn

from fedgca import seeding
from fedgca.models import build_model

__all__ = ["train_surrogate", "flipped_loss", "direct_decodes"]


def _per_code_loss(model: nn.Module, z: Tensor) -> Tensor:
    """||z − Ẽ(D̃(z))||²₂ per code row."""
    return (z - model.encoder(model.decoder(z))).pow(2).sum(dim=1)


def flipped_loss(model: nn.Module, codes) -> float:
    """(1/M) Σ ||z − Ẽ(D̃(z))||²₂ over the given codes (no gradient)."""
    z = _codes_tensor(codes, _device_of(model))
    with torch.no_grad():
        return float(_per_code_loss(model, z).mean())


def direct_decodes(surrogate: nn.Module, codes) -> Tensor:
    """D̃(z) for every uploaded code: the surrogate decoder's direct reconstructions (diagnostic)."""
    z = _codes_tensor(codes, _device_of(surrogate))
    with torch.no_grad():
        return surrogate.decoder(z).detach()


def _device_of(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _codes_tensor(codes, device) -> Tensor:
    if isinstance(codes, Tensor):
        z = codes.detach().to(device=device, dtype=torch.float32)
    else:
        z = torch.as_tensor(np.asarray(codes, dtype=np.float32), device=device)
    return z.reshape(len(z), -1)


def _fresh_model(input_shape: tuple[int, ...], seed: int, device) -> nn.Module:
    """``build_model(input_shape)`` initialised from the seed inside a forked global RNG."""
    with seeding.torch_global_seed(seeding.int_seed(seed, "surrogate_init")):  # the CPU's draws on every device
        model = build_model(tuple(input_shape))
    return model.to(device)


def _split(m: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/validation index split (at least one row in each when m >= 2)."""
    perm = seeding.rng(seed, "surrogate_split").permutation(m)
    n_val = int(round(val_fraction * m)) if m >= 2 else 0
    if val_fraction > 0 and m >= 2:
        n_val = min(max(n_val, 1), m - 1)
    return perm[n_val:], perm[:n_val]


def _epoch(model, opt, z_train: Tensor, batch_size: int, gen: torch.Generator) -> None:
    """One pass of mini-batch Adam on the flipped loss (shuffled with the private generator)."""
    order = torch.randperm(len(z_train), generator=gen, device="cpu").to(z_train.device)  # the CPU's draws
    for start in range(0, len(z_train), batch_size):
        batch = z_train[order[start : start + batch_size]]
        opt.zero_grad(set_to_none=True)
        _per_code_loss(model, batch).mean().backward()
        opt.step()


def train_surrogate(
    codes: np.ndarray,
    input_shape: tuple[int, ...],
    *,
    seed: int,
    lr: float = 1e-2,
    batch_size: int = 50,
    val_fraction: float = 0.1,
    max_epochs: int = 1000,
    patience: int = 20,
    rel_tol: float = 1e-4,
    device: str | torch.device | None = None,
) -> nn.Module:
    """Train the flipped surrogate T̃ = D̃ ∘ Ẽ from uploaded codes only (SPEC §6).

    ``codes``: [M, dz] uploaded codes; ``input_shape``: the public input shape
    that fixes the architecture (``build_model``). The best-validation
    weights are kept: the initial weights count as epoch 0, each epoch's
    validation loss replaces the best when lower, and the patience counter
    resets only on a relative improvement of at least ``rel_tol``
    (``patience`` epochs without one stop training). With no validation rows
    (``val_fraction`` = 0 or M < 2) the training loss plays that role.
    Returns the surrogate in eval mode; its ``forward`` is T̃. Its
    ``fit_info`` dict records epochs run, best epoch, best validation loss
    and the split sizes.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    z = _codes_tensor(codes, device)
    model = _fresh_model(input_shape, seed, device)
    if z.shape[1] != model.latent_dim:
        raise ValueError(f"codes have {z.shape[1]} dims, the architecture's latent_dim is {model.latent_dim}")
    train_idx, val_idx = _split(len(z), val_fraction, seed)
    z_train = z[torch.as_tensor(train_idx, device=device)]
    z_val = z[torch.as_tensor(val_idx, device=device)] if len(val_idx) else z_train
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator(device="cpu").manual_seed(seeding.int_seed(seed, "surrogate_batches"))

    best_loss, best_state, stale = flipped_loss(model, z_val), copy.deepcopy(model.state_dict()), 0
    best_epoch, epochs = 0, 0
    for epochs in range(1, max_epochs + 1):
        model.train()
        # torch.optim.Adam creates its `step` state on the default device on some torch versions (2.11):
        # the run's device is made the default while it steps, so that state lives beside the parameters.
        with torch.device(device):
            _epoch(model, opt, z_train, batch_size, gen)
        model.eval()
        val = flipped_loss(model, z_val)
        rel = (best_loss - val) / max(best_loss, torch.finfo(torch.float32).tiny)
        if val < best_loss:
            best_loss, best_state, best_epoch = val, copy.deepcopy(model.state_dict()), epochs
        stale = 0 if rel >= rel_tol else stale + 1
        if stale >= patience:
            break
    model.load_state_dict(best_state)
    model.fit_info = {
        "epochs": epochs,
        "best_epoch": best_epoch,
        "best_val_loss": best_loss,
        "n_train": len(train_idx),
        "n_val": len(val_idx),
    }
    return model.eval()
