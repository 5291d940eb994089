"""A sweep directory's ledger: an append-only, locked, fsync'd JSON-lines log of started / finished / failed runs,
and the exclusive lock a run holds on its directory while it runs."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Ledger:
    """Append-only JSON-lines log; every append is locked, flushed and fsync'd."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def append(self, event: str, key: str, *, once: bool = False, **fields) -> bool:
        """Append one event; with ``once``, only if ``key`` has no such event yet (checked under the lock,
        so that two sweeps sharing a directory never record a run twice). Returns whether it wrote."""
        line = json.dumps({"event": event, "key": key, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "pid": os.getpid(), **fields}, sort_keys=False) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            lock(fd)
            if once and any(e.get("event") == event and e.get("key") == key for e in self.events()):
                return False
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line (crash mid-write): end it
                line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
            return True
        finally:
            os.close(fd)  # closing releases the lock

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line from a crash mid-write: ignore it
                continue
        return out

    def finished_keys(self) -> set[str]:
        return {e["key"] for e in self.events() if e.get("event") == "finished"}


def lock(fd: int) -> None:
    """An exclusive lock on ``fd`` until it is closed (POSIX flock)."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
    except ImportError:  # not POSIX: appends of one short line are still atomic in practice
        pass
