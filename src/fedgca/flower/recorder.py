"""The Flower server's files: messages.jsonl, rounds.jsonl and the JSON/CSV files, written as they happen."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedgca import rundir


class Recorder:
    """The server's files. Without an out-dir it only keeps things in memory."""

    def __init__(self, out_dir: str):
        self.out = Path(out_dir) if out_dir else None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            for name in ("messages.jsonl", "rounds.jsonl"):
                (self.out / name).write_text("")
        self.messages: list[dict] = []
        self.rounds: list[dict] = []
        self._metrics = rundir.MetricsWriter(self.out) if self.out is not None else None

    def _append(self, name: str, entry: dict) -> None:
        if self.out is not None:
            with (self.out / name).open("a") as f:
                f.write(json.dumps(entry, default=_jsonable) + "\n")

    def message(self, entry: dict) -> None:
        self.messages.append(entry)
        self._append("messages.jsonl", entry)

    def round(self, entry: dict) -> None:
        self.rounds.append(entry)
        self._append("rounds.jsonl", entry)

    def write(self, name: str, value) -> None:
        if self.out is not None:
            rundir.atomic_write_text(self.out / name, json.dumps(value, indent=2, default=_jsonable), durable=False)

    def metrics_csv(self, rows: list[dict]) -> None:
        if self._metrics is not None:
            self._metrics.write(rows)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
