"""Defaults for data without a preset (own data, the bench's files), chosen by measurement on 25 ADBench files
(docs/results/adbench): C from the size, B, R, epochs per round, the validation share and threshold, K, ρ."""
from __future__ import annotations

from typing import Any

from fedgca.lazyimport import LazyModule

pd = LazyModule("pandas")


def upload_fraction(n_train: int) -> float:
    """ρ for data without a preset: 1,500 codes per round in all, within [0.1, 0.5].

    The paper's presets follow it: academic (780 training normals) 0.5, magic (5,640) 0.25 (the
    rule gives 0.27), adult (24,600), bank (34,633) and credit 0.1.
    """
    return round(min(0.5, max(0.1, 1500 / max(n_train, 1))), 2)


# Chosen by measurement on the 25 shared ADBench files (scripts/adbench_defaults_screen.py, docs/results/adbench):
# the paper's presets are for reproducing its tables; these are for a stranger's file.
DEFAULT_CLIENTS = 10  # IID / Dirichlet: at most the paper's smallest federation (academic, magic) ...
MIN_CLIENT_ROWS = 100  # ... and no fewer than this many training normals per client on average, C ≥ 2
DEFAULT_K = 10  # the paper's K* on four of its seven datasets
DEFAULT_VAL_FRACTION = 0.2  # each client's normals held out: the selected round and the threshold come from them
DEFAULT_ROUNDS = 20  # evaluation points for the selection; selected rounds sit across the range (the study)
STEPS_PER_ROUND = 100  # optimizer steps per client per round: epochs per round = STEPS·B / n_i within [1, 10]
# GCA: the baselines' reconstruction epochs, and one alignment epoch per round. The paper splits one budget 5 + 5;
# on the 25 files that halved GCA's reconstruction and lost to Single-Client on 10 of 24; with the full
# reconstruction budget and 5 alignment epochs it still lost (annthyroid, landsat: the alignment itself cost
# AUROC there); one alignment epoch kept GCA's wins and turned 3 of those losses into ties (docs/results/adbench).
GCA_ALIGN_EPOCHS = 1
MIN_TRAIN_ROWS = 10  # a client needs at least this many training rows (or one batch, if smaller)
MAX_BATCH = 50  # SPEC's B, or a client's whole training shard when it holds fewer rows


def sites_below(cfg) -> int | None:
    """The training normals a site needs to be kept under the per-site split: B when a run's config (a RunConfig,
    resolved or not) asks to drop small sites (the natural partition, ``--small-sites drop``), else None (a small
    site is an error)."""
    if cfg.partition == "natural" and cfg.small_sites == "drop":
        return int(cfg.batch_size or MAX_BATCH)
    return None


def default_clients(n_train: int) -> int:
    """C without a preset or sites: 10, fewer when clients would hold under MIN_CLIENT_ROWS rows, at least 2."""
    return int(min(DEFAULT_CLIENTS, max(2, n_train // MIN_CLIENT_ROWS)))


def client_train_rows(n_train: int, clients: int, val_fraction: float) -> int:
    """The training rows of the smallest IID client: ⌊N/C⌋ less its validation share (``split_validation``'s floor)."""
    shard = n_train // clients
    return shard - int(shard * val_fraction)


def max_clients(n_train: int, val_fraction: float, min_rows: int = 1) -> int:
    """The largest C at which every IID client keeps ``min_rows`` training rows after its validation share."""
    c = max(1, n_train // max(min_rows, 1))  # a shard needs min_rows before its validation share is taken
    while c > 1 and client_train_rows(n_train, c, val_fraction) < min_rows:
        c -= 1
    return int(c)


def epochs_per_round(client_rows: float, batch_size: int) -> int:
    """Local epochs per round from a client's training rows: about STEPS_PER_ROUND steps, within [1, 10] (10 =
    SPEC's budget, the most any client gets: a 48-row client is not trained 1,000 epochs at R = 100)."""
    return int(min(10, max(1, round(STEPS_PER_ROUND * batch_size / max(client_rows, 1)))))


def own_defaults(n_train: int, n_sites: int | None, partition: str, given: dict | None = None) -> dict[str, Any]:
    """Every run option data without a preset defaults from the data; ``given``: the options the user set
    (what is derived follows them: the epochs follow --clients, the threshold --val-fraction).

    C from the partition (the sites under ``natural``, else :func:`default_clients`), K, ρ from the size
    (:func:`upload_fraction`), a validation share with the model and threshold chosen on it, R, and the
    epochs per round and batch from a client's rows. The model is SPEC §3's MLP.
    """
    given = {k: v for k, v in (given or {}).items() if v is not None}
    out: dict[str, Any] = {}
    clients = given.get("clients") or (n_sites if partition == "natural" and n_sites else default_clients(n_train))
    val = given.get("val_fraction", DEFAULT_VAL_FRACTION)
    rows = client_train_rows(n_train, clients, val)  # under a skewed partition: the mean client's
    # natural partition: SPEC's B (sites smaller than a batch are the --small-sites rule's to handle)
    batch = given.get("batch_size") or (MAX_BATCH if partition == "natural" else max(1, min(MAX_BATCH, rows)))
    epochs = epochs_per_round(rows, batch)
    out.update(clients=int(clients), k=DEFAULT_K, rho=upload_fraction(n_train), val_fraction=val,
               threshold="val-quantile" if val > 0 else "train-quantile", rounds=DEFAULT_ROUNDS, batch_size=batch,
               local_epochs=epochs, recon_epochs=epochs, align_epochs=GCA_ALIGN_EPOCHS,
               eval_recon_epochs=False)  # the selection is per round: the paper's per-epoch points serve its peak
    return {k: v for k, v in out.items() if k not in given}
