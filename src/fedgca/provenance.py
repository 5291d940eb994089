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
    result; git is the commit (with ``-dirty`` for uncommitted changes) or None; cpu is torch's CPU kernel family
    (e.g. "AVX2", "AVX512").

    The same code and seed give bit-identical numbers on one machine, not necessarily across machines: magic
    GCA R = 3's metrics.csv differed between two machines at the same commit, the second AVX512 with freshly
    installed libraries. Either can move the last bits, so a run names both."""
    return {"fedgca": _package_version("fedgca"), "torch": torch.__version__,
            **{name: _package_version(name) for name in ("numpy", "scipy", "scikit-learn")},
            "git": _git_commit(Path(__file__).parent), "cpu": torch.backends.cpu.get_cpu_capability()}


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git_commit(where: Path) -> str | None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "."))
    except (OSError, subprocess.SubprocessError):
        return None  # not a checkout (installed from a wheel), or no git
    return commit + ("-dirty" if dirty else "")
