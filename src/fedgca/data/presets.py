"""The built-in tabular datasets (SPEC §4) as presets: a schema and file names each.

A preset is nothing but own data that fedgca knows how to find: ``--dataset bank`` reads
``<data_dir>/bank/bank-full.csv`` with :data:`SCHEMAS` ``["bank"]`` through the same reader, split
and encoding as ``--data bank-full.csv --schema bank.json`` (``fedgca schema show bank`` writes
that file), so the two give bit-identical arrays.
"""
from __future__ import annotations

from pathlib import Path

from .paths import REMOTE_FILES, DataError, ensure_files, locate, resolve_data_dir
from .schema import CATEGORICAL, SPEC_CORR_THRESHOLD, CsvLayout, Feature, Schema

_ACADEMIC_FEATURES = (
    "Marital status", "Application mode", "Application order", "Course",
    "Daytime/evening attendance", "Previous qualification", "Previous qualification (grade)",
    "Nacionality", "Mother's qualification", "Father's qualification", "Mother's occupation",
    "Father's occupation", "Admission grade", "Displaced", "Educational special needs", "Debtor",
    "Tuition fees up to date", "Gender", "Scholarship holder", "Age at enrollment", "International",
    "Curricular units 1st sem (credited)", "Curricular units 1st sem (enrolled)",
    "Curricular units 1st sem (evaluations)", "Curricular units 1st sem (approved)",
    "Curricular units 1st sem (grade)", "Curricular units 1st sem (without evaluations)",
    "Curricular units 2nd sem (credited)", "Curricular units 2nd sem (enrolled)",
    "Curricular units 2nd sem (evaluations)", "Curricular units 2nd sem (approved)",
    "Curricular units 2nd sem (grade)", "Curricular units 2nd sem (without evaluations)",
    "Unemployment rate", "Inflation rate", "GDP",
)  # fmt: skip
_ADULT_FEATURES = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)  # fmt: skip
_BANK_FEATURES = (
    "age", "job", "marital", "education", "default", "balance", "housing", "loan", "contact",
    "day", "month", "duration", "campaign", "pdays", "previous", "poutcome",
)  # fmt: skip
_CREDIT_FEATURES = ("Time", *(f"V{i}" for i in range(1, 29)), "Amount")
_MAGIC_FEATURES = (
    "fLength", "fWidth", "fSize", "fConc", "fConc1", "fAsym", "fM3Long", "fM3Trans", "fAlpha", "fDist",
)  # fmt: skip


def _schema(features, categorical=(), *, label, normal, anomaly, unused=(), sep=",", header=True, test="balanced-tail",
            test_file=None, **csv) -> Schema:
    feats = tuple(Feature(f, CATEGORICAL if f in categorical else "numeric") for f in features)
    names = None if header else (*features, label)
    return Schema(features=feats, label=label, normal=tuple(normal), anomaly=tuple(anomaly), unused=tuple(unused),
                  test_split="file" if test_file else test, test_file=test_file, missing="error",
                  corr_threshold=SPEC_CORR_THRESHOLD,
                  csv=CsvLayout(sep=sep, header=header, names=names, **csv))


# Each dataset's canonical published format (shared/data/*/SOURCE.md) and label rule (SPEC §4 table).
# The presets refuse empty cells (missing = "error"): the canonical files have none, so one means damage.
SCHEMAS: dict[str, Schema] = {
    # academic codes every attribute numerically already (UCI 697): all numeric.
    "academic": _schema(_ACADEMIC_FEATURES, label="Target", normal=("Graduate",), anomaly=("Dropout",),
                        unused=("Enrolled",), sep=";", encoding="utf-8-sig"),
    "adult": _schema(_ADULT_FEATURES, {"workclass", "education", "marital-status", "occupation", "relationship",
                                       "race", "sex", "native-country"},
                     label="income", normal=("<=50K",), anomaly=(">50K",), header=False, test_file="adult.test",
                     comment="|", skipinitialspace=True, label_strip="."),
    "bank": _schema(_BANK_FEATURES, {"job", "marital", "education", "default", "housing", "loan", "contact", "month",
                                     "poutcome"}, label="y", normal=("no",), anomaly=("yes",), sep=";"),
    "credit": _schema(_CREDIT_FEATURES, label="Class", normal=("0",), anomaly=("1",)),
    "magic": _schema(_MAGIC_FEATURES, label="class", normal=("g",), anomaly=("h",), header=False),
}
TRAIN_FILE = {"academic": "data.csv", "adult": "adult.data", "bank": "bank-full.csv",
              "credit": "creditcard.csv", "magic": "magic04.data"}  # fmt: skip


def schema(name: str) -> Schema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise DataError(f"unknown tabular dataset {name!r}; known: {', '.join(SCHEMAS)}") from None


def preset_file(dataset_dir: Path, name: str, file_name: str) -> Path:
    rf = next(r for r in REMOTE_FILES[name] if r.name == file_name)
    path = locate(dataset_dir, rf)
    if path is None:
        raise DataError(f"{dataset_dir}: missing {file_name}")
    return path


def preset_source(name: str, data_dir=None, *, download: bool = True):
    """The :class:`~fedgca.data.own.DataSource` of built-in tabular dataset ``name``."""
    from .own import DataSource

    sch = schema(name)
    dataset_dir = resolve_data_dir(data_dir) / name
    ensure_files(dataset_dir, REMOTE_FILES[name], download=download)
    train = preset_file(dataset_dir, name, TRAIN_FILE[name])
    test = preset_file(dataset_dir, name, sch.test_file) if sch.test_file else None
    return DataSource(str(train), sch, name=name, test_path=None if test is None else str(test))


def load_tabular(name: str, data_dir=None, download: bool = True, *, seed: int = 100):
    """Load a built-in tabular dataset as SPEC §4 defines it (files, split, encoding)."""
    return preset_source(name, data_dir, download=download).load(seed)


def read_raw(name: str, path, *, require_label: bool = True):
    """One file in built-in dataset ``name``'s format: (features frame, label strings or None)."""
    from .table import read_file

    t = read_file(Path(path), schema(name), require_label=require_label)
    return t.features, t.labels
