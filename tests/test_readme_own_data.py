"""README's "Your own data" section runs as written: its shell commands and its Python example."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(marker: str, lang: str) -> str:
    text = README.read_text()
    after = text.split(f"<!-- {marker}", 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", after, re.S).group(1)


def _rows_of_every_job(data_dir: Path, out: Path, per_job: int = 200) -> Path:
    """bank-full.csv's header and ``per_job`` of each job's lines, drawn with seed 0 and kept in file order, as they
    are written there: the same columns and the same 12 sites (each with its anomalies) at a fraction of the time.
    Imports and each run's fixed work dominate these runs; the rows only need to be the README's kind."""
    import pandas as pd

    path = data_dir / "bank" / "bank-full.csv"
    lines = path.read_text().splitlines(keepends=True)
    jobs = pd.read_csv(path, sep=";", usecols=["job"])
    keep = sorted(jobs.groupby("job").sample(per_job, random_state=0).index)
    out.write_text(lines[0] + "".join(lines[1 + i] for i in keep))
    return out


def test_readme_own_data_commands(tmp_path, data_dir, monkeypatch, capsys):
    """The block as written, on 200 rows of each job of bank-full.csv (its path is the one thing replaced)."""
    from fedgca.cli.main import main

    monkeypatch.chdir(tmp_path)
    bank = _rows_of_every_job(data_dir, tmp_path / "bank-full.csv")
    for line in _block("own-data-commands", "bash").splitlines():
        line = line.strip().replace("../shared/data/bank/bank-full.csv", str(bank))
        if not line or line.startswith("#"):
            continue
        if line.startswith(".venv/bin/fedgca "):
            assert main(shlex.split(line)[1:]) == 0, line
        else:
            subprocess.run(line, shell=True, check=True)
    scores = (tmp_path / "scores.csv").read_text().splitlines()
    assert scores[0] == "row,score,anomaly" and len(scores) == 101
    assert "gca" in (tmp_path / "results" / "bank-job" / "comparison.md").read_text().lower()


@pytest.fixture(scope="module")
def readme_python(tmp_path_factory, data_dir):
    """README's Python block as example.py, reading 200 rows of each job of bank-full.csv
    (``_rows_of_every_job``)."""
    root = tmp_path_factory.mktemp("readme_python")
    _rows_of_every_job(data_dir, root / "bank.csv")
    code = _block("own-data-python", "python").replace("../shared/data/bank/bank-full.csv", str(root / "bank.csv"))
    assert "fedgca.compare(" in code and "workers=2)" in code  # the runs go to worker processes
    (root / "example.py").write_text(code)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_readme_own_data_python_runs_in_a_fresh_interpreter(readme_python, how):
    """As a user runs it: `python example.py` or `python - < example.py`, no `if __name__ == "__main__":` guard,
    its compare(..., workers=2) in worker processes. Issue #42 item 6: with worker processes, every run used to die
    ("worker process died"): spawned workers re-ran the script's own compare call."""
    import sys

    script = readme_python / "example.py"
    cmd = [sys.executable, "-"] if how == "stdin" else [sys.executable, script.name]
    env = {**os.environ, "TMPDIR": str(readme_python)}  # the API's default run directories go there
    res = subprocess.run(cmd, cwd=readme_python, env=env, capture_output=True, text=True, timeout=400,
                         stdin=script.open() if how == "stdin" else subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "RunResult(gca on bank-job" in res.stdout and "final_accuracy" in res.stdout
