"""Which code produced a result: package versions and, in a git checkout, the commit."""
from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

import torch


@functools.cache
def code_version() -> dict:
    """``{"fedgca", "torch", "numpy", "scipy", "scikit-learn", "git", "cpu"}``: the versions of what computes a
    result; git is the commit (with ``-dirty`` for uncommitted changes) or None, read when fedgca was loaded in this
    process (``_GIT_AT_LOAD``); cpu is torch's CPU kernel family (e.g. "AVX2", "AVX512").

    The same code and seed give bit-identical numbers on one machine, not necessarily across machines: magic
    GCA R = 3's metrics.csv differed between two machines at the same commit, the second AVX512 with freshly
    installed libraries. Either can move the last bits, so a run names both."""
    return {"fedgca": _package_version("fedgca"), "torch": torch.__version__,
            **{name: _package_version(name) for name in ("numpy", "scipy", "scikit-learn")},
            "git": _GIT_AT_LOAD, "cpu": torch.backends.cpu.get_cpu_capability()}


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10,
                          check=True).stdout.strip()


@functools.cache
def later_commit(a: str, b: str, where: Path) -> str | None:
    """Of two commits a run recorded (``code.git``, maybe ``-dirty``), the one that descends from the other in the
    repository at ``where``; None when they are the same commit, neither descends from the other, or git cannot
    tell (no git, not a checkout, a commit this clone lacks)."""
    a0, b0 = a.removesuffix("-dirty"), b.removesuffix("-dirty")
    if a0 == b0:
        return None
    for older, newer in ((a0, b0), (b0, a0)):
        try:
            _git(where, "merge-base", "--is-ancestor", older, newer)
        except (OSError, subprocess.SubprocessError):
            continue  # exit 1: not an ancestor; other failures: cannot tell
        return b if newer == b0 else a
    return None


def _git_commit(where: Path) -> str | None:
    try:
        commit = _git(where, "rev-parse", "HEAD")
        dirty = bool(_git(where, "status", "--porcelain", "--", "."))
    except (OSError, subprocess.SubprocessError):
        return None  # not a checkout (installed from a wheel), or no git
    return commit + ("-dirty" if dirty else "")


# Read when this module is loaded, not when a result is written: a run of hours names the commit its process runs,
# not one checked out while it ran (a 2.3-hour Fashion-MNIST run named a commit made during its last hour). A
# sweep's workers inherit their fork server's reading, made when it loaded fedgca.
_GIT_AT_LOAD = _git_commit(Path(__file__).parent)
