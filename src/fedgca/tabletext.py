"""Plain-text table layouts — Markdown, CSV, LaTeX tabular — shared by every table fedgca prints or writes."""
from __future__ import annotations

import csv
import io


def markdown(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body]) + "\n"


def csv_text(head: list[str], body: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(head)
    w.writerows(body)
    return buf.getvalue()


def dicts_csv(rows: list[dict], fields: list[str]) -> str:
    """CSV of dict rows with the given columns (keys not listed are an error, missing ones empty)."""
    return csv_text(list(fields), [[r.get(f) for f in fields] for r in rows])
