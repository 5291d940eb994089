"""What a table of records means: columns, types, the label rule, sites and the test split.

One schema format describes every tabular input fedgca reads — the built-in datasets (their
presets live in :mod:`fedgca.data.presets`), a practitioner's CSV/TSV/Parquet file, a directory
of per-site files, and a Flower node's own rows. It is a JSON file a person can read and edit
(``fedgca schema infer`` writes one)::

    {
      "features": [
        {"name": "age", "type": "numeric", "range": [18, 100]},
        {"name": "job", "type": "categorical", "categories": ["admin.", "blue-collar"]}
      ],
      "label": {"column": "y", "normal": ["no"], "anomaly": ["yes"]},
      "site": "job",
      "test": {"split": "balanced"},
      "missing": "impute",
      "csv": {"sep": ";", "header": true},
      "corr_threshold": 1.0
    }

* ``features``: the model's input columns in order. ``categorical`` columns are encoded as
  integer codes over their ``categories`` (sorted); without a list, the categories are fitted
  on the training normals (SPEC §4). A value outside the list gets a dedicated code. A numeric
  feature's optional ``range`` gives public bounds (known without reading the rows): a DP run's
  preprocessing statistics (``--dp-stats-sigma``) clip each value to them.
* ``label``: rows whose label is in ``normal`` are normal; ``anomaly`` lists the anomalous
  values (omitted: every other value); ``unused`` values belong to neither (academic's
  Enrolled). The label is only read to split and to evaluate; training sees normal rows only.
* ``site``: a column naming each row's site, for the ``natural`` partition (one client per
  site). It may also be a feature.
* ``test``: ``{"split": "balanced"}`` (default: A anomalies and A normals drawn with the run
  seed), ``"balanced-tail"`` (SPEC §4: the last A normals in file order), ``"per-site"`` (each
  site holds out its own anomalies and as many of its normals, drawn with the seed and the site's
  client id, and is evaluated on them alone; the encoding is fitted from per-site aggregates, as
  a Flower deployment fits it — so a simulation and a deployment over the same per-site files
  give the same numbers) or ``{"file": "NAME"}`` (a given test file, next to the data).
* ``missing``: ``"impute"`` (default for own data: an empty/NaN numeric cell becomes the
  training normals' mean, an empty categorical cell the category ``MISSING``) or ``"error"``
  (the built-in presets: their canonical files have no empty cells, so one means damage).
* ``csv``: how the text file is laid out (``sep``, ``header``, ``names`` for header-less files,
  ``encoding``, ``comment``, ``skipinitialspace``, ``label_strip``). Parquet ignores it.
* ``corr_threshold``: SPEC §4's correlation filter drops a column whose |Pearson r| with an earlier column
  exceeds it. The presets use the paper's 0.6; own data's default is 1.0 (off: no column dropped), chosen on the
  shared ADBench files (docs/results/adbench).
* ``eval_fraction``: Flower own-data nodes only — the share of a labelled node's rows it holds
  out as its local test set.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DataError

if TYPE_CHECKING:
    import numpy as np

NUMERIC, CATEGORICAL = "numeric", "categorical"
TEST_SPLITS = ("balanced", "balanced-tail", "per-site", "file")
SPLIT_RULES = TEST_SPLITS[:3]  # the rules that draw the test set from the data itself
MISSING_RULES = ("impute", "error")
MISSING_CATEGORY = "MISSING"  # what an empty categorical cell becomes under missing = "impute"
# the cells a reader takes for a missing value (CSV/TSV, any engine); anything else in a numeric column must parse
MISSING_TOKENS = ("", "NA", "NaN", "nan", "N/A", "n/a", "NULL", "null")
# SPEC §4's correlation filter (drop a column whose |Pearson r| with an earlier one exceeds 0.6) is the paper's
# step for its five tables; on the 25 shared ADBench files it cost Centralized and GCA 3.5 pp of AUROC on the mean
# (it dropped 34 of landsat's 36 columns), so data without a preset keeps every column (1.0: |r| > 1 never).
SPEC_CORR_THRESHOLD = 0.6
OWN_CORR_THRESHOLD = 1.0


@dataclass(frozen=True)
class Feature:
    name: str
    type: str = NUMERIC  # "numeric" | "categorical"
    categories: tuple[str, ...] | None = None  # categorical: the sorted list, or None = fit on training normals
    range: tuple[float, float] | None = None  # numeric: public bounds (--dp-stats-sigma clips to them), or None


@dataclass(frozen=True)
class CsvLayout:
    sep: str = ","
    header: bool = True
    names: tuple[str, ...] | None = None  # column names of a header-less file, in file order
    encoding: str = "utf-8"
    comment: str | None = None  # lines starting with this are skipped (adult.test's first line)
    skipinitialspace: bool = False  # adult separates fields by ", "
    label_strip: str = ""  # trailing characters removed from labels (adult.test's ".")

    @property
    def sep_name(self) -> str:
        return {",": "','", ";": "';'", "\t": "tab"}.get(self.sep, repr(self.sep))


@dataclass(frozen=True)
class Schema:
    features: tuple[Feature, ...]
    label: str | None = None
    normal: tuple[str, ...] = ()
    anomaly: tuple[str, ...] | None = None  # None: every label value that is neither normal nor unused
    unused: tuple[str, ...] = ()
    site: str | None = None
    test_split: str = "balanced"
    test_file: str | None = None
    missing: str = "impute"
    csv: CsvLayout = field(default_factory=CsvLayout)
    corr_threshold: float = OWN_CORR_THRESHOLD  # off; the presets set SPEC_CORR_THRESHOLD
    eval_fraction: float = 0.3

    # ------------------------------------------------------------------ views
    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def numeric(self) -> list[str]:
        return [f.name for f in self.features if f.type == NUMERIC]

    @property
    def categorical(self) -> list[str]:
        return [f.name for f in self.features if f.type == CATEGORICAL]

    @property
    def categories(self) -> dict[str, list[str]]:
        """The categorical columns whose category list the schema fixes."""
        return {f.name: list(f.categories) for f in self.features
                if f.type == CATEGORICAL and f.categories is not None}

    @property
    def read_columns(self) -> list[str]:
        """Every column a reader needs: features, label, site (each once, features first)."""
        out = list(self.columns)
        for c in (self.label, self.site):
            if c is not None and c not in out:
                out.append(c)
        return out

    def public_bounds(self, where: str = "schema") -> tuple[np.ndarray, np.ndarray]:
        """Each encoded column's public [low, high]: a numeric feature's ``range``, a categorical one's codes
        [0, #categories] (the last: unseen). What ``--dp-stats-sigma`` clips a row to; no data is read."""
        missing = [f.name for f in self.features if f.type == NUMERIC and f.range is None]
        unlisted = [f.name for f in self.features if f.type == CATEGORICAL and f.categories is None]
        if missing or unlisted:
            need = [f"numeric feature(s) {', '.join(map(repr, missing))} need a public \"range\": [low, high]"] \
                if missing else []
            need += [f"categorical feature(s) {', '.join(map(repr, unlisted))} need their 'categories'"] \
                if unlisted else []
            raise DataError(f"{where}: --dp-stats-sigma clips each row to public bounds: {'; '.join(need)} (bounds "
                            "you know without looking at the rows: read off the data they are not public)")
        import numpy as np

        low = [f.range[0] if f.type == NUMERIC else 0.0 for f in self.features]
        high = [f.range[1] if f.type == NUMERIC else float(len(f.categories)) for f in self.features]
        return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)

    def is_normal(self, values) -> "object":
        return values.isin(self.normal)

    def is_anomaly(self, values) -> "object":
        if self.anomaly is not None:
            return values.isin(self.anomaly)
        return ~values.isin((*self.normal, *self.unused))

    def with_test(self, split: str | None = None, file: str | None = None) -> "Schema":
        """This schema with another test rule (the CLI's --test-split / --test-file)."""
        if file is not None:
            return replace(self, test_split="file", test_file=str(file))
        if split is not None:
            if split not in SPLIT_RULES:
                raise DataError(f"test split must be one of {', '.join(SPLIT_RULES)} (or a test file), "
                                f"got {split!r}")
            return replace(self, test_split=split, test_file=None)
        return self

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, path) -> "Schema":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataError(f"{path}: schema file not found") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            where = f" ({e.msg} at line {e.lineno})" if isinstance(e, json.JSONDecodeError) else ""
            raise DataError(f"{path}: not a JSON schema file{where}") from None
        return cls.from_dict(d, where=str(path))

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        return path

    @classmethod
    def from_dict(cls, d, where: str = "schema") -> "Schema":
        if not isinstance(d, dict):
            raise DataError(f"{where}: a schema is a JSON object with 'features' (and usually 'label')")
        unknown = set(d) - {"features", "label", "site", "test", "missing", "csv", "corr_threshold",
                            "eval_fraction", "note"}
        if unknown:
            raise DataError(f"{where}: unknown schema key(s) {', '.join(sorted(unknown))}")
        feats = []
        for f in d.get("features") or []:
            if isinstance(f, str):
                f = {"name": f}
            if not isinstance(f, dict) or "name" not in f:
                raise DataError(f"{where}: each feature is a name or an object with 'name' and 'type'")
            kind = f.get("type", NUMERIC)
            if kind not in (NUMERIC, CATEGORICAL):
                raise DataError(f"{where}: feature {f['name']!r}: type must be 'numeric' or 'categorical'")
            cats = f.get("categories")
            if cats is not None:
                if kind != CATEGORICAL:
                    raise DataError(f"{where}: feature {f['name']!r}: only categorical features have categories")
                cats = tuple(sorted({str(c) for c in cats}))
            feats.append(Feature(str(f["name"]), kind, cats, _range(f, kind, where)))
        if not feats:
            raise DataError(f"{where}: 'features' must list at least one column")
        names = [f.name for f in feats]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise DataError(f"{where}: duplicate feature name(s) {', '.join(map(repr, dup))}")
        label = d.get("label") or {}
        if not isinstance(label, dict):
            raise DataError(f"{where}: 'label' is an object with 'column' and 'normal'")
        csv = d.get("csv") or {}
        test = d.get("test") or {}
        if isinstance(test, str):
            test = {"split": test}
        split = test.get("split", "file" if test.get("file") else "balanced")
        if split not in TEST_SPLITS:
            raise DataError(f"{where}: test split must be one of {', '.join(TEST_SPLITS)}, got {split!r}")
        if split == "file" and not test.get("file"):
            raise DataError(f"{where}: test split 'file' needs the test file's name in test.file")
        missing = d.get("missing", "impute")
        if missing not in MISSING_RULES:
            raise DataError(f"{where}: missing must be one of {', '.join(MISSING_RULES)}, got {missing!r}")
        anomaly = label.get("anomaly")
        try:
            schema = cls(
                features=tuple(feats),
                label=label.get("column"),
                normal=tuple(str(v) for v in label.get("normal", [])),
                anomaly=None if anomaly is None else tuple(str(v) for v in anomaly),
                unused=tuple(str(v) for v in label.get("unused", [])),
                site=d.get("site"),
                test_split=split,
                test_file=test.get("file"),
                missing=missing,
                csv=CsvLayout(
                    sep=str(csv.get("sep", ",")), header=bool(csv.get("header", True)),
                    names=tuple(csv["names"]) if csv.get("names") else None,
                    encoding=str(csv.get("encoding", "utf-8")), comment=csv.get("comment"),
                    skipinitialspace=bool(csv.get("skipinitialspace", False)),
                    label_strip=str(csv.get("label_strip", "")),
                ),
                corr_threshold=float(d.get("corr_threshold", OWN_CORR_THRESHOLD)),
                eval_fraction=float(d.get("eval_fraction", 0.3)),
            )
        except (TypeError, ValueError) as e:
            raise DataError(f"{where}: {' '.join(str(e).split())}") from None
        if schema.label is not None and not schema.normal:
            raise DataError(f"{where}: label {schema.label!r} needs a 'normal' list of label values")
        if schema.label is None and schema.normal:
            raise DataError(f"{where}: 'normal' values need the label's 'column'")
        if not 0 <= schema.corr_threshold <= 1:
            raise DataError(f"{where}: corr_threshold must be in [0, 1], got {schema.corr_threshold}")
        if not 0 < schema.eval_fraction < 1:
            raise DataError(f"{where}: eval_fraction must be in (0, 1), got {schema.eval_fraction}")
        if schema.label is not None and schema.label in names:
            raise DataError(f"{where}: the label column {schema.label!r} cannot also be a feature")
        return schema

    def to_dict(self) -> dict:
        feats = []
        for f in self.features:
            item: dict = {"name": f.name, "type": f.type}
            if f.categories is not None:
                item["categories"] = list(f.categories)
            if f.range is not None:
                item["range"] = list(f.range)
            feats.append(item)
        d: dict = {"features": feats}
        if self.label is not None:
            d["label"] = {"column": self.label, "normal": list(self.normal)}
            if self.anomaly is not None:
                d["label"]["anomaly"] = list(self.anomaly)
            if self.unused:
                d["label"]["unused"] = list(self.unused)
        if self.site is not None:
            d["site"] = self.site
        d["test"] = {"split": self.test_split, **({"file": self.test_file} if self.test_file else {})}
        d["missing"] = self.missing
        default = CsvLayout()
        d["csv"] = {"sep": self.csv.sep, "header": self.csv.header}
        for name in ("names", "encoding", "comment", "skipinitialspace", "label_strip"):
            value = getattr(self.csv, name)
            if value != getattr(default, name):
                d["csv"][name] = list(value) if isinstance(value, tuple) else value
        d["corr_threshold"] = self.corr_threshold
        if self.eval_fraction != 0.3:
            d["eval_fraction"] = self.eval_fraction
        return d

    def digest(self) -> str:
        """Same schema ⇔ same digest (a Flower server checks its nodes agree; runs record it)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _range(f: dict, kind: str, where: str) -> tuple[float, float] | None:
    """A feature's public range from its JSON, checked: two finite numbers, low < high, numeric features only."""
    r = f.get("range")
    if r is None:
        return None
    if kind != NUMERIC:
        raise DataError(f"{where}: feature {f['name']!r}: only numeric features have a range (a categorical one's "
                        "codes are bounded by its categories)")
    try:
        low, high = (float(v) for v in r)
    except (TypeError, ValueError):
        raise DataError(f"{where}: feature {f['name']!r}: range must be [low, high], got {r!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise DataError(f"{where}: feature {f['name']!r}: range must be two finite numbers with low < high, got {r!r}")
    return low, high
