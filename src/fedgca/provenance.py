"""Which code produced a result: package versions and, in a git checkout, the commit."""
from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

import torch


@functools.cache
def code_version() -> dict:
    """``{"fedgca", "torch", "git", "cpu"}``; git is the commit (with ``-dirty`` for uncommitted changes) or None.

    cpu is torch's CPU kernel family (e.g. "AVX2", "AVX512"). The same code and seed give bit-identical numbers
    on one machine, not across machines: magic GCA R = 3's metrics.csv differs between an earlier session's
    machine and an AVX512 one at the same commit. A run names the family it ran on, the likeliest cause."""
    return {"fedgca": _package_version(), "torch": torch.__version__, "git": _git_commit(Path(__file__).parent),
            "cpu": torch.backends.cpu.get_cpu_capability()}


def _package_version() -> str | None:
    try:
        return metadata.version("fedgca")
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
