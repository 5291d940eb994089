"""Autoencoder architectures (SPEC §3).

Every fedgca autoencoder has ``encoder`` (input -> flat code of ``latent_dim``),
``decoder`` (flat code -> input) and ``forward = decoder ∘ encoder``.
"""
from __future__ import annotations

import torch
from torch import nn

from fedgca import seeding
from fedgca.models.tabular import TabularAE, tabular_param_count

__all__ = ["TabularAE", "tabular_param_count", "param_count", "build_model", "init_model"]


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_model(input_shape: tuple[int, ...]) -> nn.Module:
    """The SPEC §3 autoencoder for inputs of this shape: MLP for vectors, conv for (C, H, W)."""
    if len(input_shape) == 1:
        return TabularAE(int(input_shape[0]))
    from fedgca.models.conv import ConvAE

    channels, height, width = input_shape
    return ConvAE(channels, height, width)


def init_model(seed: int, input_shape: tuple[int, ...], client_id: int) -> nn.Module:
    """Client i's initial model depends only on (seed, i): a Flower client rebuilds the simulator's exactly."""
    with torch.random.fork_rng():
        torch.manual_seed(seeding.int_seed(seed, "init", client_id))
        return build_model(input_shape)
