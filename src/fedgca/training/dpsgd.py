"""DP-SGD over stacked client MLP autoencoders: per-example clipping without per-example gradients.

For a linear layer z = W a + b, example n's weight gradient is the rank-one δ_n a_nᵀ (δ_n = ∂ℓ_n/∂z_n),
so its squared norm is ||δ_n||²·||a_n||² and its bias gradient's is ||δ_n||² ("ghost clipping",
Goodfellow 2015; Li et al. 2022). One backward pass to the layer outputs gives every δ; the per-example
norm over all trained layers follows, and the clipped sum Σ_n c_n δ_n a_nᵀ is one batched matmul
per layer — the same cost as the weight gradients of ordinary training. Checked against Opacus'
per-sample gradients and against brute force (tests/test_dp.py).

The noise, N(0, σ² S² I) on each client's clipped sum, and the batches (``protocol.dp.sgd_batches``)
come from the client's own generator, so a Flower client (C = 1) draws exactly what its slot draws here.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedgca.protocol import dp as dp_protocol
from fedgca.training.stacked import StackedModels, mlp_layers


class Tape:
    """Forward passes of the stacked MLP that keep each linear layer's input and output."""

    def __init__(self, clients: StackedModels):
        self.clients = clients
        self.records: list[tuple[str, Tensor, Tensor]] = []  # (parameter prefix, input a, output z)

    def _run(self, part: str, x: Tensor) -> Tensor:
        layers = mlp_layers(getattr(self.clients.base, part))
        if layers is None:
            raise ValueError("DP-SGD is implemented for the MLP (tabular) autoencoder only")
        h = x
        for name, relu in layers:
            prefix = f"{part}.{name}."
            w = self.clients.params[prefix + "weight"].detach()
            b = self.clients.params[prefix + "bias"].detach()
            z = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if not z.requires_grad:  # the first layer (parameters detached): differentiate from its output on
                z.requires_grad_(True)
            self.records.append((prefix, h.detach(), z))
            h = torch.relu(z) if relu else z
        return h

    def encode(self, x: Tensor) -> Tensor:
        return self._run("encoder", x)

    def decode(self, z: Tensor) -> Tensor:
        return self._run("decoder", z)


def clipped_gradient_sums(tape: Tape, per_row_loss: Tensor, mask: Tensor, clip: float,
                          keys: list[str]) -> tuple[dict[str, Tensor], Tensor]:
    """Σ_n min(1, S/||g_n||)·g_n per client for the parameters ``keys``, and the norms ||g_n|| [C, B].

    ``per_row_loss`` [C, B] is each example's loss; padded rows (mask 0) contribute nothing.
    """
    records = [r for r in tape.records if r[0] + "weight" in keys]
    if {r[0] + "weight" for r in records} | {r[0] + "bias" for r in records} != set(keys):
        raise ValueError("the loss does not reach every trained parameter")
    deltas = torch.autograd.grad((per_row_loss * mask).sum(), [z for _, _, z in records])
    sq = torch.zeros_like(per_row_loss)
    for (_, a, _), d in zip(records, deltas):
        sq = sq + d.pow(2).sum(-1) * (a.pow(2).sum(-1) + 1.0)
    norms = sq.sqrt()
    scale = (clip / norms.clamp_min(1e-12)).clamp(max=1.0) * mask
    sums: dict[str, Tensor] = {}
    for (prefix, a, _), d in zip(records, deltas):
        ds = d * scale.unsqueeze(-1)
        sums[prefix + "weight"] = torch.bmm(ds.transpose(1, 2), a)
        sums[prefix + "bias"] = ds.sum(1)
    return sums, norms.detach()


def run_dp_epoch(clients: StackedModels, x: Tensor, sizes: np.ndarray, rngs: list[np.random.Generator],
                 batch_size: int, per_row_loss, keys: list[str], participating: Tensor,
                 dp: dp_protocol.RecordDP) -> Tensor:
    """One DP-SGD epoch (⌈N_i/b⌉ steps, b = min(B, N_i)) of the participating clients on ``keys``.

    ``per_row_loss(tape, xb)`` returns each example's loss [C, B]. Each step: clipped sum + noise,
    divided by b, then the client's Adam step (post-processing). Returns each client's mean batch loss.
    """
    n_clients = len(sizes)
    shapes = {k: clients.params[k].shape[1:] for k in keys}
    numel = sum(int(np.prod(s)) for s in shapes.values())
    plans, noises = [], []
    for c in range(n_clients):
        if bool(participating[c]):
            batches = dp_protocol.sgd_batches(rngs[c], int(sizes[c]), batch_size)
            noise = rngs[c].standard_normal((len(batches), numel), dtype=np.float32)
        else:
            batches, noise = np.zeros((0, 1), dtype=np.int64), np.zeros((0, numel), dtype=np.float32)
        plans.append(batches)
        noises.append(noise)
    n_steps = max(len(p) for p in plans)
    width = max(p.shape[1] for p in plans)
    idx = np.zeros((n_steps, n_clients, width), dtype=np.int64)
    mask = np.zeros((n_steps, n_clients, width), dtype=np.float32)
    noise = np.zeros((n_steps, n_clients, numel), dtype=np.float32)
    for c, (p, z) in enumerate(zip(plans, noises)):
        idx[: len(p), c, : p.shape[1]] = p
        mask[: len(p), c, : p.shape[1]] = 1.0
        noise[: len(z), c] = z
    dev = x.device  # the plans and the noise were drawn on the CPU (fedgca.devices); they compute where x is
    idx_t, mask_t, noise_t = (torch.from_numpy(a).to(dev) for a in (idx, mask, noise))
    rows = torch.arange(n_clients, device=dev).unsqueeze(-1)
    total, n_batches = torch.zeros(n_clients, device=dev), torch.zeros(n_clients, device=dev)
    std = dp.grad_sigma * dp.grad_clip
    for step in range(n_steps):
        m = mask_t[step]
        b = m.sum(-1)
        active = b > 0
        tape = Tape(clients)
        loss = per_row_loss(tape, x[rows, idx_t[step]])
        sums, _ = clipped_gradient_sums(tape, loss, m, dp.grad_clip, keys)
        flat_noise = noise_t[step] * std
        grads, at = {}, 0
        denom = b.clamp_min(1.0)
        for k in keys:
            n = int(np.prod(shapes[k]))
            g = sums[k] + flat_noise[:, at: at + n].view(n_clients, *shapes[k])
            grads[k] = g / denom.view(-1, *[1] * len(shapes[k]))
            at += n
        clients.optim.step_active(grads, active)
        total += ((loss.detach() * m).sum(-1) / denom) * active
        n_batches += active
    clients.optim.end_epoch(participating)
    return total / n_batches.clamp_min(1)
