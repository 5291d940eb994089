"""Shared pytest fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests compute as fedgca runs do: one torch intra-op thread (``fedgca run``'s default; sweeps give each
# worker cores // workers). A multi-threaded matmul splits its sums by shape — scoring one global model
# ([1, rows, d]) is split differently from scoring it in every client's slot — so the byte-identity
# checks (simulator ≡ Flower) hold at a fixed thread count, and this is the one every run uses.
from fedgca.threads import limit_threads  # noqa: E402

limit_threads(1)

# The project's read-only shared data sits beside the repository (../shared/data).
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Root of the real dataset files (``$FEDGCA_DATA_DIR`` or ../shared/data); skip if absent."""
    path = Path(os.environ.get("FEDGCA_DATA_DIR", DEFAULT_DATA_DIR))
    if not path.is_dir():
        if os.environ.get("CI"):  # CI must test the real files, never skip past them
            pytest.fail(f"dataset directory {path} not found (set FEDGCA_DATA_DIR)")
        pytest.skip(f"dataset directory {path} not found (set FEDGCA_DATA_DIR)")
    return path
