"""Which code produced a result: package versions and, in a git checkout, the commit."""
from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

import torch


@functools.cache
def code_version() -> dict:
    """``{"fedgca", "torch", "git"}``; git is the commit (with ``-dirty`` for uncommitted changes) or None."""
    return {"fedgca": _package_version(), "torch": torch.__version__, "git": _git_commit(Path(__file__).parent)}


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
