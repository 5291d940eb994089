"""Per-site files for the own-data Flower tests: bank's rows of three jobs, one file per job (the job column left
out), and a per-site schema — the layout a practitioner deploys (each SuperNode reads its site's file)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedgca.data import infer_schema

JOBS = ("admin.", "services", "technician")


def write_sites(root: Path, data_dir: Path, rows: int) -> Path:
    """``root/sites``: one file per job of JOBS, bank's first ``rows`` rows of that job, the job column left out."""
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")
    site_dir = root / "sites"
    site_dir.mkdir()
    for job in JOBS:
        raw[raw["job"] == job].drop(columns=["job"]).head(rows).to_csv(site_dir / f"{job.rstrip('.')}.csv",
                                                                         sep=";", index=False)
    return site_dir


def site_files(root: Path, data_dir: Path, rows: int = 2000) -> tuple[Path, Path]:
    """The three sites' files under ``root`` and their per-site schema (inferred from one site, saved as JSON)."""
    site_dir = write_sites(root, data_dir, rows)
    schema, _ = infer_schema(site_dir / "admin.csv", label="y", normal="no")
    schema.with_test("per-site").save(root / "schema.json")
    return site_dir, root / "schema.json"
