"""Own data end to end (issue #31): one data path for presets and own files, formats, partitions,
dirty data, bad input, the Python API and sweeps — on the real files in shared/data."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedgca.cli.main import main
from fedgca.data import DataError, DataSource, Schema, infer_schema, load_dataset, registry
from fedgca.data.partition import natural_partition
from fedgca.experiments.executors import LocalPool
from fedgca.data.readers import table_from_frame
from fedgca.data.schema import OWN_CORR_THRESHOLD

FOUR = ("academic", "adult", "bank", "magic")


def _preset_as_own(name: str, data_dir: Path, tmp_path: Path) -> DataSource:
    """The preset's file given as own data, with its schema written to and read back from a JSON file."""
    path = tmp_path / f"{name}.json"
    registry.get(name).schema.save(path)
    schema = Schema.load(path)
    test = data_dir / name / schema.test_file if schema.test_file else None
    return DataSource(str(data_dir / name / registry.get(name).train_file), schema, name=name,
                      test_path=None if test is None else str(test))


def _same_arrays(a, b, names: bool = True) -> None:
    for k in ("train", "test_x", "test_y"):
        assert getattr(a, k).dtype == getattr(b, k).dtype
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    if names:
        assert a.feature_names == b.feature_names


@pytest.mark.parametrize("name", FOUR)
def test_preset_is_own_data_with_its_schema(name, data_dir, tmp_path):
    _same_arrays(load_dataset(name, data_dir), _preset_as_own(name, data_dir, tmp_path).load(100))


def test_credit_fixture_preset_is_own_data(tmp_path):
    from test_data_tabular import _write_credit

    (tmp_path / "credit").mkdir()
    _write_credit(tmp_path / "credit" / "creditcard.csv")
    _same_arrays(load_dataset("credit", tmp_path, download=False),
                 _preset_as_own("credit", tmp_path, tmp_path).load(100))


def _run(args: list[str]) -> int:
    return main(["run", "--threads", "1", *args])


def paper_protocol() -> list[str]:
    """The options own data defaults from the data (issue #40) set to the presets' values (RunConfig's defaults,
    SPEC §8): with them and the preset's C, K, ρ, own data runs exactly the preset."""
    from fedgca.config import RunConfig, option_name
    from fedgca.data.defaults import own_defaults

    fields, out = RunConfig.__dataclass_fields__, []
    for k in own_defaults(1000, None, "iid"):
        if k in ("clients", "k", "rho", "rounds"):
            continue
        default = fields[k].default
        if isinstance(default, bool):  # a flag: --name / --no-name
            out.append(option_name(k) if default else "--no-" + option_name(k)[2:])
        else:
            out += [option_name(k), str(default)]
    return out


@pytest.mark.parametrize("name", FOUR)
def test_preset_and_own_data_give_identical_metrics(name, data_dir, tmp_path):
    """R = 1 (a whole round: GCA's reconstruction, uploads, clustering and alignment), seed 100: `--dataset NAME`
    and the same file as `--data` with `fedgca schema show NAME`. One reconstruction and one alignment epoch on both
    sides (the paper's five change the training, not the data path under test); every other option of the paper's
    protocol is own data's flag for the preset's value."""
    from fedgca.config import DATASET_PRESETS

    assert main(["schema", "show", name, "--out", str(tmp_path / "s.json")]) == 0
    p = DATASET_PRESETS[name]
    common = ["--rounds", "1", "--seed", "100", "--recon-epochs", "1", "--align-epochs", "1"]
    assert _run(["--dataset", name, "--data-dir", str(data_dir), "--out", str(tmp_path / "a"), *common]) == 0
    own = ["--data", str(data_dir / name / registry.get(name).train_file), "--schema", str(tmp_path / "s.json"),
           "--clients", str(p["clients"]), "--k", str(p["k"]), "--rho", str(p["rho"]), *paper_protocol()]
    if registry.get(name).schema.test_file:
        own += ["--test-file", str(data_dir / name / registry.get(name).schema.test_file)]
    assert _run([*own, "--out", str(tmp_path / "b"), *common]) == 0  # common's epochs come last: they win
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    assert (tmp_path / "a" / "test_rows.csv").read_bytes() == (tmp_path / "b" / "test_rows.csv").read_bytes()


