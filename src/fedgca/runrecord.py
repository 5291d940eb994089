"""One run record for both drivers: the metric rows and summary.json.

The in-process simulator (``fedgca.simulation.runner``) and the Flower
ServerApp (``fedgca.flower.server``) build every metrics.csv row with
``metric_row`` and every summary with ``summary``; the files are written by
``fedgca.rundir``. A Flower federation and the simulator on the same config
therefore write byte-identical metrics.csv (tested).
"""
from __future__ import annotations

import math

import numpy as np

from fedgca import privacy
from fedgca.evaluation.metrics import mean_error
from fedgca.evaluation.selection import DETECTION, METRIC_KEYS, protocol_results
from fedgca.protocol import secagg
from fedgca.provenance import code_version


def metric_row(r: int, phase: str, epoch: int, per_client: dict[str, list], *, paper_phase: str,
               client_ids: list[int] | None = None, summed: bool = False) -> dict:
    """One evaluation: means over clients of each client's figures (``per_client[key]`` lists, client order).
    ``summed`` (a secure method): the means the server reads from the clients' summed row vectors
    (``summed_metric_row``), computed here from the same vectors; the per-client figures stay the experimenter's."""
    ids = {"client_id": list(client_ids)} if client_ids is not None else {}
    per = {"per_client": {**ids, **{k: [float(v) for v in per_client[k]] for k in DETECTION}}}
    if summed:
        n = len(per_client[DETECTION[0]])
        values = [{k: _nth(per_client[k], i) for k in METRIC_KEYS} for i in range(n)]
        part = row_part(phase, epoch)
        sums = secagg.secure_sum((part,), [{part.name: row_contribution(v)} for v in values], [None] * n,
                                 secagg.SecAggSettings())
        return {**summed_metric_row(r, phase, epoch, sums[part.name], paper_phase=paper_phase), **per}
    return {
        "round": r + 1, "phase": phase, "epoch": epoch + 1 if epoch >= 0 else "",
        **{k: float(np.mean(np.asarray(per_client[k], dtype=np.float64))) for k in DETECTION},
        **{k: mean_error(per_client[k]) for k in ("train_error", "val_error")},
        "paper": int(phase == paper_phase),
        **per,
    }


def _nth(values: list, i: int) -> float:
    return float(values[i] if len(values) > 1 else values[0])  # a one-value list: the same for every client


def row_part(phase: str, epoch: int) -> secagg.Part:
    """A metric row's part of a secure evaluation vector: the row's figures (METRIC_KEYS) with finite flags."""
    return secagg.Part(f"row/{phase}/{epoch}", len(METRIC_KEYS), exact=True, scale=secagg.METRIC_SCALE, flags=True)


def row_contribution(metrics: dict) -> secagg.Contribution:
    return secagg.Contribution(np.array([float(metrics[k]) for k in METRIC_KEYS]))


def summed_metric_row(r: int, phase: str, epoch: int, summed: secagg.Summed, *, paper_phase: str) -> dict:
    """A metric row from a secure sum: each figure's mean over the clients that sent the row (NaN where one's
    figure was not finite, as the plain row's mean)."""
    means = dict(zip(METRIC_KEYS, summed.mean.tolist()))
    return {"round": r + 1, "phase": phase, "epoch": epoch + 1 if epoch >= 0 else "",
            **{k: float(means[k]) for k in METRIC_KEYS}, "paper": int(phase == paper_phase)}


def client_sites(cfg, dataset) -> list[str] | None:
    """The site behind each client of a natural partition, in client order (after ``--small-sites``); else None."""
    if cfg.partition != "natural" or dataset.site_names is None:
        return None
    return list(dataset.natural(cfg.batch_size, cfg.small_sites)[1])


def data_record(cfg, dataset) -> dict:
    """summary.json's ``data`` block, the same from both drivers: which files, how the test set was made (its rows:
    test_rows.csv), the sites behind the clients, what was dropped, and what was defaulted or imputed for data
    without a preset. No paths."""
    info = dataset.info
    keep = ("files", "test_set", "n_train", "n_test", "n_anomalies", "n_test_normals", "dropped_columns",
            "schema_digest", "digest", "imputed_training_cells", "imputed_test_cells", "defaulted", "dropped_sites")
    rec = {k: info[k] for k in keep if k in info}
    if "test_rows" in info:
        rec["test_rows"] = {"file": "test_rows.csv", "count": int(len(info["test_rows"])),
                            "of": info.get("test_rows_from", "the data")}
    sites = client_sites(cfg, dataset)
    if sites is not None:
        rec["client_sites"] = sites
    return rec


def test_rows_text(dataset) -> str | None:
    """test_rows.csv: which rows of the data made the test set (None when the dataset has no such record)."""
    rows = dataset.info.get("test_rows")
    return None if rows is None else "row\n" + "".join(f"{int(i)}\n" for i in rows)


def per_round(values: list):
    """A per-round figure: the value if every round had the same, else the mean."""
    values = list(values) or [0]
    return values[0] if len(set(values)) == 1 else float(np.mean(values))


def summary(cfg, *, clients: int, input_shape, latent_dim: int, param_count: int, client_sizes: list[int],
            rows: list[dict], comm: list[dict], wall: float, has_validation: bool, extra: dict | None = None) -> dict:
    """summary.json: the run's identity, its communication, and metrics under each reporting protocol."""
    s = {
        "dataset": cfg.dataset, "method": cfg.method, "seed": cfg.seed, "rounds": cfg.rounds, "clients": clients,
        "k": cfg.k, "rho": cfg.rho, "backend": cfg.backend, "weights": cfg.weights, "partition": cfg.partition,
        # the reporting-protocol options a table must not pool across (the paper's: 0, train-quantile, global, keep)
        "val_fraction": cfg.val_fraction, "threshold": cfg.threshold, "baseline_eval": cfg.baseline_eval,
        "optimizer_state": cfg.optimizer_state,
        "input_dim": int(math.prod(input_shape)), "input_shape": list(input_shape),
        "latent_dim": int(latent_dim), "param_count": int(param_count),
        "client_sizes": [int(n) for n in client_sizes],
        "uploads_per_round": per_round(c["uploads"] for c in comm),
        "bytes_up_per_round": per_round(c["bytes_up"] for c in comm),
        "bytes_down_per_round": per_round(c["bytes_down"] for c in comm),
        "bytes_total": int(sum(c["bytes_up"] + c["bytes_down"] for c in comm)),
        "wall_seconds": round(wall, 3),
        "code": code_version(),  # what the finishing process loaded (a resumed run may have started on another)
    }
    if rows:
        s.update(protocol_results(rows, has_validation))
        local = [r for r in rows if r["phase"] == "local-epoch"]
        if local:  # --eval-local-epochs: per local epoch e, the best accuracy of the local models over the rounds
            s["local_epoch_peak_accuracy"] = {str(e): max(r["accuracy"] for r in local if r["epoch"] == e)
                                              for e in sorted({r["epoch"] for r in local})}
    record_dp = privacy.accounting(cfg, client_sizes)
    if record_dp is not None:
        s["dp"] = record_dp
    s.update(extra or {})
    return s
