"""The built-in datasets, registered once: every list of datasets in the package is read from here.

A dataset is one ``DatasetSpec`` line at the end of this file: its kind (tabular or vision), the files that make it
(``<data_dir>/<name>/``, each with its distributor's URL and checksum), SPEC §4's preset C, K and ρ, and for a
tabular dataset the schema its canonical published file is read with (a preset is own data fedgca knows how to
find: ``fedgca.data.presets``) and which file holds its training rows. ``RunConfig``'s presets, the CLI's and
the reports' dataset lists, the downloader and the loaders all read this table.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedgca.registries import Registry

from .download import RemoteFile
from .errors import DataError
from .schema import CATEGORICAL, SPEC_CORR_THRESHOLD, CsvLayout, Feature, Schema


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # "tabular" | "vision"
    files: tuple[RemoteFile, ...]  # what <data_dir>/<name>/ holds, and where each file comes from
    clients: int  # SPEC §4's presets: C, K, ρ
    k: int
    rho: float
    schema: Schema | None = None  # tabular: how its canonical file is read (label rule, layout, test split)
    train_file: str | None = None  # tabular: the file of its training rows

    @property
    def presets(self) -> dict:
        """The RunConfig values this dataset's preset fills in when left unset."""
        return {"clients": self.clients, "k": self.k, "rho": self.rho}


REGISTRY: Registry = Registry("dataset", lambda name, known: DataError(
    f"unknown dataset {name!r}; known: {', '.join(known)} (own data: --data FILE --schema S.json)"))
register = REGISTRY.register


def get(name: str) -> DatasetSpec:
    return REGISTRY.lookup(name)


def tabular_schema(name: str):
    """Built-in tabular dataset ``name``'s schema (one line naming the known ones otherwise)."""
    spec = REGISTRY.get(name)
    if spec is None or spec.schema is None:
        raise DataError(f"unknown tabular dataset {name!r}; known: {', '.join(names('tabular'))}")
    return spec.schema


def names(kind: str | None = None) -> tuple[str, ...]:
    """Registered dataset names in the paper's order, optionally of one kind."""
    return tuple(s.name for s in REGISTRY.values() if kind is None or s.kind == kind)


# --------------------------------------------------------------------------- the files

_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
_FMNIST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"

# Checksums: SHA-256 of the UCI originals as recorded in shared/data/*/SOURCE.md
# and shared/data/SHA256SUMS; Fashion-MNIST / CIFAR-10 MD5s as published by
# their distributors (Zalando, U. Toronto).
_FILES: dict[str, tuple[RemoteFile, ...]] = {
    "academic": (
        RemoteFile(
            "data.csv",
            "https://archive.ics.uci.edu/static/public/697/predict+students+dropout+and+academic+success.zip",
            sha256="3ef126de5cefff26eb11fbb4237f1a1401cb64b488e2f1d598c23cedeb4c45ae",
            member="data.csv",
        ),
    ),
    "adult": (
        RemoteFile(
            "adult.data",
            f"{_UCI}/adult/adult.data",
            sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        ),
        RemoteFile(
            "adult.test",
            f"{_UCI}/adult/adult.test",
            sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
        ),
    ),
    "bank": (
        RemoteFile(
            "bank-full.csv",
            f"{_UCI}/00222/bank.zip",
            sha256="d1513ec63b385506f7cfce9f2c5caa9fe99e7ba4e8c3fa264b3aaf0f849ed32d",
            member="bank-full.csv",
        ),
    ),
    "credit": (
        RemoteFile(
            "creditcard.csv",
            None,
            alternatives=("creditcard.csv.gz", "creditcard.csv.xz"),
            source="https://www.kaggle.com/datasets/mlg-ulb/creditcardfraud (Kaggle login required)",
        ),
    ),
    "magic": (
        RemoteFile(
            "magic04.data",
            f"{_UCI}/magic/magic04.data",
            sha256="e9314b7ebd4b4b59a3b3d65f7316663963777b16a46786877651dbbaa640b36a",
        ),
    ),
    "fashion_mnist": tuple(
        RemoteFile(name, f"{_FMNIST}/{name}", md5=md5)
        for name, md5 in (
            ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
            ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
            ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
            ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
        )
    ),
    "cifar10": (
        RemoteFile(
            "cifar-10-python.tar.gz",
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            md5="c58f30108f718f92721af3b95e74349a",
            alternatives=("cifar-10-batches-py",),
        ),
    ),
}


# --------------------------------------------------------------------------- the tabular schemas

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
_SCHEMAS: dict[str, Schema] = {
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


# --------------------------------------------------------------------------- the datasets, in the paper's order
register(DatasetSpec("academic", "tabular", _FILES["academic"], clients=10, k=10, rho=0.5,
                     schema=_SCHEMAS["academic"], train_file="data.csv"))
register(DatasetSpec("adult", "tabular", _FILES["adult"], clients=20, k=10, rho=0.1,
                     schema=_SCHEMAS["adult"], train_file="adult.data"))
register(DatasetSpec("bank", "tabular", _FILES["bank"], clients=20, k=10, rho=0.1,
                     schema=_SCHEMAS["bank"], train_file="bank-full.csv"))
register(DatasetSpec("credit", "tabular", _FILES["credit"], clients=50, k=20, rho=0.1,
                     schema=_SCHEMAS["credit"], train_file="creditcard.csv"))
register(DatasetSpec("magic", "tabular", _FILES["magic"], clients=10, k=80, rho=0.25,
                     schema=_SCHEMAS["magic"], train_file="magic04.data"))
register(DatasetSpec("cifar10", "vision", _FILES["cifar10"], clients=20, k=20, rho=0.1))
register(DatasetSpec("fashion_mnist", "vision", _FILES["fashion_mnist"], clients=20, k=10, rho=0.1))