# --------------------------------------------------------------------------- research formats


@pytest.mark.parametrize("suffix", [".mat", ".npz"])
def test_odds_mat_and_adbench_npz_equal_the_csv_path(suffix, data_dir, tmp_path):
    from scipy.io import savemat

    schema = registry.get("magic").schema
    raw = pd.read_csv(data_dir / "magic" / "magic04.data", header=None, names=list(schema.csv.names))
    X = raw[schema.columns].to_numpy(dtype=np.float64)
    y = (raw["class"] == "h").to_numpy().astype(np.int64)
    path = tmp_path / f"magic{suffix}"
    if suffix == ".mat":
        savemat(path, {"X": X, "y": y.reshape(-1, 1)})
    else:
        np.savez(path, X=X, y=y)
    # an X/y file has own data's schema (no correlation filter): the CSV read with the same rule
    same_rule = dataclasses.replace(schema.with_test("balanced"), corr_threshold=OWN_CORR_THRESHOLD)
    csv_path = DataSource(str(data_dir / "magic" / "magic04.data"), same_rule, name="m")
    array_path = DataSource(str(path), name="m")
    for seed in (100, 200):
        a, b = csv_path.load(seed), array_path.load(seed)
        _same_arrays(a, b, names=False)  # X/y files name their columns x0, x1, ...
        assert [f"x{schema.columns.index(c)}" for c in a.feature_names] == b.feature_names


def test_array_files_without_x_or_y_are_refused(tmp_path):
    np.savez(tmp_path / "a.npz", features=np.zeros((3, 2)))
    with pytest.raises(DataError, match=r"a\.npz: no array X or y"):
        DataSource(str(tmp_path / "a.npz")).load()
    from scipy.io import savemat

    savemat(tmp_path / "b.mat", {"X": np.zeros((3, 2))})
    with pytest.raises(DataError, match=r"b\.mat: no array y"):
        DataSource(str(tmp_path / "b.mat")).load()


# --------------------------------------------------------------------------- split and partitions


def _bank_job(data_dir, tmp_path, **kw) -> DataSource:
    schema, _ = infer_schema(data_dir / "bank" / "bank-full.csv", label="y", normal=["no"], site="job", **kw)
    return DataSource(str(data_dir / "bank" / "bank-full.csv"), schema, name="bankjob")


def test_balanced_split_is_drawn_with_the_seed_and_recorded(data_dir, tmp_path):
    src = _bank_job(data_dir, tmp_path)
    a, b, a2 = src.load(100), src.load(200), src.load(100)
    assert a.info["n_anomalies"] == a.info["n_test_normals"] == 5289
    assert not np.array_equal(a.info["test_rows"], b.info["test_rows"])
    np.testing.assert_array_equal(a.info["test_rows"], a2.info["test_rows"])
    y = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")["y"].to_numpy()
    assert (y[a.info["test_rows"]] == "yes").sum() == 5289  # the recorded rows are the test set's
    assert len(a.train) + len(a.test_x) == len(y)


def test_natural_partition_one_client_per_site(data_dir, tmp_path):
    ds = _bank_job(data_dir, tmp_path).load(100)
    parts, names = natural_partition(ds.sites, ds.site_names, 50)
    assert names == ds.site_names and len(parts) == 12
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ds.train)))
    for p, j in zip(parts, range(12)):
        assert (ds.sites[p] == j).all()


def test_small_sites_error_drop_merge():
    sites, names = np.array([0] * 60 + [1] * 10 + [2] * 55 + [3] * 45), ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match=r"'b' \(10\), 'd' \(45\)"):
        natural_partition(sites, names, 50)
    parts, kept = natural_partition(sites, names, 50, "drop")
    assert kept == ["a", "c"] and [len(p) for p in parts] == [60, 55]
    parts, kept = natural_partition(sites, names, 50, "merge")
    assert kept == ["a", "c", "b+d"] and [len(p) for p in parts] == [60, 55, 55]


