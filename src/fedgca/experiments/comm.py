"""Communication accounting (SPEC §7): measured from the payloads the protocol code builds.

For one dataset and K the function :func:`measure` builds, for one round with
every client participating,

- the GCA uploads: client i's ⌊ρ·N_i⌋ codes as float32 ``[⌊ρN_i⌋, D_z]``
  arrays (the row count from :func:`fedgca.protocol.gca.upload_size`, D_z the
  width the SPEC §3 model's encoder outputs), checked by the server's
  ``validate_upload``;
- the GCA broadcast: :func:`fedgca.protocol.gca.broadcast_payload` of a
  K-centroid :class:`~fedgca.protocol.clustering.ClusterSummary`, once per client;
- the FL payloads (FedAvg, FedProx, FedNova, DP-FedAvg): the model's parameter
  tensors (its state dict), once up and once down per client,

sums their ``nbytes`` and asserts that the sums equal the SPEC §7 formulas
(GCA up = β U D_z, GCA down = β C K (D_z + 1), FL up = down = β C P, β = 4).
Nothing is trained or encoded beyond one probe input: the size of a payload
does not depend on its values.

Inputs: C and ρ are the dataset presets (or overrides); the client sizes N_i
are those of the IID partition of the training normals (SPEC §4). They come
from the real loader when the dataset's files are present (never downloaded
here), else from :data:`KNOWN_TRAIN`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from fedgca.config import DATASET_PRESETS, K_GRID
from fedgca.devices import to_numpy
from fedgca.tabletext import dicts_csv, markdown

log = logging.getLogger("fedgca")

BETA = 4  # bytes per FP32 value
MIB = 2**20

# Training-normal counts and input shapes (SPEC §4), used only when a dataset's
# raw files are not available to the real loader. They are the documented
# sizes of the published files: credit = 284,315 normal transactions − 492 held
# out for the balanced tail = 283,823 rows of width 29; cifar10 = the 5,000
# training images of the normal class, 3×32×32. The other rows are what the
# loader produces on the files in shared/data (tests check they agree).
KNOWN_TRAIN: dict[str, tuple[int, tuple[int, ...]]] = {
    "academic": (2209 - 1421, (22,)),   # Graduate − Dropout (balanced tail)
    "adult": (24720, (14,)),            # adult.data rows with income <=50K (test = adult.test)
    "bank": (39922 - 5289, (15,)),      # y = no − y = yes
    "magic": (12332 - 6688, (5,)),      # gamma − hadron
    "credit": (284315 - 492, (29,)),    # Class 0 − Class 1
    "fashion_mnist": (6000, (1, 28, 28)),
    "cifar10": (5000, (3, 32, 32)),
}
PARTITION_SEED = 100  # IID shard sizes do not depend on the seed (they differ by at most one)


@dataclass
class Inputs:
    """What a round's payloads depend on."""

    dataset: str
    clients: int
    rho: float
    input_shape: tuple[int, ...]
    client_sizes: list[int]
    source: str  # "loaded" | "documented" | "run"


def dataset_inputs(dataset: str, data_dir=None, *, clients: int | None = None, rho: float | None = None,
                   use_loader: bool = True) -> Inputs:
    """C, ρ and the IID client sizes for ``dataset`` (real files when present, else :data:`KNOWN_TRAIN`)."""
    from fedgca.data import DataError, iid_partition, load_dataset

    if dataset not in DATASET_PRESETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {', '.join(DATASET_PRESETS)}")
    preset = DATASET_PRESETS[dataset]
    c = clients if clients is not None else preset["clients"]
    r = rho if rho is not None else preset["rho"]
    n, shape = KNOWN_TRAIN[dataset]
    source = "documented"
    if use_loader:
        try:
            ds = load_dataset(dataset, data_dir, seed=PARTITION_SEED, download=False)
            n, shape, source = len(ds.train), tuple(ds.input_shape), "loaded"
            if (n, shape) != KNOWN_TRAIN[dataset]:
                log.warning("%s: loader gives %d training normals of shape %s (documented: %d, %s); using the loader's",
                            dataset, n, shape, *KNOWN_TRAIN[dataset])
        except DataError as err:
            log.debug("%s: files not available (%s); using the documented sizes", dataset, err)
    parts = iid_partition(n, c, PARTITION_SEED)
    return Inputs(dataset, c, r, shape, [len(p) for p in parts], source)


