"""The Flower server's files: messages.jsonl, rounds.jsonl and the JSON/CSV files, written as they happen."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedgca import rundir


class Recorder:
    """The server's files. Without an out-dir it only keeps things in memory.

    Nothing touches the disk until :meth:`open` (the ServerApp calls it once the clients are registered): a run
    refused at registration leaves no directory. What happened before is written then, in order."""

    def __init__(self, out_dir: str):
        self.out = Path(out_dir) if out_dir else None
        self.messages: list[dict] = []
        self.rounds: list[dict] = []
        self._held: dict[str, str] = {}  # files written before open(), by name
        self._metrics = None

    @property
    def opened(self) -> bool:
        return self._metrics is not None

    def open(self, rounds: list[dict] | None = None) -> None:
        """Start writing. ``rounds``: a resumed run's rounds log from its checkpoint — rounds.jsonl is written from it
        again and messages.jsonl is appended to (the log of everything before the resume stays)."""
        if self.out is None or self.opened:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        if rounds is not None:
            self.rounds = list(rounds) + self.rounds
            with (self.out / "messages.jsonl").open("a") as f:
                f.write("".join(_line(e) for e in [{"resumed_after_round": len(rounds)}, *self.messages]))
        else:
            (self.out / "messages.jsonl").write_text("".join(_line(e) for e in self.messages))
        (self.out / "rounds.jsonl").write_text("".join(_line(e) for e in self.rounds))
        self._metrics = rundir.MetricsWriter(self.out)
        for name, text in self._held.items():
            self.write_text(name, text)
        self._held.clear()

    def _append(self, name: str, entry: dict) -> None:
        if self.opened:
            with (self.out / name).open("a") as f:
                f.write(_line(entry))

    def message(self, entry: dict) -> None:
        self.messages.append(entry)
        self._append("messages.jsonl", entry)

    def round(self, entry: dict) -> None:
        self.rounds.append(entry)
        self._append("rounds.jsonl", entry)

    def write(self, name: str, value) -> None:
        self.write_text(name, json.dumps(value, indent=2, default=_jsonable))

    def write_text(self, name: str, text: str) -> None:
        if self.out is None:
            return
        if not self.opened:
            self._held[name] = text
            return
        rundir.atomic_write_text(self.out / name, text, durable=False)

    def metrics_csv(self, rows: list[dict]) -> None:
        if self._metrics is not None:
            self._metrics.write(rows)


def _line(entry: dict) -> str:
    return json.dumps(entry, default=_jsonable) + "\n"


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