def test_directory_of_site_files_is_the_natural_layout(data_dir, tmp_path):
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")
    site_dir = tmp_path / "sites"
    site_dir.mkdir()
    for job in ("admin.", "technician", "services"):
        raw[raw["job"] == job].drop(columns=["job"]).to_csv(site_dir / f"{job.rstrip('.')}.csv", index=False, sep=";")
    schema, _ = infer_schema(site_dir / "admin.csv", label="y", normal="no")
    ds = DataSource(str(site_dir), schema, name="sites").load(100)
    assert ds.site_names == ["admin", "services", "technician"]
    assert len(ds.train) + len(ds.test_x) == int(raw["job"].isin(["admin.", "technician", "services"]).sum())
    # the directory's files are one rule (data.readers.site_files) for every reader: a hidden file the loader
    # skips (an editor's swap file, .DS_Store) changes neither the data nor its content digest, which names runs
    digest = DataSource(str(site_dir), schema, name="sites").digest()
    (site_dir / ".admin.csv.swp").write_text("not a site")
    assert DataSource(str(site_dir), schema, name="sites").digest() == digest


# --------------------------------------------------------------------------- dirty data


def _dirty_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "const": 1.0,
                       "colour": rng.choice(["red", "blue", "green"], size=n),
                       "id": [f"row{i}" for i in range(n)], "label": np.where(np.arange(n) % 8 == 0, "bad", "ok")})
    df.loc[[3, 7, 11], "a"] = np.nan
    df.loc[[5], "colour"] = None
    return df


def test_dirty_data_rules():
    df = _dirty_frame()
    schema, notes = infer_schema(df, label="label", normal="ok", max_categories=100)
    assert [f.name for f in schema.features] == ["a", "b", "const", "colour"]  # 'id': 400 distinct texts
    assert any("'id'" in n for n in notes)
    assert schema.categories["colour"] == ["MISSING", "blue", "green", "red"]
    ds = DataSource(schema=schema, frame=df, name="dirty").load(100)
    pre = ds.preprocessor
    train_rows = np.setdiff1d(np.arange(len(df)), ds.info["test_rows"])
    a = df["a"].to_numpy()[train_rows]
    assert pre.fill_["a"] == pytest.approx(np.nanmean(a), rel=1e-12)  # impute: the training normals' mean
    assert np.isfinite(ds.train).all() and ds.info["imputed_training_cells"]["a"] >= 1
    j = pre.kept_columns_.index("const")
    assert pre.std_[j] == 1.0 and (ds.train[:, j] == 0).all()  # a constant column: std 1, always 0
    # scoring applies the same fitted rules: an empty cell and an unseen category are fine
    new = pd.DataFrame({"a": [np.nan], "b": [0.0], "const": [1.0], "colour": ["purple"], "id": ["x"]})
    t = table_from_frame(new, schema, require_label=False)
    x = pre.transform(t.features)
    assert np.isfinite(x).all()
    assert x[0, pre.kept_columns_.index("a")] == pytest.approx(0.0, abs=1e-6)  # the mean, standardised
    assert x[0, pre.kept_columns_.index("colour")] == pytest.approx(
        (4 - pre.mean_[pre.kept_columns_.index("colour")]) / pre.std_[pre.kept_columns_.index("colour")])
    json.dumps(pre.to_dict())  # a detector can store it


def test_a_column_of_numbers_and_words_is_categorical_and_the_note_counts_its_cells():
    """Numbers are parsed once per distinct value; the note still counts cells, and names the first word."""
    df = pd.DataFrame({"a": ["1", "2", "x", " 3", "", None, "y", "x"], "b": ["1.5", "2", "3", "4", "5", "6", "7", "8e0"],
                       "label": ["ok"] * 7 + ["bad"]})
    schema, notes = infer_schema(df, label="label", normal="ok")
    assert schema.categories["a"] == ["1", "2", "3", "MISSING", "x", "y"]
    assert [f.type for f in schema.features] == ["categorical", "numeric"]
    assert "'a' is categorical: 3 of its cells are not numbers (e.g. 'x')" in notes


