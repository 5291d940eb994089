"""Shared pytest fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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
