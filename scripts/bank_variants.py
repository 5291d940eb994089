"""Write the bank data variants of the bank investigation (issue #33 item 4) as own-data files.

Each variant is a train file, a test file and a schema (the bank preset's, with ``test.split =
"file"``) in ``OUT/<variant>/``, so that a variant runs through the ordinary own-data path:

    python scripts/bank_variants.py --data-dir ../shared/data --out results/bank_variants
    fedgca run --data results/bank_variants/overlap/train.csv --schema results/bank_variants/overlap/schema.json \\
        --clients 20 --k 10 --rho 0.1 --method gca

Variants (A = 5,289 anomalies, file order = bank-full.csv's row order):

* ``spec``: SPEC §4's balanced tail, written out as files (train = normals but the last A, test =
  the last A normals + all anomalies) — the check that the file route equals ``--dataset bank``;
* ``overlap``: train = every normal row; test = SPEC's test set, so the test normals were trained on;
* ``overlap-known-job``: as ``overlap`` without the rows whose job is "unknown" (254 normals);
* ``tail-both-half``: SPEC's balanced tail taken from both classes, with unlabeled training: test =
  the last A/2 anomalies and the last A/2 normals in file order; train = every other row, anomalies
  included (relabelled normal, as a pipeline that ignores the label would use them);
* ``tail-both``: as ``tail-both-half`` with a test of 2,760 + 2,760 rows, the size that makes the
  training set give the paper's U = 3,960;
* ``tail-both-normals`` (control): ``tail-both``'s test set, trained on the normals only (those not
  in the test) — tells the contamination's effect from the test set's;
* ``random-both`` (control): as ``tail-both`` with a random test draw (2,760 normals
  and 2,760 anomalies, generator seed 0) instead of the file's tail — tells whether file order matters;
* ``temporal-500``: a temporal split (the file is in call-date order): test = the last 500 rows,
  both classes as they come; train = the normals before them;
* ``temporal-5500``: test = the last 5,500 rows; train = every row before them, unlabeled
  (anomalies included, relabelled normal);
* ``temporal-5500-normals`` (control): ``temporal-5500``'s test, trained on the normals before it.

The script prints, per variant, the training rows N, U = Σ⌊ρ N_i⌋ for the IID partition at C = 20,
ρ = 0.1 (SPEC §4), the test composition, and where the files went. Nothing here reads the
paper's tables; the U formula is SPEC's. The files are derived data: keep them out of the repo.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from fedgca.data import iid_partition
from fedgca.data.download import resolve_data_dir
from fedgca.data.presets import schema as preset_schema
from fedgca.protocol.gca import upload_size

CLIENTS, RHO = 20, 0.1  # the bank preset (SPEC §4)
EXACT_HALF = 2_760  # tail-both: 45,211 − 2·2,760 = 39,691 rows → U = 3,960
RANDOM_SEED = 0  # random-both's test draw (fixed: the files are the variant, the run seed varies)


def upload_total(n: int, clients: int = CLIENTS, rho: float = RHO) -> int:
    """U = Σ_i ⌊ρ N_i⌋ over the IID partition's C shards (SPEC §4), with fedgca's own partition and upload rule."""
    return sum(upload_size(len(shard), rho) for shard in iid_partition(n, clients, seed=0))


def variants(frame: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """{name: (train rows, test rows)} in file order; labels as in the file unless relabelled."""
    normal = frame.index[frame.y == "no"]
    anomaly = frame.index[frame.y == "yes"]
    a = len(anomaly)
    tail = normal[-a:]
    out = {}
    out["spec"] = (frame.loc[normal[:-a]], frame.loc[tail.union(anomaly)])
    out["overlap"] = (frame.loc[normal], frame.loc[tail.union(anomaly)])
    known = normal[frame.loc[normal, "job"] != "unknown"]
    out["overlap-known-job"] = (frame.loc[known], frame.loc[tail.union(anomaly)])
    for name, half in (("tail-both-half", a // 2), ("tail-both", EXACT_HALF)):
        test = normal[-half:].union(anomaly[-half:])
        train = frame.drop(index=test).copy()
        train["y"] = "no"  # the label is ignored in training: every row is a training row
        out[name] = (train, frame.loc[test])
    # controls, to tell the contamination from the test set's composition
    test = normal[-EXACT_HALF:].union(anomaly[-EXACT_HALF:])
    out["tail-both-normals"] = (frame.loc[normal.difference(test)], frame.loc[test])
    rng = np.random.default_rng(RANDOM_SEED)
    test = pd.Index(np.sort(np.concatenate([rng.choice(normal, EXACT_HALF, replace=False),
                                            rng.choice(anomaly, EXACT_HALF, replace=False)])))
    train = frame.drop(index=test).copy()
    train["y"] = "no"
    out["random-both"] = (train, frame.loc[test])
    # temporal splits: the file is in call-date order (May 2008 – Nov 2010); the test set is its last rows
    for name, rows, unlabeled in (("temporal-500", 500, False), ("temporal-5500", 5_500, True),
                                  ("temporal-5500-normals", 5_500, False)):
        test = frame.index[-rows:]
        train = frame.drop(index=test)
        if unlabeled:
            train = train.copy()
            train["y"] = "no"
        else:
            train = train[train.y == "no"]
        out[name] = (train, frame.loc[test])
    return out


def write(out: Path, name: str, train: pd.DataFrame, test: pd.DataFrame) -> dict:
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    # the preset's CSV layout (`;`, header) so that the preset schema reads them unchanged
    train.to_csv(d / "train.csv", sep=";", index=False)
    test.to_csv(d / "test.csv", sep=";", index=False)
    schema = preset_schema("bank").with_test("file", "test.csv")
    (d / "schema.json").write_text(json.dumps(schema.to_dict(), indent=2) + "\n")
    n = len(train)
    return {"variant": name, "train_rows": n, "U": upload_total(n), "test_normals": int((test.y == "no").sum()), "test_anomalies": int((test.y == "yes").sum())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--data-dir", default=None, help="the directory holding bank/bank-full.csv")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", nargs="+", metavar="VARIANT", help="write only these variants")
    args = ap.parse_args(argv)
    src = resolve_data_dir(args.data_dir) / "bank" / "bank-full.csv"
    frame = pd.read_csv(src, sep=";", dtype=str, keep_default_na=False)
    labels = frame.y.copy()
    print(f"{'variant':20} {'train rows':>10} {'of them anomalies':>17} {'U':>6} {'test normals':>12} "
          f"{'test anomalies':>14}")
    for name, (train, test) in variants(frame).items():
        if args.only and name not in args.only:
            continue
        row = write(args.out, name, train, test)
        contaminated = int((labels.loc[train.index] == "yes").sum())
        print(f"{name:20} {row['train_rows']:>10,} {contaminated:>17,} {row['U']:>6,} {row['test_normals']:>12,} "
              f"{row['test_anomalies']:>14,}")
    print(f"files in {args.out}/<variant>/ (train.csv, test.csv, schema.json)")


if __name__ == "__main__":
    main()
