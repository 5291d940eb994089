"""Decoding an ADBench ``.npz`` or ODDS ``.mat`` file safely: its X and y arrays, or one :class:`DataError` that
names the file and says what is wrong — truncated, a flipped byte, pickled object arrays (never loaded), not such a
file at all. No decoder's own exception type escapes (tests/test_damaged_files.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import DataError

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive (an empty one starts with the second)
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"  # MATLAB v7.3 files


def _damage(exc: BaseException) -> str:
    """What a decoder's exception says about a file, in words a user can act on (never a suggestion to
    load it unsafely, and never cut mid-word)."""
    import zipfile
    import zlib

    if isinstance(exc, zipfile.BadZipFile):
        return f"damaged zip archive, truncated or corrupted ({exc})"
    if isinstance(exc, (zlib.error, EOFError)):
        return "damaged: a compressed array does not decompress (the file is truncated or corrupted)"
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and "could not read" in text:
        return "truncated: it ends before its arrays do"
    if "unknown mat file type" in text.lower():
        return "not a MATLAB v5 file (its header is not one)"
    if "pickle" in text.lower():
        return "holds pickled object arrays, which fedgca never loads (save numeric arrays: np.savez(F, X=X, y=y))"
    return f"{type(exc).__name__}: {text[:200].rsplit(' ', 1)[0] if len(text) > 200 else text}"


def read_npz(path: Path) -> dict:
    """X and y of an ADBench .npz, read whole here so that any damage shows now, as one DataError."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head not in ZIP_MAGIC:
        raise DataError(f"{path}: not an .npz file (no zip header; an .npz is a zip archive of .npy arrays, "
                        "np.savez(F, X=X, y=y))")
    try:
        with np.load(path, allow_pickle=False) as f:  # pickled object arrays are refused, never loaded
            return {k: np.asarray(f[k]) for k in f.files if k in ("X", "y")}
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 — zipfile, zlib, numpy's format checks: every decoder error is damage
        raise DataError(f"{path}: not a readable .npz, {_damage(e)}") from None


def read_mat(path: Path) -> dict:
    """X and y of an ODDS .mat (MATLAB v5)."""
    from scipy.io import loadmat

    with open(path, "rb") as fh:
        head = fh.read(128)
    if head.startswith(HDF5_MAGIC) or b"MATLAB 7.3" in head:
        raise DataError(f"{path}: a MATLAB v7.3 (HDF5) file, which fedgca does not read: re-save it with -v7 or "
                        "convert it to .npz")
    try:
        return {k: v for k, v in loadmat(path).items() if k in ("X", "y")}
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 — scipy raises MatReadError, ValueError, zlib.error, TypeError ...
        raise DataError(f"{path}: not a readable .mat file, {_damage(e)}") from None


__all__ = ["read_mat", "read_npz"]
