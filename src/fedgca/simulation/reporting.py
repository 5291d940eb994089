"""The simulator's summary.json (built by ``fedgca.runrecord``, the record both drivers share)."""
from __future__ import annotations

from fedgca import runrecord
from fedgca.config import RunConfig
from fedgca.models import param_count


def summarise(cfg: RunConfig, fed, method, rows: list[dict], comm: list[dict], wall: float) -> dict:
    extra = {"data": data_record(fed), "device": str(fed.device), **getattr(method, "summary_extra", lambda: {})()}
    return runrecord.summary(
        cfg, clients=cfg.clients, input_shape=fed.dataset.input_shape, latent_dim=fed.latent_dim,
        param_count=param_count(fed.template), client_sizes=fed.shards.sizes, rows=rows, comm=comm, wall=wall,
        has_validation=fed.val_shards is not None, extra=extra)


def data_record(fed) -> dict:
    """summary.json's ``data`` block: which files, how the test set was made (its rows: test_rows.csv),
    the sites behind the clients, and what was defaulted for data without a preset. No paths."""
    info = fed.dataset.info
    keep = ("files", "test_set", "n_train", "n_test", "n_anomalies", "n_test_normals", "dropped_columns",
            "schema_digest", "digest", "imputed_training_cells", "defaulted", "dropped_sites")
    rec = {k: info[k] for k in keep if k in info}
    if "test_rows" in info:
        rec["test_rows"] = {"file": "test_rows.csv", "count": int(len(info["test_rows"])),
                            "of": info.get("test_rows_from", "the data")}
    if fed.cfg.partition == "natural" and fed.dataset.site_names is not None:
        from fedgca.data.partition import natural_partition

        _, names = natural_partition(fed.dataset.sites, fed.dataset.site_names, fed.cfg.batch_size,
                                     fed.cfg.small_sites)
        rec["client_sites"] = names
    return rec