def test_a_file_loaded_again_in_one_process_is_the_same_dataset_in_a_copy_of_its_own(tmp_path, data_dir):
    """Loads of a file are kept per process (``data.source``): a second load equals the first, is a copy the caller
    may change, and a rewritten file is read again."""
    lines = (data_dir / "bank" / "bank-full.csv").read_text().splitlines(keepends=True)
    path = tmp_path / "bank.csv"
    path.write_text("".join(lines[:3001]))
    schema, _ = infer_schema(path, label="y", normal="no")
    src = DataSource(str(path), schema, name="bank-head")
    first, again = src.load(1), src.load(1)
    assert first.train is not again.train and np.array_equal(first.train, again.train)
    assert np.array_equal(first.test_x, again.test_x) and first.info.keys() == again.info.keys()
    for k, v in first.info.items():
        assert np.array_equal(v, again.info[k]) if isinstance(v, np.ndarray) else v == again.info[k], k
    first.train[:] = 0
    first.info["changed"] = True
    third = src.load(1)
    assert np.array_equal(third.train, again.train) and "changed" not in third.info
    assert not np.array_equal(src.load(2).test_x, third.test_x)  # another seed, another split
    path.write_text("".join(lines[:2001]))
    assert len(src.load(1).train) < len(third.train)


# --------------------------------------------------------------------------- bad input: one line, exit 2, nothing written


def _bad_inputs(tmp_path: Path, data_dir: Path) -> dict[str, tuple[list[str], str]]:
    bank = data_dir / "bank" / "bank-full.csv"
    raw = pd.read_csv(bank, sep=";")
    good = tmp_path / "good.json"
    _bank_job(data_dir, tmp_path).schema.save(good)
    d = json.loads(good.read_text())

    def schema_with(**changes) -> str:
        p = tmp_path / f"s{len(list(tmp_path.glob('s*.json')))}.json"
        p.write_text(json.dumps({**d, **changes}))
        return str(p)

    def csv_with(name: str, frame: pd.DataFrame) -> str:
        frame.to_csv(tmp_path / name, sep=";", index=False)
        return str(tmp_path / name)

    small = raw.head(3000).copy()
    inf = small.copy()
    inf["balance"] = inf["balance"].astype(float)
    inf.loc[10, "balance"] = np.inf
    text = small.copy()
    text["balance"] = text["balance"].astype(object)
    text.loc[[10, 12], "balance"] = "n/k"
    one_site = small.assign(job="admin.")
    tiny = small  # its first 3,000 rows hold few housemaids, students and unknowns
    (tmp_path / "empty.csv").write_text("")
    np.savez(tmp_path / "noxy.npz", data=np.zeros((4, 2)))
    test_normals = csv_with("test_normals.csv", raw[raw["y"] == "no"].head(50))
    scored = csv_with("scored.csv", raw.drop(columns=["balance", "y"]).head(5))
    run = ["--rounds", "1", "--recon-epochs", "1", "--align-epochs", "0", "--partition", "natural"]
    return {
        "missing label column": (["--data", str(bank), "--schema", schema_with(label={"column": "answer",
                                  "normal": ["no"]}), *run], "missing label column 'answer'"),
        "label values not present": (["schema-infer", str(bank), "--label", "y", "--normal", "nope"],
                                     "column 'y' has no value 'nope'"),
        "no normal rows": (["--data", str(bank), "--schema", schema_with(label={"column": "y", "normal": ["maybe"],
                            "anomaly": ["yes", "no"]}), *run], "no normal rows"),
        "no anomalies in the test set": (["--data", str(bank), "--schema", str(good), "--test-file", test_normals,
                                          *run], "test_normals.csv: no anomalies"),
        "site smaller than a batch": (["--data", csv_with("tiny.csv", tiny), "--schema", str(good), *run],
                                      "site(s) 'housemaid' (27), 'student' (34), 'unknown' (10) have fewer training "
                                      "normals than one batch (B = 50)"),
        "one site, federated method": (["--data", csv_with("one.csv", one_site), "--schema", str(good), *run],
                                       "one client (one site)"),
        "inf in a column": (["--data", csv_with("inf.csv", inf), "--schema", str(good), *run],
                            "column 'balance': infinite value"),
        "text in a numeric column": (["--data", csv_with("text.csv", text), "--schema", str(good), *run],
                                     "line 12: column 'balance': text in a numeric column ('n/k'; 2 rows in all)"),
        "empty file": (["--data", str(tmp_path / "empty.csv"), "--schema", str(good), *run], "empty.csv: file is empty"),
        "npz without X/y": (["--data", str(tmp_path / "noxy.npz"), "--rounds", "1"], "noxy.npz: no array X or y"),
        "schema does not match the file": (["--data", str(data_dir / "magic" / "magic04.data"), "--schema", str(good),
                                            *run], "the schema does not match the file"),
        "scored columns do not match the detector": (["score", "--run", str(tmp_path / "finished"), "--client", "0",
                                                      "--input", scored], "scored.csv: missing column(s) 'balance'"),
    }


