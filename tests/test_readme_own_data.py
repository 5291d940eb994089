"""README's "Your own data" section runs as written: its shell commands and its Python example."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(marker: str, lang: str) -> str:
    text = README.read_text()
    after = text.split(f"<!-- {marker}", 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", after, re.S).group(1)


def test_readme_own_data_commands(tmp_path, data_dir, monkeypatch, capsys):
    from fedgca.cli.main import main

    monkeypatch.chdir(tmp_path)
    for line in _block("own-data-commands", "bash").splitlines():
        line = line.strip().replace("../shared/data", str(data_dir))
        if not line or line.startswith("#"):
            continue
        if line.startswith(".venv/bin/fedgca "):
            assert main(shlex.split(line)[1:]) == 0, line
        else:
            subprocess.run(line, shell=True, check=True)
    scores = (tmp_path / "scores.csv").read_text().splitlines()
    assert scores[0] == "row,score,anomaly" and len(scores) == 101
    assert "gca" in (tmp_path / "results" / "bank-job" / "comparison.md").read_text().lower()


def test_readme_own_data_python(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the API's default run directories go here
    code = _block("own-data-python", "python").replace("../shared/data", str(data_dir))
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "RunResult(gca on bank-job" in out and "final_accuracy" in out
    assert any(p.startswith("fedgca-bank-job-gca-") for p in os.listdir(tmp_path))
