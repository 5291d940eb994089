"""Timing of the SPEC §6 attacks at preset sizes (academic-shaped: dx = 22, dz = 16, U = 390).

    .venv/bin/python benchmarks/bench_attacks.py [--threads N] [--seed 100]

Times one 100-start inversion (preset lr 1e-2, ≤ 1000 steps, patience 10,
rel_tol 1e-3) against a randomly initialised and a quickly trained TabularAE
with input_dim 22, and one ``train_surrogate`` on 390 random 16-dim codes
(preset: Adam 1e-2, batch 50, ≤ 1000 epochs, patience 20), then the
100-start inversion of that surrogate. Prints a table of seconds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fedgca.attacks.flipping import flipped_loss, train_surrogate
from fedgca.attacks.inversion import invert_model
from fedgca.models import TabularAE


def quickly_trained(dx: int, seed: int, rows: int = 2000, epochs: int = 20) -> TabularAE:
    """A TabularAE fitted for a few epochs on low-rank synthetic data (batch 50, Adam 1e-3)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 4, generator=gen) @ torch.randn(4, dx, generator=gen) + 0.1 * torch.randn(rows, dx, generator=gen)
    torch.manual_seed(seed)
    model = TabularAE(dx)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        for idx in torch.randperm(rows, generator=gen).split(50):
            opt.zero_grad()
            ((model(x[idx]) - x[idx]) ** 2).sum(1).mean().backward()
            opt.step()
    return model.eval()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dx, dz, m = 22, 16, 390
    rows = []

    torch.manual_seed(args.seed)
    res, sec = timed(lambda: invert_model(TabularAE(dx).eval(), (dx,), seed=args.seed))
    rows.append(("inversion, random-init AE (100 starts)", sec, f"steps mean {res.steps.float().mean():.0f} max {res.steps.max()}"))

    model, sec_train = timed(lambda: quickly_trained(dx, args.seed))
    rows.append(("  (fitting the quick AE: 20 epochs x 2000 rows)", sec_train, ""))
    res, sec = timed(lambda: invert_model(model, (dx,), seed=args.seed))
    rows.append(("inversion, quickly trained AE (100 starts)", sec, f"steps mean {res.steps.float().mean():.0f} max {res.steps.max()}"))

    codes = np.random.default_rng(args.seed).normal(size=(m, dz)).astype(np.float32)
    surrogate, sec = timed(lambda: train_surrogate(codes, (dx,), seed=args.seed))
    rows.append((f"train_surrogate ({m} codes x {dz})", sec, f"flipped loss {flipped_loss(surrogate, codes):.3f}, "
                 f"{surrogate.fit_info['epochs']} epochs (best {surrogate.fit_info['best_epoch']})"))
    res, sec = timed(lambda: invert_model(surrogate, (dx,), seed=args.seed))
    rows.append(("inversion, surrogate (100 starts)", sec, f"steps mean {res.steps.float().mean():.0f} max {res.steps.max()}"))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    print(f"{'task':<50} {'seconds':>8}  notes")
    for name, sec, note in rows:
        print(f"{name:<50} {sec:>8.2f}  {note}")


if __name__ == "__main__":
    main()
