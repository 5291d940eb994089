"""The work a sweep or bench directory holds: rounds its runs completed, as the protocol FLOPs those rounds cost
(``experiments.cost``), so that runs stopped at a time limit compare as a rate — a stacked engine finishes its
runs together at the end, and a window's count of finished runs would miss everything it did.

    python3 benchmarks/window_work.py DIR SECONDS [DIR SECONDS ...] [--data-dir D] [--bench FILES_DIR]

A round counts once its ``round`` row is in the run's metrics.csv (written with the round's checkpoint); GCA's
reconstruction epochs of the round under way count too (each its training and its evaluation), since a large run
completes few rounds in a window. A bench directory's runs are priced on the bench's files (``--bench``: the folder
its plan read). One line per directory:
rounds, finished runs, TFLOP, GFLOP/s over SECONDS, and the datasets the rounds came from.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import Counter
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.data.source import source_for
from fedgca.experiments import cost, sweep


def progress(run: Path) -> tuple[int, int]:
    """Rounds completed, and reconstruction epochs of the round under way."""
    rounds = epochs = 0
    try:
        with open(run / "metrics.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row.get("phase") == "round":
                    rounds, epochs = rounds + 1, 0
                elif row.get("phase") == "recon":
                    epochs += 1
    except OSError:
        pass
    return rounds, epochs


def work(root: Path, data_dir, sources) -> dict:
    configs = [RunConfig.from_dict(e["config"]) for e in json.loads((root / sweep.SPEC_FILE).read_text())]
    did, rounds, by_data = 0.0, 0, Counter()
    for cfg in configs:
        n, epochs = progress(sweep.run_dir(root, cfg))
        if not n and not epochs:
            continue
        parts = cost.round_parts(cfg, cost.sizes(cfg, source_for(cfg.dataset, data_dir, sources)))
        r = cfg.resolved()
        per_epoch = (parts["recon"] + parts["eval"] / (r.recon_epochs + 1)) / r.recon_epochs if epochs else 0.0
        did += n * sum(parts.values()) + epochs * per_epoch
        rounds += n
        by_data[cfg.dataset] += n
    finished = sum(1 for line in open(root / "ledger.jsonl") if '"event": "finished"' in line) \
        if (root / "ledger.jsonl").exists() else 0
    return {"runs": len(configs), "rounds": rounds, "finished": finished, "flops": did, "by_data": by_data}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="DIR SECONDS ...")
    ap.add_argument("--data-dir", default=os.environ.get("FEDGCA_DATA_DIR", "../shared/data"))
    ap.add_argument("--bench", type=Path, help="the bench's files (for a bench directory's runs)")
    a = ap.parse_args(argv)
    if len(a.pairs) % 2:
        ap.error("give DIR SECONDS pairs")
    sources = None
    if a.bench:
        from fedgca.experiments import bench

        sources = bench.plan([a.bench]).sources
    for d, secs in zip(a.pairs[::2], a.pairs[1::2]):
        w = work(Path(d), a.data_dir, sources)
        data = ", ".join(f"{k} {v}" for k, v in w["by_data"].most_common() if v)
        print(f"{Path(d).name}: {w['rounds']} rounds of {w['runs']} runs, {w['finished']} runs finished; "
              f"{w['flops'] / 1e12:.3f} TFLOP in {float(secs):.0f} s = {w['flops'] / float(secs) / 1e9:.2f} "
              f"GFLOP/s ({data or 'no rounds'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
