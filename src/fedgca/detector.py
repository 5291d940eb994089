"""Per-client anomaly detectors: a trained autoencoder, its threshold and the preprocessing.

PyOD-style interface: ``decision_function`` (higher = more anomalous),
``threshold_``, ``predict`` (1 = anomaly). A detector saved by a run scores
raw records of the dataset's own format with ``score_file``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedgca.models import build_model
from fedgca.protocol.losses import reconstruction_per_row


class AnomalyDetector:
    def __init__(self, model: torch.nn.Module, *, quantile: float = 0.75, threshold: float | None = None,
                 preprocessor=None, dataset: str | None = None, kind: str = "tabular", meta: dict | None = None):
        self.model = model.eval()
        self.quantile = quantile
        self.threshold_ = threshold
        self.preprocessor = preprocessor
        self.dataset = dataset
        self.kind = kind
        self.meta = meta or {}

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.meta["input_shape"])

    @torch.no_grad()
    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """s(x) = ||x − T(x)||² for model-ready inputs."""
        x = torch.as_tensor(np.asarray(X), dtype=torch.float32)
        out = [reconstruction_per_row(c, self.model(c), c.dim() - 1) for c in torch.split(x, 4096)]
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)

    def fit(self, X: np.ndarray) -> "AnomalyDetector":
        """Set threshold_ to the quantile of the scores on (normal) training rows."""
        self.threshold_ = float(np.quantile(self.decision_function(X), self.quantile))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return (self.decision_function(X) > self.threshold_).astype(np.int64)

    # ---- raw data of the dataset's own format ----
    def prepare(self, path) -> np.ndarray:
        """Read a raw file (tabular: the dataset's format; vision: PNG dir or .npy) into model inputs."""
        path = Path(path)
        if self.kind == "tabular":
            from fedgca.data.tabular import read_raw

            features, _ = read_raw(self.dataset, path, require_label=False)
            return self.preprocessor.transform(features)
        from fedgca.data.vision import read_images

        return read_images(path, self.input_shape)

    def score_file(self, path) -> tuple[np.ndarray, np.ndarray]:
        x = self.prepare(path)
        scores = self.decision_function(x)
        return scores, (scores > self.threshold_).astype(np.int64)

    # ---- persistence ----
    def save(self, directory) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict(), d / "model.pt")
        doc = {"dataset": self.dataset, "kind": self.kind, "quantile": self.quantile,
               "threshold": self.threshold_, **self.meta,
               "preprocessor": self.preprocessor.to_dict() if self.preprocessor is not None else None}
        (d / "detector.json").write_text(json.dumps(doc, indent=2))

    @classmethod
    def load(cls, directory) -> "AnomalyDetector":
        d = Path(directory)
        if not (d / "detector.json").exists():
            raise FileNotFoundError(f"no detector in {d} (expected detector.json and model.pt)")
        doc = json.loads((d / "detector.json").read_text())
        model = build_model(tuple(doc["input_shape"]))
        model.load_state_dict(torch.load(d / "model.pt", weights_only=True))
        pre = None
        if doc.get("preprocessor") is not None:
            from fedgca.data.tabular import TabularPreprocessor

            pre = TabularPreprocessor.from_dict(doc["preprocessor"])
        meta = {k: v for k, v in doc.items() if k not in ("dataset", "kind", "quantile", "threshold", "preprocessor")}
        return cls(model, quantile=doc["quantile"], threshold=doc["threshold"], preprocessor=pre,
                   dataset=doc["dataset"], kind=doc["kind"], meta=meta)


def client_dir(run_dir, i: int) -> Path:
    return Path(run_dir) / "clients" / f"client_{i:03d}"


def save_client_detectors(run_dir, fed, method) -> None:
    """One detector per client: its deployed final model, threshold on its own training rows."""
    clients = method.deployed_clients()
    for i in range(fed.num_clients):
        slot = min(i, clients.num_clients - 1)  # centralized: one model for everyone
        model = clients.client_model(slot, fed.template)
        det = AnomalyDetector(model, quantile=fed.cfg.quantile, preprocessor=fed.dataset.preprocessor,
                              dataset=fed.cfg.dataset, kind=fed.dataset.kind,
                              meta={"client": i, "method": fed.cfg.method, "round": fed.cfg.rounds,
                                    "input_shape": list(fed.dataset.input_shape)})
        det.fit(fed.shards.client(i).numpy())
        det.save(client_dir(run_dir, i))
