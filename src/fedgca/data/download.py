"""Where dataset files live, and how missing ones are fetched (SPEC §4, "Missing files").

Layout: ``<data_dir>/<dataset>/<file>``, the same as ``shared/data`` in the
project. ``data_dir`` comes from ``--data-dir``, else ``$FEDGCA_DATA_DIR``, else
the per-user cache directory (see :func:`resolve_data_dir`).

A missing file is downloaded from its distributor's URL (standard-library
``urllib`` only) and checked against the checksum recorded for it; when the
download is not allowed or fails, :class:`DataError` says which directory was
searched, which files are expected there and where to get them. Files already
present are trusted as they are (not re-hashed on every load): a practitioner
may place their own copy, and hashing 150 MB on every run buys nothing.
"""
from __future__ import annotations

import http.client
import logging
import os
import shutil
import sys
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fedgca.filehash import file_digest

from .errors import DataError

log = logging.getLogger(__name__)

ENV_VAR = "FEDGCA_DATA_DIR"
DOWNLOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RemoteFile:
    """One file a dataset needs, and where its distributor publishes it.

    ``name`` is the file name inside ``<data_dir>/<dataset>/``. ``url`` is the
    distributor's download address (``None`` when the distributor requires a
    login, e.g. Kaggle); when ``member`` is set, ``url`` points to a zip archive
    and ``member`` is the archive member that becomes ``name``. ``sha256`` /
    ``md5`` (hex) is the checksum of the final file ``name``; ``None`` when
    nothing is recorded. ``alternatives`` are other names that satisfy the
    requirement (e.g. a compressed copy); ``source`` is a human hint used in
    error messages where ``url`` alone would not help.
    """

    name: str
    url: str | None
    sha256: str | None = None
    md5: str | None = None
    member: str | None = None
    alternatives: tuple[str, ...] = ()
    source: str | None = None


def default_cache_dir() -> Path:
    """The platform's per-user cache directory for fedgca (no third-party dependency)."""
    home = Path.home()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        return (Path(base) if base else home / "AppData" / "Local") / "fedgca" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "fedgca"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else home / ".cache") / "fedgca"


def resolve_data_dir(cli_value: str | os.PathLike | None = None) -> Path:
    """``--data-dir`` if given, else ``$FEDGCA_DATA_DIR``, else the per-user cache (SPEC §4)."""
    if cli_value not in (None, ""):
        return Path(cli_value).expanduser()
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser()
    return default_cache_dir()


def locate(dataset_dir: Path, rf: RemoteFile) -> Path | None:
    """The first existing path among ``rf.name`` and its alternatives, or ``None``."""
    for name in (rf.name, *rf.alternatives):
        p = Path(dataset_dir) / name
        if p.exists():
            return p
    return None


def _where_to_get(rf: RemoteFile) -> str:
    if rf.source:
        return rf.source
    if rf.member:
        return f"member {rf.member} of {rf.url}"
    return str(rf.url)


def _missing_message(dataset_dir: Path, missing: list[RemoteFile], reason: str) -> str:
    """One line: which dataset, which files, why they are not there, where to get them."""
    names = ", ".join(rf.name for rf in missing)
    paths = ", ".join(str(dataset_dir / rf.name) for rf in missing)
    alts = [a for rf in missing for a in rf.alternatives]
    alt_txt = f" (or {', '.join(alts)})" if alts else ""
    sources = "; ".join(f"{rf.name}: {_where_to_get(rf)}" for rf in missing)
    return (
        f"{dataset_dir.name}: missing {paths}; {reason} — place {names}{alt_txt} "
        f"in {dataset_dir} (download from {sources})"
    )


def _check_digest(path: Path, rf: RemoteFile) -> None:
    """Compare the file against the recorded checksum; remove it and raise on mismatch."""
    for algo, expected in (("sha256", rf.sha256), ("md5", rf.md5)):
        if not expected:
            continue
        got = file_digest(path, algo)
        if got.lower() != expected.lower():
            path.unlink(missing_ok=True)
            raise DataError(
                f"{path}: {algo} checksum mismatch after download "
                f"(expected {expected}, got {got}); file removed"
            )


def _fetch(url: str, dest: Path) -> None:
    """Stream ``url`` to ``dest`` (network errors propagate to the caller), with a progress bar on a terminal (none
    in logs: a redirected stderr gets nothing)."""
    from tqdm import tqdm

    req = urllib.request.Request(url, headers={"User-Agent": "fedgca"})
    with urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S) as resp, open(dest, "wb") as out:
        total = int(getattr(resp, "headers", {}).get("Content-Length") or 0) or None
        with tqdm.wrapattr(out, "write", total=total, desc=f"downloading {dest.name.removesuffix('.part')}",
                           unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                           disable=not sys.stderr.isatty()) as sink:
            shutil.copyfileobj(resp, sink, length=1 << 20)


def _extract_member(archive: Path, member: str, dest: Path) -> None:
    """Copy one zip member (matched by its base name, wherever it sits) to ``dest``."""
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n == member or n.rsplit("/", 1)[-1] == member]
            if not names:
                raise DataError(f"{archive}: downloaded archive has no member {member}")
            with zf.open(names[0]) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, length=1 << 20)
    except zipfile.BadZipFile as e:
        raise DataError(f"{archive}: downloaded file is not a valid zip archive ({e})") from None


def download_file(dataset_dir: Path, rf: RemoteFile) -> Path:
    """Download one file into ``dataset_dir`` atomically, verifying its checksum.

    Writes to ``<name>.part`` first so an interrupted download never looks like
    a complete file. Network errors propagate (``OSError`` /
    ``http.client.HTTPException``); checksum and archive problems raise
    :class:`DataError`.
    """
    assert rf.url is not None
    final = dataset_dir / rf.name
    part = dataset_dir / (rf.name + ".part")
    archive = dataset_dir / (rf.name + ".archive.part")
    try:
        if rf.member:
            _fetch(rf.url, archive)
            _extract_member(archive, rf.member, part)
        else:
            _fetch(rf.url, part)
        _check_digest(part, rf)
        os.replace(part, final)
    finally:
        part.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)
    return final


def ensure_files(dataset_dir: Path, files: list[RemoteFile] | tuple[RemoteFile, ...], download: bool = True) -> None:
    """Make sure every file in ``files`` exists in ``dataset_dir`` (SPEC §4, "Missing files").

    Missing files are downloaded when ``download`` is true and a URL exists.
    Raises :class:`DataError` naming the directory and the exact files expected
    when they cannot be obtained (download disabled, no public URL, offline or
    any network failure, checksum mismatch).
    """
    dataset_dir = Path(dataset_dir)
    missing = [rf for rf in files if locate(dataset_dir, rf) is None]
    if not missing:
        return
    manual = [rf for rf in missing if rf.url is None]
    if manual:
        raise DataError(_missing_message(dataset_dir, missing, "no public download URL (distributor requires login)"))
    if not download:
        raise DataError(_missing_message(dataset_dir, missing, "download disabled"))
    try:
        dataset_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(_missing_message(dataset_dir, missing, f"cannot create the directory ({e.strerror or e})")) from None
    for i, rf in enumerate(missing):
        log.info("downloading %s from %s into %s", rf.name, rf.url, dataset_dir)
        try:
            download_file(dataset_dir, rf)
        except (OSError, http.client.HTTPException) as e:
            reason = " ".join(str(getattr(e, "reason", None) or e).split())
            raise DataError(_missing_message(dataset_dir, missing[i:], f"offline or download failed ({reason})")) from None