def test_bad_input_is_one_line_exit_2_and_writes_nothing(data_dir, tmp_path, capsys):
    cases = _bad_inputs(tmp_path, data_dir)
    # a finished own-data run to score against
    good = str(tmp_path / "good.json")
    assert _run(["--data", str(data_dir / "bank" / "bank-full.csv"), "--schema", good, "--rounds", "1",
                 "--recon-epochs", "1", "--align-epochs", "0", "--out", str(tmp_path / "finished")]) == 0
    capsys.readouterr()
    for what, (args, fragment) in cases.items():
        out = tmp_path / "out" / what.replace(" ", "_").replace("/", "_")
        if args[0] == "score":
            argv = args
        elif args[0] == "schema-infer":
            argv = ["schema", "infer", *args[1:], "--out", str(out)]
        else:
            argv = ["run", "--threads", "1", *args, "--out", str(out)]
        assert main(argv) == 2, what
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("fedgca: error: "), (what, err)
        assert fragment in err, (what, err)
        assert not out.exists(), what


# --------------------------------------------------------------------------- Python API, compare, sweep, score


def test_python_api_on_a_dataframe(data_dir, tmp_path):
    import fedgca

    df = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")
    data = fedgca.load_data(df, label="y", normal="no", site="job", name="bankjob")
    r = fedgca.run(data, method="gca", partition="natural", rounds=1, recon_epochs=1, align_epochs=1,
                   out=tmp_path / "r")
    assert r.summary["clients"] == 12 and r.summary["data"]["defaulted"] == {
        "clients": 12, "k": 10, "rho": 0.1, "val_fraction": 0.2, "threshold": "val-quantile", "batch_size": 50,
        "local_epochs": 2, "eval_recon_epochs": False}  # natural partition: B = SPEC's 50; ~100 steps a round: 2 epochs
    assert r.summary["data"]["client_sites"][3] == "housemaid"
    assert list(r.metrics["phase"])[-1] == "round"
    rows = df.drop(columns=["y"]).iloc[:20]
    det = r.detectors[3]
    scores = det.decision_function(rows)
    np.testing.assert_array_equal(det.predict(rows), (scores > det.threshold_).astype(int))
    # the same rows as a file, scored by the CLI, give the same scores
    rows.to_csv(tmp_path / "new.csv", index=False)  # a schema inferred from a DataFrame reads ','-separated files
    assert main(["score", "--run", str(tmp_path / "r"), "--client", "3", "--input", str(tmp_path / "new.csv"),
                 "--output", str(tmp_path / "scores.csv")]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "scores.csv")["score"], scores, rtol=1e-5)