def run_inputs(summary: dict) -> Inputs:
    """Inputs as a finished run recorded them in ``summary.json`` (its own C, ρ and shard sizes)."""
    return Inputs(summary["dataset"], int(summary["clients"]), float(summary["rho"]),
                  tuple(summary.get("input_shape") or KNOWN_TRAIN[summary["dataset"]][1]),
                  [int(n) for n in summary["client_sizes"]], "run")


@torch.no_grad()
def code_width(model, input_shape) -> int:
    """D_z as the encoder actually produces it (one probe input), checked against ``latent_dim``."""
    model.eval()
    dz = int(model.encoder(torch.zeros((1, *input_shape))).reshape(1, -1).shape[1])
    _agree(dz == int(model.latent_dim), f"encoder output width {dz} != latent_dim {model.latent_dim}")
    return dz


def _agree(ok: bool, message: str) -> None:
    """The measured payloads must agree with SPEC §7 (a real check, not an ``assert`` that -O removes)."""
    if not ok:
        raise RuntimeError(f"communication accounting: {message}")


def measure(inp: Inputs, ks=K_GRID, seed: int = PARTITION_SEED) -> list[dict]:
    """One row per K: the measured per-round bytes and MiB, asserted against the SPEC §7 formulas."""
    from fedgca.models import build_model, param_count
    from fedgca.protocol import gca
    from fedgca.protocol.clustering import ClusterSummary

    torch.manual_seed(seed)
    model = build_model(inp.input_shape)
    dz, p = code_width(model, inp.input_shape), int(param_count(model))

    # GCA up: each client's ⌊ρN_i⌋ codes (float32 [⌊ρN_i⌋, D_z]), as the server receives and validates them.
    # Values do not change sizes, so no encoder pass over the data is needed (nothing is trained either).
    uploads = [
        gca.validate_upload(np.zeros((gca.upload_size(n_i, inp.rho), dz), np.float32),
                            max_rows=gca.upload_size(n_i, inp.rho), latent_dim=dz)
        for n_i in inp.client_sizes
    ]
    u = sum(len(z) for z in uploads)
    up = sum(z.nbytes for z in uploads)

    # FL: the parameter tensors, up and down, once per client.
    client_params = {k: to_numpy(v) for k, v in model.state_dict().items()}  # θ_i, sent up
    global_params = {k: v.copy() for k, v in client_params.items()}  # θ^(r+1), sent down
    fl_up = sum(sum(a.nbytes for a in client_params.values()) for _ in range(inp.clients))
    fl_down = sum(sum(a.nbytes for a in global_params.values()) for _ in range(inp.clients))

    _agree(up == BETA * u * dz, f"GCA upload {up} B != 4·U·D_z = 4·{u}·{dz}")
    _agree(fl_up == fl_down == BETA * inp.clients * p, f"FL payload {fl_up} B != 4·C·P = 4·{inp.clients}·{p}")
    if len(inp.input_shape) == 1:
        _agree(p == 513 * inp.input_shape[0] + 35_472, f"tabular P = {p} != 513·dx + 35,472")

    rows = []
    for k in ks:
        payload = gca.broadcast_payload(ClusterSummary(np.zeros((k, dz), np.float32), np.ones(k, np.float32)))
        down = sum(sum(a.nbytes for a in payload.values()) for _ in range(inp.clients))
        _agree(down == BETA * inp.clients * k * (dz + 1), f"GCA broadcast {down} B != 4·C·K·(D_z+1) at K={k}")
        gca_total, fl_total = up + down, fl_up + fl_down
        rows.append({
            "dataset": inp.dataset, "k": int(k), "C": inp.clients, "U": int(u), "D_z": dz, "P": p,
            "gca_up_mib": up / MIB, "gca_down_mib": down / MIB, "gca_total_mib": gca_total / MIB,
            "fl_total_mib": fl_total / MIB, "reduction": 1 - gca_total / fl_total,
        })
    return rows


