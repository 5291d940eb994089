"""The screen that chose fedgca's own-data defaults (issue #40), on the 25 shared ADBench files.

Every configuration is run through the public API (``fedgca.run``) with explicit options, seed 100, IID,
a 0.2 validation share of each client's normals, the threshold and the reported model from it (the
honest "selected" point): corr filter 0.6 vs off, and the training length per round as a target number of
optimizer steps S per client (epochs e = clamp(round(S·B / n_i), 1, 10)). Results: one JSON line per run.

    .venv/bin/python scripts/adbench_defaults_screen.py ../shared/data/adbench OUT.jsonl [--workers 2]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import time
from pathlib import Path

CONFIGS = {  # name: (corr_threshold, steps per round S, rounds R)
    "corr0.6-S100": (0.6, 100, 20),
    "off-S100": (1.0, 100, 20),
    "off-S25": (1.0, 25, 20),
    "off-S400": (1.0, 400, 20),
}
METHODS = ("centralized", "gca")


def job(args):
    path, method, name = args
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import fedgca
    from fedgca.data.readers import array_schema

    corr, steps, rounds = CONFIGS[name]
    with np.load(path) as d:
        X, y = d["X"], d["y"]
    n_train = int((y == 0).sum() - (y == 1).sum())
    clients = min(10, max(2, n_train // 100))
    n_i = int(n_train / clients * 0.8)
    batch = min(50, n_i)
    e = min(10, max(1, round(steps * batch / n_i)))
    opts = dict(rounds=rounds, val_fraction=0.2, threshold="val-quantile", clients=clients, batch_size=batch)
    if method == "gca":
        opts.update(recon_epochs=max(1, e // 2), align_epochs=max(1, e - e // 2))
    else:
        opts.update(local_epochs=e)
    src = fedgca.load_data((X, y), schema=dataclasses.replace(array_schema(X.shape[1]), corr_threshold=corr),
                           name=Path(path).stem)
    t = time.time()
    try:
        s = fedgca.run(src, method, **opts).summary
    except Exception as err:  # noqa: BLE001 — a screen records failures
        return {"file": Path(path).stem, "method": method, "config": name, "error": str(err)}
    return {"file": Path(path).stem, "method": method, "config": name, "clients": clients, "batch": batch, "epochs": e,
            "selected_auroc": s["selected"]["auroc"], "final_auroc": s["final"]["auroc"],
            "selected_auprc": s["selected"]["auprc"], "selected_round": s["selected"]["round"],
            "first_round_auroc": None, "dropped": len(s["data"]["dropped_columns"]), "seconds": round(time.time() - t, 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("out")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    files = sorted(Path(a.data_dir).glob("*.npz"), key=lambda f: int(f.name.split("_")[0]))
    done = set()
    if Path(a.out).exists():
        for line in Path(a.out).read_text().splitlines():
            r = json.loads(line)
            done.add((r["file"], r["method"], r["config"]))
    jobs = [(str(f), m, c) for c in CONFIGS for f in files for m in METHODS if (f.stem, m, c) not in done]
    with mp.get_context("spawn").Pool(a.workers, maxtasksperchild=1) as pool, open(a.out, "a") as out:
        for r in pool.imap_unordered(job, jobs):
            out.write(json.dumps(r) + "\n")
            out.flush()
            print(r, flush=True)


if __name__ == "__main__":
    main()