def test_compare_and_sweep_on_own_data(data_dir, tmp_path):
    import fedgca
    from fedgca.experiments import sweep

    schema = tmp_path / "bankjob.json"
    _bank_job(data_dir, tmp_path).schema.save(schema)
    table = fedgca.compare(fedgca.load_data(data_dir / "bank" / "bank-full.csv", schema, name="bankjob"),
                           methods=["single", "gca"], seeds=[100], partition="natural", rounds=1, recon_epochs=1,
                           align_epochs=1, local_epochs=1, out=tmp_path / "cmp", workers=0)
    assert list(table["method"]) == ["single", "gca"] and (table["seeds"] == 1).all()
    toml = tmp_path / "s.toml"
    toml.write_text(f'data = "{data_dir / "bank" / "bank-full.csv"}"\nschema = "{schema}"\ndata_name = "bankjob"\n'
                    '[base]\nrounds = 1\nrecon_epochs = 1\nalign_epochs = 1\nlocal_epochs = 1\npartition = "natural"\n'
                    '[[grid]]\nmethod = ["single", "gca"]\nseed = 100\n')
    spec = sweep.load_spec(toml)
    assert [c.clients for c in spec.configs] == [12, 12] and spec.configs[0].data_digest
    # the sweep and compare name the same runs: nothing is run again
    res = sweep.run_sweep(spec.configs, tmp_path / "cmp", executor=LocalPool(0), sources=spec.sources)
    assert res["skipped"] == 2 and res["finished"] == 0


def test_blocked_column_statistics_equal_numpy_bit_for_bit():
    """The standardisation's mean and std come from blocks of rows (no full-size temporary) and must be
    numpy's X.mean(axis=0) / X.std(axis=0) exactly — the presets' arrays depend on it."""
    from fedgca.data.encoding import column_mean_std, moments

    rng = np.random.default_rng(3)
    X = rng.normal(size=(200_003, 7)) * rng.exponential(size=7) * 1e3 + 7.0
    mean, std = column_mean_std(X, block=4096)
    np.testing.assert_array_equal(mean, X.mean(axis=0))
    np.testing.assert_array_equal(std, X.std(axis=0))
    n, m, m2 = moments(X, block=4096)
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(m2, Xc.T @ Xc, rtol=1e-10)


def test_streamed_large_csv_equals_the_frame_path(data_dir, tmp_path, monkeypatch):
    """Large plain CSVs are streamed into one matrix (data.table.read_training_file); forced on bank, the arrays
    are the frame path's bit for bit, and a bad cell falls back to the frame path and its one-line error."""
    import fedgca.data.readers as table

    src = _bank_job(data_dir, tmp_path)
    frame_path = src.load(100)
    monkeypatch.setattr(table, "STREAM_MIN_BYTES", 0)
    assert table.read_training_file(src.path, src.schema).matrix is not None
    _same_arrays(frame_path, src.load(100))
    np.testing.assert_array_equal(frame_path.sites, src.load(100).sites)
    _same_arrays(load_dataset("bank", data_dir), _preset_as_own("bank", data_dir, tmp_path).load(100))
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";").head(2000)
    raw["balance"] = raw["balance"].astype(object)
    raw.loc[7, "balance"] = "n/k"
    raw.to_csv(tmp_path / "bad.csv", sep=";", index=False)
    with pytest.raises(DataError, match=r"bad\.csv: line 9: column 'balance': text in a numeric column"):
        DataSource(str(tmp_path / "bad.csv"), src.schema).load(100)


