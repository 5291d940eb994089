"""Put fedgca's mask generator (``protocol.masks``) in force on both ends of Flower's SecAgg+, and check that it is.

Flower's ``secaggplus_mod`` (client) and ``SecAggPlusWorkflow`` (server, which regenerates a dropped client's
pairwise masks and every surviving client's private mask) draw their masks through the module-level name
``pseudo_rand_gen``; ``in_force()`` rebinds that name in both modules and verifies — before any secure exchange, on
each side — that it is bound to fedgca's generator, that Flower's mask code still looks the name up there, and that
Flower is the version this was verified against (``TESTED_FLOWER``, as pinned in pyproject.toml). Anything else is
one ``MaskGeneratorError`` line and no masked vector leaves (a node) or no secure round starts (the server): a Flower
upgrade that changes the function fails the tests rather than reverting silently to the 32-bit-seeded generator.
"""
from __future__ import annotations

import importlib

import flwr

from fedgca.protocol import masks

TESTED_FLOWER = ("1.41.",)  # the flwr releases whose SecAgg+ mask code was read and tested with this module
CLIENT_MODULE = "flwr.client.mod.secure_aggregation.secaggplus_mod"
SERVER_MODULE = "flwr.server.workflow.secure_aggregation.secaggplus_workflow"
_USERS = {CLIENT_MODULE: ("_collect_masked_vectors",), SERVER_MODULE: ("SecAggPlusWorkflow.unmask_stage",)}


class MaskGeneratorError(RuntimeError):
    """SecAgg+ would mask with a generator other than fedgca's: the secure exchange is refused."""


def _function(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def install() -> None:
    """Bind Flower's ``pseudo_rand_gen`` to fedgca's generator in the client mod's and the workflow's modules."""
    for name in _USERS:
        importlib.import_module(name).pseudo_rand_gen = masks.mask_arrays


def check() -> None:
    """Raise ``MaskGeneratorError`` unless both of Flower's mask users draw from fedgca's generator."""
    if not flwr.__version__.startswith(TESTED_FLOWER):
        raise MaskGeneratorError(f"flwr {flwr.__version__}: fedgca's SecAgg+ masks were verified with flwr "
                                 f"{'/'.join(v + 'x' for v in TESTED_FLOWER)} only; a secure run is refused")
    for name, users in _USERS.items():
        module = importlib.import_module(name)
        if getattr(module, "pseudo_rand_gen", None) is not masks.mask_arrays:
            raise MaskGeneratorError(f"{name}.pseudo_rand_gen is not fedgca's mask generator; a secure run is "
                                     "refused")
        for dotted in users:
            if "pseudo_rand_gen" not in _function(module, dotted).__code__.co_names:
                raise MaskGeneratorError(f"flwr {flwr.__version__}: {dotted} no longer draws its masks through "
                                         "pseudo_rand_gen; fedgca cannot replace its generator, a secure run is refused")


def in_force() -> str:
    """Install and check fedgca's generator; returns its name (what a node announces at registration)."""
    install()
    check()
    return masks.NAME
