"""fedgca: federated anomaly detection with autoencoders — GCA (Global Centroid Alignment) and baselines.

The Python API (the CLI is built on the same functions)::

    import fedgca
    data = fedgca.load_data("rows.csv", label="y", normal="no", site="site")   # or a DataFrame, (X, y), .npz
    result = fedgca.run(data, method="gca", partition="natural", rounds=20)
    result.metrics, result.summary, result.detectors[0].predict(new_rows)
    table = fedgca.compare(data, methods=["single", "fedavg", "gca"], rounds=20)

Heavy modules (torch, pandas) are imported when these are first called.
"""
from __future__ import annotations

__version__ = "0.1.0"

_API = {"load_data", "run", "compare", "RunResult"}
_DATA = {"Schema", "DataSource", "infer_schema"}


def __getattr__(name: str):  # PEP 562: `import fedgca` stays cheap (a Flower ClientApp imports it per message)
    if name in _API:
        from fedgca import api

        return getattr(api, name)
    if name in _DATA:
        from fedgca import data

        return getattr(data, name)
    if name == "load_run":
        from fedgca.api import RunResult

        return lambda out: RunResult(__import__("pathlib").Path(out))
    raise AttributeError(f"module 'fedgca' has no attribute {name!r}")


__all__ = sorted(_API | _DATA | {"load_run"})
