"""Time one Adam step for C stacked clients: ``StackedAdam`` vs C independent ``torch.optim.Adam``.

``StackedAdam`` updates every client in one call of torch's fused Adam kernel,
each client's slice of each tensor carrying its own step count. The per-client
alternative is what a loop over clients does: one fused ``torch.optim.Adam`` per
client. Two cases:

- equal step counts (IID shards: every client has the same number of batches);
- drifted step counts (non-IID shards: each client has taken a different number of steps).

Prints ms per step for each, the ratio, and whether the updated parameters and
moments are bit-identical. Times are the median over ``--repeat`` steps on ``--threads``
torch threads.

    python benchmarks/bench_adam.py [--datasets magic,adult] [--data-dir DIR]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from fedgca.config import RunConfig
from fedgca.data.source import DataSource
from fedgca.simulation.federation import build_federation
from fedgca.training.stacked import StackedModels


def per_client_adams(stack: StackedModels) -> tuple[list[dict[str, torch.Tensor]], list[torch.optim.Adam]]:
    """Each client's parameters and Adam state as its own tensors and fused ``torch.optim.Adam``."""
    params, optims = [], []
    for i in range(stack.num_clients):
        own = {k: v[i].detach().clone().requires_grad_(True) for k, v in stack.params.items()}
        opt = torch.optim.Adam(list(own.values()), lr=stack.optim.cfg.lr, fused=True)
        for k, p in own.items():
            opt.state[p] = {"step": stack.optim.step_count[k][i].clone(),
                            "exp_avg": stack.optim.exp_avg[k][i].clone(),
                            "exp_avg_sq": stack.optim.exp_avg_sq[k][i].clone()}
        params.append(own)
        optims.append(opt)
    return params, optims


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def bench(dataset: str, data_dir, drifted: bool, repeat: int) -> dict:
    stack = build_federation(RunConfig(dataset=dataset, method="gca").resolved(),
                             DataSource.builtin(dataset, data_dir)).clients
    if drifted:  # client i has taken i more steps than client 0; set through load_state_dict, which
        # re-reads which tensors' counts are uniform (an in-place edit of the counts would leave that stale)
        state = stack.optim.state_dict()
        for steps in state["step"].values():
            steps += torch.arange(stack.num_clients, dtype=steps.dtype)
        stack.optim.load_state_dict(state)
    params, optims = per_client_adams(stack)
    gen = torch.Generator().manual_seed(0)
    grads = {k: torch.randn(v.shape, generator=gen) for k, v in stack.params.items()}
    everyone = list(range(stack.num_clients))

    def stacked_step():
        stack.optim.step(grads, everyone)

    def per_client_step():
        for i, (own, opt) in enumerate(zip(params, optims)):
            for k, p in own.items():
                p.grad = grads[k][i]
            opt.step()

    stacked_step(), per_client_step()  # one step each, then compare: the same update, bit for bit
    same = all(torch.equal(stack.params[k][i], own[k].detach())
               and torch.equal(stack.optim.exp_avg_sq[k][i], optims[i].state[own[k]]["exp_avg_sq"])
               for i, own in enumerate(params) for k in own)
    return {"dataset": dataset, "case": "drifted" if drifted else "equal", "clients": stack.num_clients,
            "tensors": len(grads), "stacked_ms": median_ms(stacked_step, repeat),
            "per_client_ms": median_ms(per_client_step, repeat), "identical": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="magic,adult")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"Adam step, {args.threads} thread(s), median of {args.repeat}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'dataset':>8} {'steps':>8} {'C':>3} {'tensors':>7} {'stacked ms':>10} {'per-client ms':>13} "
          f"{'ratio':>6}  update")
    for dataset in args.datasets.split(","):
        for drifted in (False, True):
            r = bench(dataset, args.data_dir, drifted, args.repeat)
            print(f"{r['dataset']:>8} {r['case']:>8} {r['clients']:>3} {r['tensors']:>7} {r['stacked_ms']:>10.3f} "
                  f"{r['per_client_ms']:>13.3f} {r['per_client_ms'] / r['stacked_ms']:>5.1f}×  "
                  f"{'identical' if r['identical'] else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