def comm_table(datasets=None, ks=K_GRID, data_dir=None, use_loader: bool = True) -> tuple[list[dict], dict]:
    """Rows for every dataset and K, and each dataset's :class:`Inputs` source ("loaded"/"documented")."""
    datasets = list(datasets or DATASET_PRESETS)
    rows, sources = [], {}
    for name in datasets:
        inp = dataset_inputs(name, data_dir, use_loader=use_loader)
        sources[name] = inp.source
        rows.extend(measure(inp, ks))
    return rows, sources


# --------------------------------------------------------------------------- rendering

INPUT_COLUMNS = ("C", "U", "D_z", "P")
MIB_COLUMNS = ("gca_up_mib", "gca_down_mib", "gca_total_mib", "fl_total_mib", "reduction")
HEADERS = {"gca_up_mib": "GCA up (MiB)", "gca_down_mib": "GCA down (MiB)", "gca_total_mib": "GCA total (MiB)",
           "fl_total_mib": "FL total (MiB)", "reduction": "reduction"}


def input_rows(rows: list[dict]) -> list[dict]:
    seen = {}
    for r in rows:
        seen.setdefault(r["dataset"], {c: r[c] for c in ("dataset", *INPUT_COLUMNS)})
    return list(seen.values())


def fmt_value(col: str, v) -> str:
    if col == "reduction":
        return f"{100 * v:.2f}%"
    if col.endswith("_mib"):
        return f"{v:.3f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def grids(rows: list[dict]) -> tuple[tuple[list, list], tuple[list, list]]:
    """(head, body) of the inputs table and of the per-round MiB table, as strings."""
    ih = ["dataset", *INPUT_COLUMNS]
    ib = [[r["dataset"], *(fmt_value(c, r[c]) for c in INPUT_COLUMNS)] for r in input_rows(rows)]
    mh = ["dataset", "K", *(HEADERS[c] for c in MIB_COLUMNS)]
    mb = [[r["dataset"], str(r["k"]), *(fmt_value(c, r[c]) for c in MIB_COLUMNS)] for r in rows]
    return (ih, ib), (mh, mb)


def render(rows: list[dict], fmt: str = "md", sources: dict | None = None) -> str:
    import json

    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        return dicts_csv(rows, ["dataset", "k", *INPUT_COLUMNS, *MIB_COLUMNS])
    if fmt != "md":
        raise ValueError("--format must be md, csv or json")
    (ih, ib), (mh, mb) = grids(rows)
    note = ""
    if sources:
        loaded = [d for d, src in sources.items() if src == "loaded"]
        doc = [d for d, src in sources.items() if src == "documented"]
        note = "N_i: the IID partition of each dataset's training normals"
        note += f"; loaded from the files for {', '.join(loaded)}" if loaded else ""
        note += f"; documented sizes (files not found) for {', '.join(doc)}" if doc else ""
        note += ".\n"
    return (
        "### Communication inputs (C clients, U codes uploaded per round, latent D_z, model parameters P)\n\n"
        + markdown(ih, ib) + "\n" + note + "\n"
        "### Per-round communication (MiB = 2^20 bytes, FP32), measured from the built payloads; "
        "GCA up = 4·U·D_z, down = 4·C·K·(D_z+1); FL (FedAvg/FedProx/FedNova/DP-FedAvg) up = down = 4·C·P; "
        "reduction = 1 − GCA total / FL total\n\n" + markdown(mh, mb)
    )


def mib(nbytes: float) -> float:
    return nbytes / MIB


def formula_bytes(u: int, dz: int, c: int, k: int, p: int) -> dict:
    """SPEC §7 per-round bytes (for cross-checks)."""
    return {"gca_up": BETA * u * dz, "gca_down": BETA * c * k * (dz + 1), "fl_up": BETA * c * p,
            "fl_down": BETA * c * p}


__all__ = ["KNOWN_TRAIN", "Inputs", "comm_table", "dataset_inputs", "formula_bytes", "measure", "render", "run_inputs"]
