"""The files of a run directory: their names, atomic writes, a SHA-256 manifest, and safe reading.

Run directories are handed around ("here are my runs, attack or resume them"),
so nothing read back from one may execute code: checkpoints and models hold
only tensors and plain containers and are read with ``torch.load(...,
weights_only=True)``; everything else is JSON. ``manifest.json`` records the
SHA-256 and size of every file fedgca wrote, so that a file truncated by a
full disk or modified by hand is reported as such, with its name, before it
is used.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import pickle
import threading
import zipfile
from pathlib import Path

import torch

from fedgca import tensorpack
from fedgca.evaluation.selection import DETECTION, METRIC_FIELDS
from fedgca.filehash import file_digest

CONFIG = "config.json"
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.csv"
CLIENT_METRICS = "metrics_clients.csv"
COMM = "comm.json"
SUMMARY = "summary.json"
TEST_ROWS = "test_rows.csv"  # which rows of the data made the test set (tabular runs)
MANIFEST = "manifest.json"
CLIENTS = "clients"
CLIENT_METRIC_FIELDS = ["round", "phase", "epoch", "client", *DETECTION]


class RunFileError(ValueError):
    """A file of a run directory is missing, truncated, modified, foreign or unsafe."""


# ---------------------------------------------------------------------------- writing


def _atomic(path: Path, write, *, durable: bool = True, before_replace=None) -> None:
    """``write(file)`` into ``path``'s temporary sibling, then swap it in: a kill at any moment leaves the
    old file or the new one.

    ``durable``: fsync the file before the swap and its directory after it — the rule for every file fedgca must not
    lose: the new file's data and its new name both reach the disk, so it survives a power loss, not only a killed
    process (off for files rebuilt from the checkpoint on resume, such as metrics.csv). ``before_replace`` runs
    between the write and the swap.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
        if durable:
            fsync_directory(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the directory entry is data of the directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform without directory handles (Windows): the rename is as durable as it gets
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    data = text.encode()
    _atomic(path, lambda f: f.write(data), durable=durable)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    _atomic(path, lambda f: f.write(data), durable=durable)


class MetricsWriter:
    """metrics.csv: one row per evaluation, the same columns from both drivers; metrics_clients.csv: the
    same evaluations client by client (statistics of one client, e.g. the weighting ablation's).

    A run's rows only grow, and both files are replaced whole after every round: each row is formatted
    once and kept (at R = 100 formatting every row every round cost ~10 s of an adult GCA run). Both files
    are rebuilt from the checkpoint on resume, so they need no fsync.
    """

    def __init__(self, run_dir):
        self.dir, self._done = Path(run_dir), 0
        self._main, self._clients = io.StringIO(newline=""), io.StringIO(newline="")
        self._main_writer = csv.DictWriter(self._main, fieldnames=METRIC_FIELDS, extrasaction="ignore",
                                           lineterminator="\r\n")
        self._main_writer.writeheader()
        self._client_writer = csv.writer(self._clients, lineterminator="\r\n")
        self._client_writer.writerow(CLIENT_METRIC_FIELDS)

    def write(self, rows: list[dict]) -> None:
        if len(rows) < self._done:  # not the list this writer has seen grow: start again
            self.__init__(self.dir)
        for row in rows[self._done:]:
            self._main_writer.writerow(row)
            self._client_writer.writerows(client_metric_rows(row))
        self._done = len(rows)
        atomic_write_text(self.dir / METRICS, self._main.getvalue(), durable=False)
        atomic_write_text(self.dir / CLIENT_METRICS, self._clients.getvalue(), durable=False)


def client_metric_rows(row: dict) -> list[list]:
    """One metrics row's per-client figures as metrics_clients.csv lines (client = the client's id: its
    slot in the simulator, its registered id on Flower)."""
    per = row.get("per_client") or {}
    if not per:
        return []
    n = len(per[DETECTION[0]])
    ids = per.get("client_id") or range(n)
    return [[row["round"], row["phase"], row["epoch"], int(c), *(per[m][i] for m in DETECTION)]
            for i, c in enumerate(ids)]


class _HashingWriter:
    """A file wrapper that hashes what ``torch.save`` streams through it (no second pass, no in-memory copy)."""

    def __init__(self, f):
        self.f, self.sha, self.bytes = f, hashlib.sha256(), 0

    def write(self, b) -> int:
        self.sha.update(b)
        self.bytes += len(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()

    def entry(self) -> dict:
        return {"sha256": self.sha.hexdigest(), "bytes": self.bytes}


def save_tensors(path: Path, obj) -> None:
    """``torch.save`` of tensors and plain containers, atomically (no partial or 0-byte file survives a kill)."""
    _atomic(path, lambda f: torch.save(obj, f))


# ---------------------------------------------------------------------------- manifest


def sha256_of(path: Path) -> str:
    """A file's SHA-256 (``fedgca.filehash``): what the manifest records."""
    return file_digest(path)


def _read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        if not isinstance(files, dict):
            raise TypeError
        return files
    except (ValueError, KeyError, TypeError):
        raise RunFileError(f"{path}: not a fedgca manifest (unreadable JSON or no 'files' table)") from None


def _entry(path: Path) -> dict:
    return {"sha256": sha256_of(path), "bytes": path.stat().st_size}


def _write_manifest(run_dir: Path, files: dict) -> None:
    atomic_write_text(Path(run_dir) / MANIFEST, json.dumps({"files": dict(sorted(files.items()))}, indent=1))


def record(run_dir, *names: str) -> None:
    """Add (or refresh) ``names`` — paths relative to ``run_dir`` — in the manifest."""
    run_dir = Path(run_dir)
    files = _read_manifest(run_dir)
    for name in names:
        files[name] = _entry(run_dir / name)
    _write_manifest(run_dir, files)


def forget(run_dir, name: str) -> None:
    """Delete ``run_dir/name`` and its manifest entry (the file first: a kill between the two leaves an entry whose
    file is missing, which ``verify`` names, never a file read unverified)."""
    run_dir = Path(run_dir)
    (run_dir / name).unlink(missing_ok=True)
    files = _read_manifest(run_dir)
    if files.pop(name, None) is not None:
        _write_manifest(run_dir, files)


def save_checkpoint(run_dir, obj, name: str = CHECKPOINT) -> None:
    """Replace ``run_dir/name`` atomically and keep the manifest right whenever the process is killed.

    The new file's hash is first added to the manifest as ``pending`` (both the
    old and the new file then verify), the file is swapped in, and the entry is
    settled: a kill between any two steps leaves a checkpoint the manifest accepts.
    The state is written packed (``fedgca.tensorpack``); ``load_tensors`` unpacks it.
    """
    packed = tensorpack.pack(obj)
    _save_hashed(Path(run_dir), name, lambda f: torch.save(packed, f))


def _save_hashed(run_dir: Path, name: str, stream) -> None:
    """``save_checkpoint``'s steps for a file whose content ``stream(file)`` writes (hashed as it goes)."""
    files = _read_manifest(run_dir)
    writer: list[_HashingWriter] = []

    def write(f) -> None:
        writer.append(_HashingWriter(f))
        stream(writer[0])

    def add_pending() -> None:
        files[name] = {**files.get(name, {}), "pending": writer[0].entry()}
        _write_manifest(run_dir, files)

    _atomic(run_dir / name, write, before_replace=add_pending)
    files[name] = files[name]["pending"]
    _write_manifest(run_dir, files)


class CheckpointWriter:
    """A run's checkpoints, written while the run computes its next round (the simulator's runner).

    ``save`` takes a snapshot of the state at once — the next round may change the tensors in place and append to
    the metric rows — and a thread serializes it, hashes it, writes it, fsyncs it and swaps it in, keeping the
    manifest right at every moment, as ``save_checkpoint`` does. The snapshot is the state packed
    (``tensorpack.pack``): one copy of its tensors per dtype (on a GPU, one read back per dtype, not a blocking
    read per tensor inside ``torch.save``) and new containers, ≈ 0.5 ms of the run's thread for a tabular run's
    1.3 MB, where serializing it there cost 2.2 ms. Hashing, writing and fsync release the interpreter lock:
    they overlap the run's compute, on a GPU its next round's launches. One write in flight: ``save`` first waits
    for the previous one. A kill during a write leaves the previous round's checkpoint, which resumes to the same
    numbers (that round is computed again). ``wait`` waits for the last write and raises its error; the runner
    calls it before it writes anything else to the manifest, and on any exit.
    """

    def __init__(self, run_dir, name: str = CHECKPOINT):
        self.dir, self.name = Path(run_dir), name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, obj) -> None:
        self.wait()
        stream = functools.partial(torch.save, tensorpack.pack(obj))
        self._thread = threading.Thread(target=self._write, args=(stream,), name=f"checkpoint {self.dir.name}",
                                        daemon=True)
        self._thread.start()

    def _write(self, stream) -> None:
        try:
            _save_hashed(self.dir, self.name, stream)
        except BaseException as err:  # noqa: BLE001 — raised in the run's thread by wait()
            self._error = err

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def verify(run_dir, name: str) -> Path:
    """``run_dir/name`` after checking it against the manifest; a clear RunFileError if it does not match.

    A directory written by an older fedgca has no manifest: its files are
    read unverified (still safely).
    """
    run_dir = Path(run_dir)
    path = run_dir / name
    if not path.exists():
        raise RunFileError(f"{path}: missing")
    entry = _read_manifest(run_dir).get(name)
    if entry is None:
        return path
    size = path.stat().st_size
    accepted = [e for e in (entry, entry.get("pending")) if isinstance(e, dict) and "sha256" in e]
    if not any(size == e.get("bytes") for e in accepted):
        expected = entry.get("bytes")
        what = "truncated or replaced" if isinstance(expected, int) and size < expected else "modified"
        raise RunFileError(f"{path}: {what} since fedgca wrote it ({size} bytes, {MANIFEST} records {expected})")
    if sha256_of(path) not in {e["sha256"] for e in accepted}:
        raise RunFileError(f"{path}: modified since fedgca wrote it (SHA-256 differs from {MANIFEST})")
    return path


# ---------------------------------------------------------------------------- reading


def load_tensors(path: Path, *, expect_keys: tuple[str, ...] = ()):
    """``torch.load(weights_only=True)`` with every failure turned into one line naming the file.

    Refuses pickles that would build anything but tensors and plain
    containers (the payload is never executed); ``expect_keys`` checks the
    top level of a dict-shaped file so that a foreign file is named as such.
    A packed state (``tensorpack``: every checkpoint fedgca writes now) comes back unpacked; one written before
    packing, as it was.
    """
    path = Path(path)
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise RunFileError(f"{path}: missing") from None
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "weights_only" in str(err) or "Unsupported global" in str(err):
            raise RunFileError(f"{path}: refused — it holds objects other than tensors and plain containers "
                               "(a crafted or foreign file; nothing in it was run)") from None
        raise RunFileError(f"{path}: not a readable fedgca file ({first})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, AttributeError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RunFileError(f"{path}: truncated or corrupted ({first})") from None
    if tensorpack.is_packed(obj):
        try:
            obj = tensorpack.unpack(obj)
        except (ValueError, TypeError, RuntimeError) as err:
            raise RunFileError(f"{path}: truncated or corrupted ({err})") from None
    if expect_keys:
        if not isinstance(obj, dict) or any(k not in obj for k in expect_keys):
            raise RunFileError(f"{path}: not a fedgca file of this kind (expected a dict with "
                               f"{', '.join(expect_keys)})")
    return obj


def load_json(path: Path) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFileError(f"{path}: missing") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise RunFileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(doc, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    return doc