def test_parquet_and_arrays_take_the_same_path(data_dir, tmp_path):
    """A Parquet copy of a CSV, and (X, y) arrays from Python, give the CSV path's arrays."""
    import fedgca

    src = _bank_job(data_dir, tmp_path)
    raw = pd.read_csv(data_dir / "bank" / "bank-full.csv", sep=";")
    raw.to_parquet(tmp_path / "bank.parquet")
    _same_arrays(src.load(100), DataSource(str(tmp_path / "bank.parquet"), src.schema, name="bankjob").load(100))
    schema = registry.get("magic").schema
    m = pd.read_csv(data_dir / "magic" / "magic04.data", header=None, names=list(schema.csv.names))
    X, y = m[schema.columns].to_numpy(), (m["class"] == "h").to_numpy().astype(int)
    from_arrays = fedgca.load_data((X, y)).load(100)
    same_rule = dataclasses.replace(schema.with_test("balanced"), corr_threshold=OWN_CORR_THRESHOLD)
    from_csv = DataSource(str(data_dir / "magic" / "magic04.data"), same_rule).load(100)
    _same_arrays(from_csv, from_arrays, names=False)


def test_attack_on_an_own_data_run(data_dir, tmp_path, capsys):
    """`fedgca attack` re-reads the run's own data (checked by its content digest)."""
    schema = tmp_path / "s.json"
    _bank_job(data_dir, tmp_path).schema.save(schema)
    data = ["--data", str(data_dir / "bank" / "bank-full.csv"), "--schema", str(schema)]
    assert _run([*data, "--method", "fedavg", "--rounds", "1", "--local-epochs", "1", "--clients", "3",
                 "--out", str(tmp_path / "r")]) == 0
    from fedgca.attacks.run import attack_run
    from fedgca.data.source import open_source

    rec = attack_run(tmp_path / "r", source=open_source(data[1], schema, name="bank-full"),
                     inversion_options={"max_steps": 5})
    assert rec["dataset"] == "bank-full" and rec["ntmse"] > 0
    lines = (data_dir / "bank" / "bank-full.csv").read_text().splitlines(keepends=True)
    (tmp_path / "other.csv").write_text("".join(lines[:3001]))  # another file with the same schema
    capsys.readouterr()
    assert main(["attack", "--run", str(tmp_path / "r"), "--data", str(tmp_path / "other.csv"),
                 "--schema", str(schema)]) == 2
    assert "not the data this run was made with" in capsys.readouterr().err


def test_detectors_of_array_data_score_raw_arrays_and_x_only_files(tmp_path):
    """A run on (X, y) arrays: its detector scores raw X (transform) and an .npz holding X alone."""
    import fedgca

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(600, 4)), rng.normal(3.0, 1.0, size=(60, 4))])
    y = np.r_[np.zeros(600, int), np.ones(60, int)]
    r = fedgca.run(fedgca.load_data((X, y)), method="single", clients=2, rounds=1, local_epochs=1,
                   out=tmp_path / "r")
    det = r.detectors[0]
    scores = det.decision_function(det.transform(X[:5]))
    np.savez(tmp_path / "new.npz", X=X[:5])
    assert main(["score", "--run", str(tmp_path / "r"), "--client", "0", "--input", str(tmp_path / "new.npz"),
                 "--output", str(tmp_path / "s.csv")]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "s.csv")["score"], scores, rtol=1e-5)
    with pytest.raises(ValueError, match="reads 4 raw feature columns"):
        det.transform(X[:5, :3])


def test_defaulted_options_are_said_once_per_process(caplog):
    """`compare` and `sweep` bind the same own data once per run; what was defaulted is logged once."""
    import logging

    import fedgca
    from fedgca import binding

    rng = np.random.default_rng(0)
    data = fedgca.load_data((rng.normal(size=(400, 4)).astype(np.float32), (rng.random(400) < 0.1).astype(int)),
                            name="said-once")
    with caplog.at_level(logging.INFO, logger="fedgca"):
        bound = {(cfg.clients, cfg.k, cfg.rho) for cfg, _ in
                 (binding.bind({"method": "gca", "seed": seed}, data) for seed in (1, 2, 3))}
    assert len(bound) == 1  # every run is still defaulted alike
    said = [r.message for r in caplog.records if "has no preset" in r.message]
    assert len(said) == 1 and said[0].startswith("said-once has no preset: --clients "), said
