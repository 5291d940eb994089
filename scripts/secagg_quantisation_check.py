"""Is a secure method's deviation from its plain method the quantisation's bias, or the trajectory's sensitivity?

    .venv/bin/python scripts/secagg_quantisation_check.py --dataset magic --partition dirichlet \\
        --methods secagg-fedavg,secagg-fedprox --seeds 100,200,...,1000 --levels 30 --rounds 20 \\
        --plain results/secagg_tabular_dir/runs.csv results/secagg_tabular_dir_magic/runs.csv \\
        --out docs/results/secagg/quantisation_magic_dirichlet.md

Runs each secure method in the simulator with SecAgg+'s quantisation 2^``levels`` instead of 2^22 (the modulus
widened so that the sum still fits; everything else as ``fedgca compare`` runs it) and sets each run beside its
plain and its default-quantisation run of the same seed (from the sweeps' runs.csv). A quantisation bias shrinks
with a 256× finer step; a trajectory's sensitivity to any last-bit change does not. Also the largest |value| a
client sends, against the clipping range ±8 (a clipped value would be a bias of its own).
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="magic")
    ap.add_argument("--partition", default="dirichlet")
    ap.add_argument("--methods", default="secagg-fedavg,secagg-fedprox")
    ap.add_argument("--seeds", default="100,200,300,400,500,600,700,800,900,1000")
    ap.add_argument("--levels", type=int, default=30, help="quantisation range 2^levels (Flower's default: 22)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--plain", nargs="+", required=True, help="runs.csv of the compare sweeps (plain and secure)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from fedgca import api
    from fedgca.algorithms import secure
    from fedgca.protocol import secagg
    from fedgca.threads import limit_threads

    limit_threads(1)
    fine = dataclasses.replace(secagg.SecAggSettings(max_weight=1.0), quantization_range=2 ** args.levels,
                               modulus_range=2 ** (args.levels + 10))
    secure.secagg.SecAggSettings = lambda max_weight: dataclasses.replace(fine, max_weight=max_weight)
    largest = [0.0]
    vector = secagg.client_vector

    def watched(arrays, w, s):
        largest[0] = max(largest[0], max(float(np.abs(a).max()) for a in arrays))
        return vector(arrays, w, s)

    secagg.client_vector = watched
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.methods.split(","):
            for seed in map(int, args.seeds.split(",")):
                r = api.run(args.dataset, m, out=Path(tmp) / f"{m}-{seed}", data_dir=args.data_dir, seed=seed,
                            rounds=args.rounds, partition=args.partition)
                rows.append({"method": m, "seed": seed, "fine_peak_auroc": r.summary["peak"]["auroc"],
                             "fine_final_auroc": r.summary["final"]["auroc"]})
    fine_runs = pd.DataFrame(rows)
    runs = pd.concat([pd.read_csv(p) for p in args.plain], ignore_index=True)
    runs = runs[(runs.dataset == args.dataset) & (runs.partition == args.partition)]
    lines = [f"# {args.dataset}, {args.partition}: secure − plain with SecAgg+'s quantisation 2^22 and 2^{args.levels}",
             "", f"Seeds {args.seeds}; R = {args.rounds}; AUROC in pp; Δ: mean over seeds, ± its standard error. "
             f"Largest |value| a client sent: {largest[0]:.3f} (clipping range ±8).", "",
             "| secure | metric | Δ 2^22 − plain | Δ 2^%d − plain | Δ 2^%d − 2^22 |" % (args.levels, args.levels),
             "|---|---|---|---|---|"]
    for m in args.methods.split(","):
        base = m.removeprefix("secagg-")
        t = fine_runs[fine_runs.method == m].merge(runs[runs.method == m][["seed", "peak_auroc", "final_auroc"]],
                                                   on="seed").merge(
            runs[runs.method == base][["seed", "peak_auroc", "final_auroc"]], on="seed", suffixes=("_default", "_plain"))
        for metric in ("peak", "final"):
            def cell(a, b):
                d = 100 * (t[a] - t[b])
                return f"{d.mean():+.2f} ± {d.std(ddof=1) / len(d) ** 0.5:.2f} (n = {len(d)})"
            lines.append(f"| {m} | {metric} | {cell(f'{metric}_auroc_default', f'{metric}_auroc_plain')} | "
                         f"{cell(f'fine_{metric}_auroc', f'{metric}_auroc_plain')} | "
                         f"{cell(f'fine_{metric}_auroc', f'{metric}_auroc_default')} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
