"""Autoencoder architectures (SPEC §3).

Every fedgca autoencoder has ``encoder`` (input -> flat code of ``latent_dim``),
``decoder`` (flat code -> input) and ``forward = decoder ∘ encoder``.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from fedgca import seeding
from fedgca.models.tabular import TabularAE, mlp_layers, tabular_param_count

__all__ = ["TabularAE", "mlp_layers", "tabular_param_count", "param_count", "forward_cost", "build_model",
           "init_model"]


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def forward_cost(model: nn.Module, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """Multiply-adds of one row's forward pass, (whole model, encoder alone), a bias add counted as one.

    For an MLP this is its parameter count P (each weight one multiply-add per row, each bias one add), so
    the cost model's "2P per scored row" is unchanged there; a convolution reuses each weight at every
    output position, so the vision AE's 334,609 parameters do ~16.7 M multiply-adds per 28×28 image
    (50× P). An autoencoder of Linear/ReLU stacks on rows (``mlp_layers``) is counted so; any other
    by torch's FlopCounterMode on a meta-device pass (``counted_cost``), which the first time in a process costs
    about a second of torch's meta set-up — every sweep, compare and bench predicts its runs' FLOPs at start.
    tests/test_cost.py holds the two to each other.
    """
    if len(input_shape) == 1 and all(mlp_layers(part) is not None for part in (model.encoder, model.decoder)):
        return param_count(model), param_count(model.encoder)
    return counted_cost(model, input_shape)


def counted_cost(model: nn.Module, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """``forward_cost`` counted by torch's FlopCounterMode on a meta-device pass (nothing is computed), plus one
    add per output element of each layer with a bias."""
    from torch.utils.flop_counter import FlopCounterMode

    meta = copy.deepcopy(model).to("meta")
    bias_adds = {"all": 0}

    def count_bias(module, _inputs, output):
        if isinstance(getattr(module, "bias", None), torch.Tensor):
            bias_adds["all"] += output[0].numel()

    hooks = [m.register_forward_hook(count_bias) for m in meta.modules() if not list(m.children())]
    try:
        x = torch.zeros((1, *input_shape), device="meta")
        costs = []
        for part in (meta, meta.encoder):
            bias_adds["all"] = 0
            with FlopCounterMode(display=False) as counter:
                part(x)
            costs.append(counter.get_total_flops() // 2 + bias_adds["all"])
    finally:
        for h in hooks:
            h.remove()
    return costs[0], costs[1]


def build_model(input_shape: tuple[int, ...]) -> nn.Module:
    """The SPEC §3 autoencoder for inputs of this shape: MLP for vectors, conv for (C, H, W).

    Its initialisers draw from torch's global generator: under ``seeding.TORCH_GLOBAL_RNG``, so that no other
    thread's draw falls between ``init_model``'s seeding and its draws."""
    from fedgca.models.conv import ConvAE

    with seeding.TORCH_GLOBAL_RNG:
        if len(input_shape) == 1:
            return TabularAE(int(input_shape[0]))
        channels, height, width = input_shape
        return ConvAE(channels, height, width)


def init_model(seed: int, input_shape: tuple[int, ...], client_id: int) -> nn.Module:
    """Client i's initial model depends only on (seed, i): a Flower client rebuilds the simulator's exactly."""
    # made on the CPU from the CPU generator whatever the run's device (fedgca.devices): the same draws everywhere
    with seeding.torch_global_seed(seeding.int_seed(seed, "init", client_id)):
        return build_model(input_shape)
