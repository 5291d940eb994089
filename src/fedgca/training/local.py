"""L_recon training over a stack of client models (SPEC §1 Phase 1, SPEC §2 local training): E epochs of Adam."""
from __future__ import annotations

import torch
from torch import Tensor

from fedgca import seeding
from fedgca.protocol import fedprox
from fedgca.protocol.dp import RecordDP
from fedgca.protocol.losses import (
    masked_batch_mean,
    reconstruction_loss_and_grad,
    reconstruction_per_row,
)
from fedgca.training.dpsgd import run_dp_epoch
from fedgca.training.loop import ClientShards, HandDifferentiated, LossFn, run_epoch
from fedgca.training.stacked import StackedModels


def reconstruction_loss(clients: StackedModels, n_feature_dims: int, extra_loss=None) -> LossFn:
    """L_recon per client (GCA's Phase 1 and every local training), plus an optional per-client term."""

    def loss(xb: Tensor, mask: Tensor) -> Tensor:
        value = masked_batch_mean(reconstruction_per_row(xb, clients.reconstruct(xb), n_feature_dims), mask)
        return value if extra_loss is None else value + extra_loss()

    if n_feature_dims != 1 or not clients.hand_backward:
        return loss

    def recon_and_grads(xb: Tensor, mask: Tensor):
        return clients.loss_and_grads(xb, mask, lambda out, m: reconstruction_loss_and_grad(xb, out, m))

    if extra_loss is None:
        return HandDifferentiated(loss, recon_and_grads, form=("recon",),
                                  merge=lambda parts, merged: reconstruction_loss(merged, 1))
    if isinstance(extra_loss, ProximalTerm):  # its gradient by hand too: FedProx keeps the fast backward pass

        def with_term(xb: Tensor, mask: Tensor):
            value, grads = recon_and_grads(xb, mask)
            term, term_grads = extra_loss.value_and_grads()
            keys = list(grads)
            torch._foreach_add_([grads[k] for k in keys], [term_grads[k] for k in keys])
            return value + term, grads

        # merged across runs (the batched engine) with each client's own run's global model beside it
        return HandDifferentiated(loss, with_term, form=("recon", "proximal", extra_loss.coef),
                                  merge=_merge_proximal, merge_data=extra_loss.global_params)
    return loss


def _merge_proximal(parts: list, merged: StackedModels) -> HandDifferentiated:
    """For the batched engine: FedProx losses of several runs ``[(loss, its clients)]`` as one over their
    concatenated clients, each client's proximal term against its own run's θ^(r) (repeated along the client
    axis: the same values, so the same differences, sums and gradients as the run's alone). The coefficient is
    in the form, so it is the same for every part."""
    coef = parts[0][0].form[-1]
    centres = {k: torch.cat([loss.merge_data[k].detach().expand(n, *shape) for loss, n in parts])
               for k, shape in ((k, p.shape[1:]) for k, p in merged.params.items())}
    return reconstruction_loss(merged, 1, ProximalTerm(coef, merged.params, centres))


class ProximalTerm:
    """FedProx's c·||θ_i − θ^(r)||² of each client [C] (callable) and its gradient (``grads``, autograd's bit
    for bit: ``protocol.fedprox.proximal_term_and_gradient``)."""

    def __init__(self, coef: float, params: dict[str, Tensor], global_params: dict[str, Tensor]):
        self.coef, self.params, self.global_params = coef, params, global_params

    def __call__(self) -> Tensor:
        return self.coef * fedprox.proximal_term(self.params, self.global_params)

    @torch.no_grad()
    def value_and_grads(self) -> tuple[Tensor, dict[str, Tensor]]:
        return fedprox.proximal_term_and_gradient(self.params, self.global_params, self.coef)


def reconstruction_per_example(n_feature_dims: int):
    """L_recon of each example [C, B] through a DP-SGD tape (``training.dpsgd``)."""
    return lambda tape, xb: reconstruction_per_row(xb, tape.decode(tape.encode(xb)), n_feature_dims)


def local_training(clients: StackedModels, shards: ClientShards, seed: int, r: int, epochs: int,
                    part: torch.Tensor, batch_size: int, extra_loss=None, client_ids=None,
                    dp: RecordDP | None = None, after_epoch=None) -> None:
    """``epochs`` epochs of mini-batch Adam on L_recon (+ an optional per-client term); DP-SGD with ``dp``.

    ``client_ids`` are the slots' global client ids (which key the batch order);
    default: slot i is client i. A Flower client (one slot) passes its own id.
    ``after_epoch(e)``: called after each epoch (a diagnostic evaluation; it must not train).
    """
    ids = range(shards.num_clients) if client_ids is None else client_ids
    if dp is not None:
        if extra_loss is not None:
            raise ValueError("DP-SGD local training takes no extra client loss term")
        per_example = reconstruction_per_example(shards.x.dim() - 2)
        for e in range(epochs):
            run_dp_epoch(clients, shards.x, shards.sizes, seeding.client_rngs(seed, "dp-local", (r, e), ids),
                         batch_size, per_example, list(clients.params), part, dp)
            if after_epoch is not None:
                after_epoch(e)
        return
    loss = reconstruction_loss(clients, shards.x.dim() - 2, extra_loss)
    for e in range(epochs):
        run_epoch(clients, shards, seeding.client_rngs(seed, "local", (r, e), ids), batch_size, loss,
                  list(clients.params), part)
        if after_epoch is not None:
            after_epoch(e)


def client_loss_term(cfg, clients: StackedModels, global_params: dict[str, torch.Tensor]):
    """What a parameter-sharing client adds to L_recon this round: FedProx's c·||θ_i − θ^(r)||², else nothing."""
    if cfg.spec.client_term != "proximal" or not cfg.fedprox_coef:
        return None
    return ProximalTerm(cfg.fedprox_coef, clients.params, global_params)
