"""The ADBench headline over several bench directories: mean AUROC ×100 per column and partition, average rank,
and each fedgca method against the best centralized peer (issue #47's bar), from their bench_runs.csv files.

    .venv/bin/python scripts/adbench_headline.py docs/results/adbench/report/bench_runs.csv \\
        docs/results/adbench/peers_knn_lof/bench_runs.csv docs/results/adbench/site_knn/peer_bench/bench_runs.csv \\
        > docs/results/adbench/headline.md

Used where a bench's methods and its peers were run in separate invocations on the same files, seeds and
partitions (``fedgca bench --methods ''`` fits peers alone on the runs' splits).
"""
from __future__ import annotations

import sys

import pandas as pd

from fedgca.experiments.peers import PEERS as ALL_PEERS

# the centralized peers (the bar: the best of them), then the per-site ones (a site that shares nothing)
PEERS = tuple(sorted((n for n, p in ALL_PEERS.items() if not p.per_site), key=("knn", "lof", "pyod-ae", "iforest",
                                                                                "ecod").index))
SITE_PEERS = tuple(n for n, p in ALL_PEERS.items() if p.per_site)
METHODS = ("centralized", "single", "fedavg", "fedprox", "gca")


def main(paths: list[str]) -> int:
    runs = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    out = []
    for part in ("iid", "dirichlet"):
        table = runs[runs.partition == part].pivot_table(index="file", columns="column", values="auroc",
                                                         aggfunc="mean") * 100
        table = table.dropna()
        cols = [c for c in (*METHODS, *PEERS, *SITE_PEERS) if c in table]
        ranks = table[cols].rank(axis=1, ascending=False).mean()
        best = max((c for c in PEERS if c in table), key=lambda c: table[c].mean())
        out += [f"## {part} ({len(table)} files; seeds: mean over {runs[runs.partition == part].seed.nunique()})", "",
                "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|",
                "| mean AUROC | " + " | ".join(f"{table[c].mean():.2f}" for c in cols) + " |",
                f"| average rank (of {len(cols)}) | " + " | ".join(f"{ranks[c]:.2f}" for c in cols) + " |", "",
                f"Best centralized peer: **{best}** ({table[best].mean():.2f}). Each fedgca method against it "
                "(mean difference; files within 0.5 pp or above):", ""]
        for m in METHODS:
            if m in table:
                d = table[m] - table[best]
                out.append(f"- {m}: {d.mean():+.2f} pp; {(d >= -0.5).sum()} of {len(d)} files")
        for site in (c for c in SITE_PEERS if c in table):
            out += ["", f"Against **{site}** ({table[site].mean():.2f}; the same detector at each site alone, nothing "
                    "shared):", ""]
            out += [f"- {m}: {(table[m] - table[site]).mean():+.2f} pp; {(table[m] - table[site] >= -0.5).sum()} of "
                    f"{len(table)} files" for m in METHODS if m in table]
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
