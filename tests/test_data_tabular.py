"""Tabular datasets: SPEC §4 invariants on the real files, readers, preprocessing, paths."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedgca.data import DataError, load_dataset, registry, resolve_data_dir
from fedgca.data.download import RemoteFile, ensure_files
from fedgca.data.encoding import TabularPreprocessor
from fedgca.data.presets import load_tabular, read_raw

# SPEC §4: input widths and the training sizes they imply.
EXPECTED = {
    "academic": dict(width=22, n_train=788, n_test=2 * 1421, n_anom=1421),
    "adult": dict(width=14, n_train=24_720, n_test=16_281, n_anom=3_846),
    "bank": dict(width=15, n_train=34_633, n_test=2 * 5_289, n_anom=5_289),
    "magic": dict(width=5, n_train=5_644, n_test=2 * 6_688, n_anom=6_688),
}

_cache: dict[str, object] = {}


def _load(name: str, data_dir: Path):
    if name not in _cache:
        _cache[name] = load_dataset(name, data_dir, download=False)
    return _cache[name]


# --------------------------------------------------------------------------- real files


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_dataset_invariants(data_dir, name):
    ds = _load(name, data_dir)
    exp = EXPECTED[name]
    assert ds.kind == "tabular"
    assert ds.input_shape == (exp["width"],)
    assert ds.train.shape == (exp["n_train"], exp["width"]) and ds.train.dtype == np.float32
    assert ds.test_x.shape == (exp["n_test"], exp["width"]) and ds.test_x.dtype == np.float32
    assert int(ds.test_y.sum()) == exp["n_anom"] and ds.test_y.dtype == np.int64
    assert ds.info["n_train"] == exp["n_train"] and ds.info["n_anomalies"] == exp["n_anom"]
    assert len(ds.feature_names) == exp["width"]
    # Standardised on the training normals.
    np.testing.assert_allclose(ds.train.mean(axis=0, dtype=np.float64), 0.0, atol=1e-5)
    np.testing.assert_allclose(ds.train.std(axis=0, dtype=np.float64), 1.0, atol=1e-4)


def test_bank_drops_poutcome(data_dir):
    assert _load("bank", data_dir).preprocessor.dropped_columns_ == ["poutcome"]


def test_academic_split_and_header_quirks(data_dir):
    X, y = read_raw("academic", data_dir / "academic" / "data.csv")
    assert X.shape == (4424, 36)
    assert "Daytime/evening attendance" in X.columns  # trailing tab stripped
    assert y.value_counts().to_dict() == {"Graduate": 2209, "Dropout": 1421, "Enrolled": 794}
    # Balanced tail: test normals are the LAST 1421 Graduate rows of the file.
    ds = _load("academic", data_dir)
    assert ds.info["n_test_normals"] == 1421


def test_adult_test_quirks(data_dir):
    X, y = read_raw("adult", data_dir / "adult" / "adult.test")
    assert len(X) == 16_281  # comment line and trailing blank line skipped
    assert set(y) == {"<=50K", ">50K"}  # trailing '.' removed
    assert "?" in set(X["workclass"])  # missing values kept as their own category


# --------------------------------------------------------------------------- credit (synthetic)


def _write_credit(path: Path, n: int = 600, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 28))
    cols = {"Time": v[:, 0] * 3 + rng.normal(scale=0.5, size=n)}  # |corr(Time, V1)| >> 0.6
    cols.update({f"V{i + 1}": v[:, i] for i in range(28)})
    cols["Amount"] = rng.exponential(50.0, size=n)
    df = pd.DataFrame(cols)
    df["Class"] = 0
    df.loc[df.index[::30], "Class"] = 1  # 20 anomalies
    df.to_csv(path, index=False, float_format="%.6f")


@pytest.mark.parametrize("fname", ["creditcard.csv", "creditcard.csv.gz"])
def test_credit_synthetic(tmp_path, fname):
    (tmp_path / "credit").mkdir()
    _write_credit(tmp_path / "credit" / fname)
    ds = load_tabular("credit", tmp_path, download=False)
    # V1 is correlated with the earlier Time column -> V1 dropped; 30 - 1 = 29.
    assert ds.input_shape == (29,)
    assert ds.preprocessor.dropped_columns_ == ["V1"]
    assert ds.info["n_anomalies"] == 20 and len(ds.test_y) == 40
    assert ds.info["n_train"] == 600 - 40


def test_credit_missing_names_kaggle(tmp_path):
    with pytest.raises(DataError) as e:
        load_tabular("credit", tmp_path, download=True)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "credit") in msg
    assert "creditcard.csv" in msg and "kaggle.com" in msg


# --------------------------------------------------------------------------- malformed input

MAGIC_OK = "28.79,16.00,2.64,0.39,0.19,27.70,22.01,-8.20,40.09,81.88,g\n"


def _magic_file(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "magic04.data"
    p.write_text(body)
    return p


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("", "empty"),
        (MAGIC_OK.replace(",", ";") * 3, "separator"),
        (MAGIC_OK + "28.79,16.00,2.64,0.39,0.19,27.70,22.01,-8.20,40.09,g\n", "line 2"),  # a column short
        (MAGIC_OK + MAGIC_OK.replace("16.00", "abc"), "line 2"),  # unparsable number
        (MAGIC_OK + MAGIC_OK + ",,,,,,,,,,\n", "line 3"),  # NaN row
        (MAGIC_OK + MAGIC_OK.replace("16.00", "nan"), "line 2"),  # explicit NaN
        (MAGIC_OK + MAGIC_OK.replace(",g", ",x"), "unknown"),  # bad label
        (MAGIC_OK + MAGIC_OK.replace(",g", ",1,g"), "line 2"),  # a field too many
    ],
)
def test_malformed_headerless_file(tmp_path, body, fragment):
    p = _magic_file(tmp_path, body)
    with pytest.raises(DataError) as e:
        read_raw("magic", p)
    msg = str(e.value)
    assert "\n" not in msg and "magic04.data" in msg and fragment in msg.lower()


def test_malformed_header_files(tmp_path, data_dir):
    good = (data_dir / "bank" / "bank-full.csv").read_text().splitlines()[:6]
    cases = {
        "sep.csv": [line.replace(";", ",") for line in good],  # wrong separator
        "missing.csv": [";".join(line.split(";")[1:]) for line in good],  # no "age" column
        "badnum.csv": good[:3] + ["5x8;" + good[3].split(";", 1)[1]] + good[4:],
        "nanrow.csv": good + [";" * 16],
    }
    for fname, lines in cases.items():
        p = tmp_path / fname
        p.write_text("\n".join(lines) + "\n")
        with pytest.raises(DataError) as e:
            read_raw("bank", p)
        assert fname in str(e.value) and "\n" not in str(e.value), fname
    with pytest.raises(DataError, match="nanrow.csv: line 7"):
        read_raw("bank", tmp_path / "nanrow.csv")
    with pytest.raises(DataError, match="badnum.csv: line 4"):
        read_raw("bank", tmp_path / "badnum.csv")
    (tmp_path / "hdr.csv").write_text(good[0] + "\n")
    with pytest.raises(DataError, match="no data rows"):
        read_raw("bank", tmp_path / "hdr.csv")


def test_unlabelled_rows_for_scoring(tmp_path, data_dir):
    # Header-less format without the label field.
    p = _magic_file(tmp_path, MAGIC_OK.replace(",g", "") * 2)
    X, y = read_raw("magic", p, require_label=False)
    assert y is None and X.shape == (2, 10)
    with pytest.raises(DataError):
        read_raw("magic", p)  # label required by default
    # Header format without the label column.
    lines = (data_dir / "bank" / "bank-full.csv").read_text().splitlines()[:4]
    q = tmp_path / "nolabel.csv"
    q.write_text("\n".join(line.rsplit(";", 1)[0] for line in lines) + "\n")
    X, y = read_raw("bank", q, require_label=False)
    assert y is None and X.shape == (3, 16)


# --------------------------------------------------------------------------- preprocessor


def _toy_frame() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 200
    a = rng.normal(size=n)
    return pd.DataFrame(
        {
            "a": a,
            "b": 2 * a + rng.normal(scale=0.1, size=n),  # correlated with a -> dropped
            "c": rng.normal(size=n),
            "const": np.full(n, 3.0),  # zero variance -> kept, std 1
            "cat": rng.choice(["z", "x", "y"], size=n).astype(object),
        }
    )


def test_preprocessor_filter_categories_and_roundtrip():
    df = _toy_frame()
    pre = TabularPreprocessor().fit(df)
    assert pre.dropped_columns_ == ["b"]
    assert pre.kept_columns_ == ["a", "c", "const", "cat"]
    assert pre.categories_ == {"cat": ["x", "y", "z"]}
    assert pre.std_[pre.kept_columns_.index("const")] == 1.0
    out = pre.transform(df)
    assert out.dtype == np.float32 and np.isfinite(out).all()

    restored = TabularPreprocessor.from_dict(json.loads(json.dumps(pre.to_dict())))
    np.testing.assert_array_equal(restored.transform(df), out)
    assert restored.kept_columns_ == pre.kept_columns_


def test_unseen_category_gets_dedicated_code():
    df = _toy_frame()
    pre = TabularPreprocessor().fit(df)
    new = df.iloc[:3].copy()
    new["cat"] = ["x", "never-seen", "z"]
    j = pre.kept_columns_.index("cat")
    codes = pre.transform(new)[:, j] * pre.std_[j] + pre.mean_[j]
    np.testing.assert_allclose(codes, [0.0, 3.0, 2.0], atol=1e-5)  # 3 == number of known categories


def test_scan_counts_dropped_columns():
    # c correlates only with b, which is dropped (by a): SPEC says c is dropped too.
    rng = np.random.default_rng(0)
    a, e1, e2 = rng.normal(size=(3, 5000))
    b = a + e1  # corr(a, b) ~ 0.71
    c = b + 1.22 * e2  # corr(b, c) ~ 0.76, corr(a, c) ~ 0.53
    pre = TabularPreprocessor().fit(pd.DataFrame({"a": a, "b": b, "c": c}))
    assert abs(np.corrcoef(a, c)[0, 1]) < 0.6 < abs(np.corrcoef(b, c)[0, 1])
    assert pre.dropped_columns_ == ["b", "c"]


# --------------------------------------------------------------------------- paths


def test_resolve_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDGCA_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(str(tmp_path / "cli")) == tmp_path / "cli"
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("FEDGCA_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_data_dir().name == "fedgca"


def test_offline_error_names_dir_and_files(monkeypatch, tmp_path):
    def offline(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    for name, files in [("magic", ["magic04.data"]), ("adult", ["adult.data", "adult.test"])]:
        with pytest.raises(DataError) as e:
            load_tabular(name, tmp_path, download=True)
        msg = str(e.value)
        assert "\n" not in msg and "offline" in msg and str(tmp_path / name) in msg
        assert all(f in msg for f in files) and "archive.ics.uci.edu" in msg
    with pytest.raises(DataError, match="download disabled"):
        load_tabular("bank", tmp_path, download=False)


def test_download_checks_checksum_and_extracts_member(monkeypatch, tmp_path):
    import hashlib
    import io
    import zipfile

    payload = b"hello\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("inner/data.csv", payload)

    def fake_urlopen(req, timeout=None):
        return io.BytesIO(buf.getvalue())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    good = RemoteFile("data.csv", "https://x/a.zip", sha256=hashlib.sha256(payload).hexdigest(), member="data.csv")
    ensure_files(tmp_path / "ds", [good])
    assert (tmp_path / "ds" / "data.csv").read_bytes() == payload
    bad = RemoteFile("other.csv", "https://x/a.zip", md5="0" * 32, member="data.csv")
    with pytest.raises(DataError, match="checksum mismatch"):
        ensure_files(tmp_path / "ds", [bad])
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["data.csv"]  # no partial left


def test_registry_checksums_match_shared_sums(data_dir):
    sums = dict(
        reversed(line.split()) for line in (data_dir / "SHA256SUMS").read_text().splitlines() if line.strip()
    )
    for name in ("academic", "adult", "bank", "magic"):
        for rf in registry.get(name).files:
            assert rf.sha256 == sums[f"{name}/{rf.name}"]
    assert registry.get("credit").files[0].url is None


def test_unknown_dataset():
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset("nope")


@pytest.mark.parametrize("name,params", [("academic", 46_758), ("adult", 42_654), ("bank", 43_167),
                                         ("magic", 38_037)])
def test_tabular_ae_parameter_counts_on_real_widths(data_dir, name, params):
    """SPEC §3: P = 513·dx + 35,472, on the width the real file gives."""
    from fedgca.models import build_model, param_count
    from fedgca.models.tabular import tabular_param_count

    model = build_model(_load(name, data_dir).input_shape)
    assert param_count(model) == tabular_param_count(model.input_dim) == params


def test_credit_parameter_count(tmp_path):
    from fedgca.models import build_model, param_count

    (tmp_path / "credit").mkdir()
    _write_credit(tmp_path / "credit" / "creditcard.csv")
    assert param_count(build_model(load_tabular("credit", tmp_path, download=False).input_shape)) == 50_349
