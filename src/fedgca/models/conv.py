"""Convolutional autoencoder for images (SPEC §3, "Vision AE").

Encoder: Conv 3×3 (C → 128, stride 2, pad 1), ReLU, Conv 3×3 (128 → 128,
stride 2, pad 1), ReLU, Conv 3×3 (128 → 16, stride 1, pad 1), then flatten to
a code of ``16·H/4·W/4`` values (1,024 for 3×32×32, 784 for 1×28×28).
Decoder mirrors it: unflatten, ConvTranspose 3×3 (16 → 128, stride 1, pad 1),
ReLU, ConvTranspose 3×3 (128 → 128, stride 2, pad 1, output_padding 1), ReLU,
ConvTranspose 3×3 (128 → C, stride 2, pad 1, output_padding 1), tanh (images
are scaled to [−1, 1], SPEC §4). All layers have a bias; there is no
normalisation layer, so the parameters are exactly what FedAvg averages.

Parameter counts (SPEC §3 invariants): 339,219 for 3×32×32 and 334,609 for
1×28×28. SPEC allows "Conv/ConvTranspose" for the first decoder layer; a 3×3
16 → 128 layer has 18,560 parameters either way, and ConvTranspose2d is used
here so the decoder is the transpose-mirror of the encoder.

Interface (shared with :class:`fedgca.models.tabular.TabularAE`): ``encoder``
maps ``[B, C, H, W]`` to a FLAT code ``[B, latent_dim]``, ``decoder`` maps the
flat code back to ``[B, C, H, W]`` and ``forward = decoder ∘ encoder``.
"""
from __future__ import annotations

from torch import nn

CODE_CHANNELS = 16
HIDDEN_CHANNELS = 128


class ConvAE(nn.Module):
    """SPEC §3 vision autoencoder for ``in_channels × height × width`` images.

    ``height`` and ``width`` must be multiples of 4 (two stride-2 stages).
    Attributes: ``in_channels``, ``height``, ``width``, ``latent_dim``
    (= 16·H/4·W/4) and ``input_dim`` (= C·H·W).
    """

    def __init__(self, in_channels: int, height: int, width: int):
        super().__init__()
        in_channels, height, width = int(in_channels), int(height), int(width)
        if in_channels < 1 or height < 4 or width < 4 or height % 4 or width % 4:
            raise ValueError(
                f"ConvAE needs C >= 1 and H, W positive multiples of 4 (SPEC §3), got {in_channels}x{height}x{width}"
            )
        self.in_channels = in_channels
        self.height = height
        self.width = width
        self.input_dim = in_channels * height * width
        code_shape = (CODE_CHANNELS, height // 4, width // 4)
        self.code_shape = code_shape
        self.latent_dim = CODE_CHANNELS * (height // 4) * (width // 4)
        h = HIDDEN_CHANNELS
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, h, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(h, h, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(h, CODE_CHANNELS, kernel_size=3, stride=1, padding=1),
            nn.Flatten(start_dim=1),
        )
        self.decoder = nn.Sequential(
            nn.Unflatten(1, code_shape),
            nn.ConvTranspose2d(CODE_CHANNELS, h, kernel_size=3, stride=1, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(h, h, kernel_size=3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(h, in_channels, kernel_size=3, stride=2, padding=1, output_padding=1),
            nn.Tanh(),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def conv_param_count(in_channels: int) -> int:
    """Closed form of the SPEC §3 vision AE's parameter count (independent of H, W).

    (1,152·C + 128) first conv + 147,584 + 18,448 + 18,560 + 147,584 +
    (1,152·C + C) last deconv = 2,305·C + 332,304: 339,219 for C = 3 and
    334,609 for C = 1.
    """
    c = int(in_channels)
    return (1152 * c + 128) + 147_584 + 18_448 + 18_560 + 147_584 + (1152 * c + c)
