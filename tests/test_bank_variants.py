"""The bank investigation's data variants (issue #33 item 4, scripts/bank_variants.py) on the real file.

What the write-up rests on: the file route reproduces ``--dataset bank`` bit for bit (so a variant
changes the rows, nothing else), and the temporal variant gives the paper's U and P.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

import fedgca
from fedgca.data.presets import load_tabular
from fedgca.models import build_model, param_count

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bank_variants.py"


def _script():
    spec = importlib.util.spec_from_file_location("bank_variants", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spec_variant_is_the_preset_and_the_temporal_split_gives_the_papers_u_and_p(data_dir, tmp_path, capsys):
    mod = _script()
    mod.main(["--data-dir", str(data_dir), "--out", str(tmp_path), "--only", "spec", "temporal-500"])
    assert "temporal-500" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec", "temporal-500"]

    def load(variant):
        d = tmp_path / variant
        return fedgca.load_data(d / "train.csv", schema=d / "schema.json").load(100)

    spec, preset = load("spec"), load_tabular("bank", data_dir, download=False, seed=100)
    for name in ("train", "test_x", "test_y"):
        assert np.array_equal(getattr(spec, name), getattr(preset, name)), name
    assert mod.upload_total(len(spec.train)) == 3_460  # SPEC §4's bank figure

    temporal = load("temporal-500")
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";", dtype=str)
    tail = raw.iloc[-500:]
    assert len(temporal.test_y) == 500
    assert int(temporal.test_y.sum()) == int((tail.y == "yes").sum()) == 236
    assert len(temporal.train) == int((raw.iloc[:-500].y == "no").sum()) == 39_658
    assert mod.upload_total(len(temporal.train)) == 3_960  # the paper's communication table
    assert temporal.input_shape == (15,)
    assert param_count(build_model(temporal.input_shape)) == 43_167  # the paper's P for bank
