"""A file's digest, one way for every caller (run manifests, downloads' checksums, own data's content digest):
``hashlib.file_digest``, which reads in large blocks and releases the GIL."""
from __future__ import annotations

import hashlib
from pathlib import Path


def file_digest(path, algorithm: str = "sha256") -> str:
    with open(Path(path), "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()
