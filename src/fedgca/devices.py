"""The torch device a run computes on (``--device``): one rule for the simulator, the Flower apps, detectors
and attacks.

Where draws come from does not depend on it: every seeded draw (model initialisation, batch order, uploads,
clustering starts, DP noise) is made on the CPU, by the same generators, and only then moved — so a seed
means the same draws on every device, and results across devices agree to floating-point tolerance (not bit
for bit: kernels sum in other orders). Tensors meant for the run are created with ``device=`` explicitly
(tests run every method under ``torch.set_default_device("meta")`` to catch one that is not).
"""
from __future__ import annotations

import re

import numpy as np

CHOICES = "auto, cpu, cuda, cuda:N or mps"
_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


def check(name) -> None:
    """The option's syntax (availability is checked when a run starts, on the machine that runs it)."""
    if not isinstance(name, str) or not _PATTERN.fullmatch(name):
        raise ValueError(f"--device: {name!r} is not a device; choose {CHOICES}")


def resolve(name: str = "auto"):
    """The ``torch.device`` for ``name``: ``auto`` is CUDA when available, else the CPU; an unavailable device
    is one clear error."""
    import torch

    check(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: this machine's torch sees no CUDA device (use --device cpu or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: there are {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available here (use --device cpu or auto)")
    return dev


def has_float64(device) -> bool:
    """Whether ``device`` computes in float64: Apple's MPS does not. What the device engine computes in float64
    there (the clustering's torch engines, the detection metrics) stays on the CPU."""
    import torch

    return torch.device(device).type != "mps"


def to_numpy(t) -> np.ndarray:
    """A tensor's values as a NumPy array, from any device."""
    return t.detach().cpu().numpy()


def as_numpy(a) -> np.ndarray:
    """A reply's array as NumPy: a NumPy array as it is, a tensor through ``to_numpy``."""
    return a if isinstance(a, np.ndarray) else to_numpy(a)
