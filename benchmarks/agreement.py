"""Run for run agreement of two sets of runs of the same configurations (a CPU and a GPU sweep or bench
directory): the AUROC at the validation-selected round, paired by run key (a run's key leaves out its device).

    python3 benchmarks/agreement.py CPU_DIR GPU_DIR [--tolerance-pp 0.5]

Reads each ``runs/<key>/summary.json`` that is there (a stopped sweep's finished runs); prints how many pairs,
the largest and mean |Δ AUROC| in pp, how many are beyond the tolerance, and exits 1 if any is.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def selected_aurocs(root: Path) -> dict[str, float]:
    out = {}
    for summary in sorted(root.glob("runs/*/summary.json")):
        sel = json.loads(summary.read_text()).get("selected") or {}
        if sel.get("auroc") is not None:
            out[summary.parent.name] = float(sel["auroc"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--tolerance-pp", type=float, default=0.5)
    args = ap.parse_args(argv)
    a, b = selected_aurocs(args.a), selected_aurocs(args.b)
    keys = sorted(a.keys() & b.keys())
    if not keys:
        print(f"agreement: no run finished in both ({len(a)} in {args.a.name}, {len(b)} in {args.b.name})")
        return 1
    diffs = [100 * abs(a[k] - b[k]) for k in keys]
    beyond = sum(d > args.tolerance_pp for d in diffs)
    print(f"agreement: {len(keys)} runs in both; |Δ AUROC| max {max(diffs):.3f} pp, mean {sum(diffs) / len(diffs):.3f} "
          f"pp; {sum(d == 0 for d in diffs)} identical; {beyond} beyond {args.tolerance_pp} pp")
    return 1 if beyond else 0


if __name__ == "__main__":
    sys.exit(main())
