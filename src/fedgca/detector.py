"""Per-client anomaly detectors: a trained autoencoder, its threshold and the preprocessing.

PyOD conventions: ``fit(X)`` on normal training rows sets ``decision_scores_``
(their outlier scores), ``threshold_`` and ``labels_`` (1 = anomaly);
``decision_function`` (higher = more anomalous), ``predict`` and
``predict_proba``; ``contamination`` is the fraction of training rows above the
threshold. The paper's rule — τ = the 0.75-quantile of a client's training
scores — is ``contamination = 0.25`` (``quantile = 1 − contamination``). A
detector saved by a run scores raw records of the dataset's own format with
``score_file``; its files are read without executing anything and checked
against the run's manifest.

Inputs: ``decision_function``/``predict`` take model-ready arrays (what the run trained on) or
a pandas DataFrame of raw records with the data's columns, which goes through the detector's
own schema and fitted preprocessor first (the same rules as training: imputation, category
codes, the dropped columns, standardisation). Raw records as a NumPy array (e.g. X of an ADBench
``.npz``, columns in the schema's order) go through ``transform`` first:
``det.predict(det.transform(X_raw))``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedgca import devices, rundir
from fedgca.evaluation.threshold import quantile_threshold
from fedgca.models import build_model
from fedgca.protocol.losses import reconstruction_per_row
from fedgca.training.stacked import slot_model


class AnomalyDetector:
    def __init__(self, model: torch.nn.Module, *, quantile: float = 0.75, contamination: float | None = None,
                 threshold: float | None = None, preprocessor=None, dataset: str | None = None,
                 kind: str = "tabular", meta: dict | None = None, schema=None, device=None,
                 members: list[torch.nn.Module] | None = None, standardise: list[tuple[float, float]] | None = None):
        """``device``: where it scores (fedgca.devices: a name or torch.device); None keeps the model's.

        ``members`` and ``standardise`` (``--selection ensemble-rounds``): the detector is the mean of several
        models' reconstruction errors, each standardised by its (mean, std) on the client's validation normals
        (``model`` is then the last member)."""
        if contamination is not None:
            if not 0 < contamination < 1:
                raise ValueError(f"contamination must be in (0, 1), got {contamination!r}")
            quantile = 1.0 - contamination
        if (members is None) != (standardise is None) or (members is not None and len(members) != len(standardise)):
            raise ValueError("an ensemble detector needs one (mean, std) per member")
        where = None if device is None else devices.resolve(device) if isinstance(device, str) else device
        self.members = None if members is None else [(m if where is None else m.to(where)).eval() for m in members]
        self.standardise = None if standardise is None else [(float(a), float(b)) for a, b in standardise]
        self.model = (model if where is None else model.to(where)).eval()
        self.quantile = quantile
        self.threshold_ = threshold
        self.decision_scores_: np.ndarray | None = None
        self.labels_: np.ndarray | None = None
        self.preprocessor = preprocessor
        self.dataset = dataset
        self.kind = kind
        self.meta = meta or {}
        self.schema = schema  # tabular: the fedgca.data.Schema raw records are read with

    @property
    def contamination(self) -> float:
        """PyOD's name for the paper's rule: the fraction of training rows flagged, 1 − quantile."""
        return 1.0 - self.quantile

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.meta["input_shape"])

    def _inputs(self, X) -> np.ndarray:
        """Model-ready inputs: a DataFrame of raw records goes through the schema and the preprocessor."""
        if hasattr(X, "columns") and hasattr(X, "iloc"):  # a pandas DataFrame of raw records
            from fedgca.data.readers import table_from_frame

            t = table_from_frame(X, self._schema(), where="the rows to score", require_label=False)
            return self.preprocessor.transform(t.features)
        return np.asarray(X)

    def transform(self, X) -> np.ndarray:
        """Raw records (a DataFrame, or a 2-d array with the schema's feature columns in order) -> model inputs."""
        if not (hasattr(X, "columns") and hasattr(X, "iloc")):
            from fedgca.data.readers import table_from_arrays

            X = np.asarray(X)
            t = table_from_arrays(X, where="the rows to score", schema=self._schema()) if X.ndim == 2 and \
                X.shape[1] == len(self._schema().features) else None
            if t is None:
                raise ValueError(f"the rows to score have shape {X.shape}; this detector reads "
                                 f"{len(self._schema().features)} raw feature columns ({', '.join(self._schema().columns[:6])}"
                                 f"{' ...' if len(self._schema().features) > 6 else ''})")
            return self.preprocessor.transform(t.features)
        return self._inputs(X)

    def _schema(self):
        if self.schema is None:
            from fedgca.data.presets import schema

            self.schema = schema(self.dataset)  # a detector saved before schemas were stored: a preset's
        return self.schema

    @torch.no_grad()
    def decision_function(self, X) -> np.ndarray:
        """s(x) = ||x − T(x)||² for model-ready inputs, or for a DataFrame of raw records (an ensemble: the mean
        over its members of (s_j(x) − mean_j) / std_j)."""
        x = torch.as_tensor(self._inputs(X), dtype=torch.float32, device=self.device)
        if self.members is None:
            return reconstruction_errors(self.model, x)
        total = np.zeros(len(x), dtype=np.float64)
        for m, (mean, std) in zip(self.members, self.standardise):
            total += (reconstruction_errors(m, x) - mean) / std
        return (total / len(self.members)).astype(np.float32)

    def fit(self, X: np.ndarray, y=None) -> "AnomalyDetector":
        """Score the (normal) training rows; τ = their ``quantile`` (SPEC §5, the same rule as the evaluation)."""
        self.decision_scores_ = self.decision_function(X)
        self.threshold_ = quantile_threshold(self.decision_scores_, self.quantile)
        self.labels_ = (self.decision_scores_ > self.threshold_).astype(np.int64)
        return self

    def predict(self, X) -> np.ndarray:
        return (self.decision_function(X) > self.threshold_).astype(np.int64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """[P(normal), P(anomaly)] per row by PyOD's 'linear' rule: min-max scaling against the training scores."""
        if self.decision_scores_ is None:
            raise ValueError("predict_proba needs the training scores: call fit(X) first")
        lo, hi = float(self.decision_scores_.min()), float(self.decision_scores_.max())
        p = np.clip((self.decision_function(X) - lo) / max(hi - lo, 1e-12), 0.0, 1.0)
        return np.stack([1.0 - p, p], axis=1)

    # ---- raw data of the dataset's own format ----
    def prepare(self, path) -> np.ndarray:
        """Read a raw file (tabular: the dataset's format; vision: PNG dir or .npy) into model inputs."""
        path = Path(path)
        if self.kind == "tabular":
            from fedgca.data.readers import read_file

            table = read_file(path, self._schema(), require_label=False)
            return self.preprocessor.transform(table.features)
        from fedgca.data.vision import read_images

        return read_images(path, self.input_shape)

    def score_file(self, path) -> tuple[np.ndarray, np.ndarray]:
        x = self.prepare(path)
        scores = self.decision_function(x)
        return scores, (scores > self.threshold_).astype(np.int64)

    # ---- persistence ----
    def save(self, directory, *, manifest: bool = True) -> list[Path]:
        """Write model.pt and detector.json (atomically); returns their paths. ``manifest``: also the directory's
        own manifest of both (a detector that travels alone, e.g. a Flower node's, is checked against it on
        load); a run's detectors are in the run's manifest instead."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.members is None:
            rundir.save_tensors(d / MODEL, {k: v.cpu() for k, v in self.model.state_dict().items()})
        else:  # every member's tensors in the one file, each name prefixed by its member's index
            rundir.save_tensors(d / MODEL, {f"{MEMBER}{j}.{k}": v.cpu() for j, m in enumerate(self.members)
                                            for k, v in m.state_dict().items()})
        ensemble = {} if self.members is None else {"ensemble": {"standardise": [list(s) for s in self.standardise]}}
        doc = {"dataset": self.dataset, "kind": self.kind, "quantile": self.quantile,
               "threshold": self.threshold_, **self.meta, **ensemble,
               "preprocessor": self.preprocessor.to_dict() if self.preprocessor is not None else None,
               "schema": self.schema.to_dict() if self.schema is not None else None}
        rundir.atomic_write_text(d / DOC, json.dumps(doc, indent=2))
        if manifest:
            rundir.record(d, MODEL, DOC)
        return [d / MODEL, d / DOC]

    @classmethod
    def load(cls, directory, *, run_dir=None, device="cpu") -> "AnomalyDetector":
        """Read a saved detector; ``run_dir`` (its run directory) checks both files against the run's manifest,
        and the directory's own manifest, where it has one, checks them too; ``device``: where it scores (``auto``:
        CUDA when available)."""
        d = Path(directory)
        if not (d / DOC).exists():
            raise FileNotFoundError(f"no detector in {d} (expected {DOC} and {MODEL})")
        for name in (DOC, MODEL):
            if run_dir is not None:
                rundir.verify(run_dir, (d / name).relative_to(run_dir).as_posix())
            if (d / rundir.MANIFEST).exists():
                rundir.verify(d, name)
        doc = rundir.load_json(d / DOC)
        members = standardise = None
        try:
            tensors = rundir.load_tensors(d / MODEL)
            if doc.get("ensemble") is not None:
                standardise = [(float(a), float(b)) for a, b in doc["ensemble"]["standardise"]]
                members = []
                for j in range(len(standardise)):
                    prefix = f"{MEMBER}{j}."
                    with torch.device("cpu"):
                        members.append(build_model(tuple(doc["input_shape"])))
                    members[-1].load_state_dict({k[len(prefix):]: v for k, v in tensors.items()
                                                 if k.startswith(prefix)})
                model = members[-1]
            else:
                with torch.device("cpu"):  # the file's tensors are CPU tensors; moved to ``device`` below
                    model = build_model(tuple(doc["input_shape"]))
                model.load_state_dict(tensors)
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            if isinstance(err, rundir.RunFileError):
                raise
            raise rundir.RunFileError(f"{d}: not a fedgca detector ({type(err).__name__}: "
                                      f"{' '.join(str(err).split())[:160]})") from None
        pre = schema = None
        if doc.get("preprocessor") is not None:
            from fedgca.data.encoding import TabularPreprocessor

            pre = TabularPreprocessor.from_dict(doc["preprocessor"])
        if doc.get("schema") is not None:
            from fedgca.data.schema import Schema

            schema = Schema.from_dict(doc["schema"], where=str(d / DOC))
        meta = {k: v for k, v in doc.items()
                if k not in ("dataset", "kind", "quantile", "threshold", "preprocessor", "schema", "ensemble")}
        return cls(model, quantile=doc["quantile"], threshold=doc["threshold"], preprocessor=pre,
                   dataset=doc["dataset"], kind=doc["kind"], meta=meta, schema=schema, device=device,
                   members=members, standardise=standardise)


def reconstruction_errors(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    """s(x) = ||x − T(x)||² of one model, 4,096 rows at a time."""
    out = [reconstruction_per_row(c, model(c), c.dim() - 1) for c in torch.split(x, 4096)]
    return devices.to_numpy(torch.cat(out)) if out else np.zeros(0, dtype=np.float32)


MODEL = "model.pt"
MEMBER = "member"  # an ensemble's tensor names: member<j>.<parameter>
DOC = "detector.json"


def client_dir(run_dir, i: int) -> Path:
    return Path(run_dir) / rundir.CLIENTS / f"client_{i:03d}"


def load_client_detector(run_dir, i: int, device="cpu") -> "AnomalyDetector":
    """Client i's detector of a finished run, verified against the run's manifest."""
    return AnomalyDetector.load(client_dir(run_dir, i), run_dir=Path(run_dir), device=device)


def client_detectors(fed, clients, round_: int | list[int] | None = None, ensemble=None) -> list[AnomalyDetector]:
    """One fitted detector per client: its deployed model — the final round's, or with a validation split the
    selected round's (``round_``: rounds trained, 0 = the untrained model; a list: each client's own choice) —
    threshold on its own training (or validation) rows. ``ensemble`` (``--selection ensemble-rounds``): a list of
    (stacked parameters, per-client (mean, std) on validation) per round, 0 = untrained; each client's detector
    is then the standardised mean of its models of every round.

    ``clients``: the stacked deployed models."""
    rounds = round_ if isinstance(round_, list) else [fed.cfg.rounds if round_ is None else round_] * fed.num_clients
    out = []
    for i in range(fed.num_clients):
        slot = min(i, clients.num_clients - 1)  # centralized: one model for everyone
        members = standardise = None
        if ensemble is not None:
            members = [slot_model(params, slot, fed.template) for params, _ in ensemble]
            standardise = [stats[slot] for _, stats in ensemble]
        model = members[-1] if members else clients.client_model(slot, fed.template)
        det = AnomalyDetector(model, quantile=fed.cfg.quantile, preprocessor=fed.dataset.preprocessor,
                              dataset=fed.cfg.dataset, kind=fed.dataset.kind, schema=fed.dataset.schema,
                              meta={"client": i, "method": fed.cfg.method,
                                    "round": int(rounds[slot]),
                                    "input_shape": list(fed.dataset.input_shape),
                                    "threshold_rows": "validation" if fed.cfg.threshold == "val-quantile"
                                    else "training"}, device=fed.device, members=members, standardise=standardise)
        tau_rows = fed.val_shards if fed.cfg.threshold == "val-quantile" else fed.shards
        out.append(det.fit(devices.to_numpy(tau_rows.client(i))))
    return out


def save_client_detectors(run_dir, detectors: list[AnomalyDetector]) -> list[str]:
    """Each client's detector under ``run_dir``; returns the written files relative to it (for the manifest)."""
    written, run_dir = [], Path(run_dir)
    for i, det in enumerate(detectors):
        written += [p.relative_to(run_dir).as_posix() for p in det.save(client_dir(run_dir, i), manifest=False)]
    return written
