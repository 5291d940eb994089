"""How a fedgca cell is judged against the paper's: the tolerance, the verdict, the cell's text.

One home for the scorecard's IID table and its other tables (``scorecard``, ``scorecard_tables``).
"""
from __future__ import annotations

from fedgca.config import SEEDS  # the paper's seeds

TOLERANCE_PP = 1.0
TOLERANCE_PP_BY_DATASET = {"magic": 1.5}  # magic's seeds spread more
ROUNDS = 100


def tolerance(dataset: str) -> float:
    return TOLERANCE_PP_BY_DATASET.get(dataset, TOLERANCE_PP)


def verdict(dataset: str, delta: float | None, rounds: int = ROUNDS) -> str:
    """"within" / "outside" the tolerance, "not run", or "R = N only" for a cell not run at R = 100."""
    if delta is None:
        return "not run"
    if rounds != ROUNDS:
        return f"R = {rounds} only"
    return "within" if abs(delta) <= tolerance(dataset) else "outside"


def fmt_cell(mean, std, n=None) -> str:
    """"64.92 ± 0.01", "64.92" for one seed, "(n=2)" when fewer seeds than the paper's, "—" for none."""
    if mean is None:
        return "—"
    s = f"{mean:.2f}" if n == 1 else f"{mean:.2f} ± {std:.2f}"  # one seed: no spread to show
    return s + (f" (n={n})" if n is not None and n != len(SEEDS) else "")


def cell_note(seeds: int, no_data: bool, pending: tuple[int, list[str]] | None) -> str:
    """Why a cell is not run, or what it still waits for: "no data files" (a cell with no run, whose dataset's files
    are not in the data directory) or "N runs pending in FOLDER" (an unfinished sweep's report lists them)."""
    if pending:
        n, where = pending
        return f"{n} run{'s' if n != 1 else ''} pending in {', '.join(where)}"
    return "no data files" if no_data and not seeds else ""


def with_note(verdict: str, text: str | None) -> str:
    """A verdict as the scorecard shows it: "not run (no data files)", "within (2 runs pending in backends)"."""
    return f"{verdict} ({text})" if text else verdict
