"""Tabular autoencoder of SPEC §3: dx → 256 → 64 → 16 → 64 → 256 → dx."""
from __future__ import annotations

from torch import nn


def _mlp(widths: list[int]) -> nn.Sequential:
    """Linear layers with ReLU between them and a linear last layer."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def mlp_layers(module: nn.Module) -> list[tuple[str, bool]] | None:
    """``[(linear layer name, ReLU after it)]`` for an nn.Sequential of Linear/ReLU; None otherwise."""
    if not isinstance(module, nn.Sequential):
        return None
    layers: list[list] = []
    for name, layer in module.named_children():
        if isinstance(layer, nn.Linear):
            layers.append([name, False])
        elif isinstance(layer, nn.ReLU) and layers and not layers[-1][1]:
            layers[-1][1] = True
        else:
            return None
    return [(name, relu) for name, relu in layers]


class TabularAE(nn.Module):
    """Encoder ``E: R^dx -> R^dz`` and decoder ``D: R^dz -> R^dx``.

    Every fedgca autoencoder exposes ``encoder`` (input -> flat code),
    ``decoder`` (flat code -> input) and ``latent_dim``; the simulator, the
    attacks and the Flower apps rely on nothing else.
    """

    def __init__(self, input_dim: int, hidden: tuple[int, ...] = (256, 64), latent_dim: int = 16):
        super().__init__()
        self.input_dim = input_dim
        self.latent_dim = latent_dim
        widths = [input_dim, *hidden, latent_dim]
        self.encoder = _mlp(widths)
        self.decoder = _mlp(widths[::-1])

    def forward(self, x):
        return self.decoder(self.encoder(x))


def tabular_param_count(input_dim: int) -> int:
    """SPEC §3 closed form P = 513·dx + 35,472 (for the default widths)."""
    return 513 * input_dim + 35_472
