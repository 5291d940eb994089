"""The batched engine (training.lockstep + experiments.batched_executor): runs whose local epochs are computed as
one stacked computation give exactly the numbers they give alone, write their own run directories and ledger
entries, and resume after a kill."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from fedgca.config import RunConfig
from fedgca.experiments import batched_executor, sweep
from fedgca.experiments.executors import Batched, LocalPool, executor
from fedgca.training import gca as gca_training
from fedgca.training.lockstep import EpochBroker, concat_models, split_models
from fedgca.training.loop import ClientShards, run_epoch

OUTPUTS = ("metrics.csv", "metrics_clients.csv", "comm.json")


def _grid() -> list[RunConfig]:
    base = dict(dataset="academic", rounds=2, recon_epochs=2, align_epochs=2, local_epochs=2, k=10,
                val_fraction=0.2, threshold="val-quantile")
    runs = [("gca", 100), ("gca", 200), ("gca", 300), ("fedavg", 100), ("fedprox", 100), ("fedprox", 200),
            ("single", 200), ("centralized", 100), ("dpgca", 100)]
    extra = {"dpgca": {"dp_sigma": 1.0}}
    return [sweep.canonical(RunConfig(**base, method=m, seed=s, **extra.get(m, {}))) for m, s in runs]


def test_stacked_runs_give_the_numbers_they_give_alone(tmp_path, data_dir, monkeypatch):
    """Nine runs (GCA × 3 seeds, FedAvg, FedProx × 2, Single-Client, Centralized, DP-GCA) through the batched
    executor and one after another in this process: every metrics row, per-client row, comm record and saved
    detector is the same, bit for bit. GCA's alignment epochs were merged across runs (each client with its own
    run's centroids), the reconstruction epochs too, and the two FedProx runs' epochs (each with its own θ^(r))."""
    from fedgca.training import local as local_training

    merged, proximal = [], []
    real_merge, real_proximal = gca_training._merge_alignment, local_training._merge_proximal
    monkeypatch.setattr(gca_training, "_merge_alignment",
                        lambda parts, m: merged.append(len(parts)) or real_merge(parts, m))
    monkeypatch.setattr(local_training, "_merge_proximal",
                        lambda parts, m: proximal.append(len(parts)) or real_proximal(parts, m))
    configs = _grid()
    alone = sweep.run_sweep(configs, tmp_path / "alone", executor=LocalPool(0), data_dir=data_dir)
    t0 = time.perf_counter()
    stacked = sweep.run_sweep(configs, tmp_path / "stacked", executor=Batched(), data_dir=data_dir)
    elapsed = time.perf_counter() - t0
    assert alone["finished"] == stacked["finished"] == len(configs) and not stacked["failed"]
    assert merged and max(merged) == 3  # the three GCA runs aligned as one
    assert proximal and max(proximal) == 2  # the two FedProx runs' local epochs as one
    for cfg in configs:
        a, b = sweep.run_dir(tmp_path / "alone", cfg), sweep.run_dir(tmp_path / "stacked", cfg)
        for name in OUTPUTS:
            assert (a / name).read_bytes() == (b / name).read_bytes(), (cfg.method, cfg.seed, name)
        for det in sorted((a / "clients").glob("*.pt")):
            assert det.read_bytes() == (b / "clients" / det.name).read_bytes(), (cfg.method, det.name)
    finished = [e["key"] for e in sweep.Ledger(tmp_path / "stacked" / sweep.LEDGER).events()
                if e["event"] == "finished"]
    assert sorted(finished) == sorted(c.key() for c in configs)
    # each run records its own compute (issue #50 item 5): its share of the stacked epochs, not the time it waited
    # for the other seven — before, every run's wall_seconds was about the whole stack's, 8 × in all
    walls = [json.loads((sweep.run_dir(tmp_path / "stacked", c) / "summary.json").read_text())["wall_seconds"]
             for c in configs]
    print(f"batched: {elapsed:.2f} s for the stack, runs' wall_seconds sum {sum(walls):.2f} s")
    assert sum(walls) < 1.5 * elapsed


def test_stacks_computed_at_once_give_the_numbers_they_give_alone(tmp_path, data_dir, monkeypatch):
    """Four runs in stacks of two, both stacks at once (``--workers 2``): each stack's broker and threads run
    beside the other's, and every run's files are those of the runs one after another; the same with
    ``--processes``, each stack's runs in one worker process of its own."""
    configs = [c for c in _grid() if c.method in ("gca", "fedavg")]
    finished_at_start = []  # runs finished when each stack started: none for both, if they ran at once
    real_start = batched_executor._start_group

    def counting(gi, group, *args):
        ledger = tmp_path / "together" / sweep.LEDGER
        finished_at_start.append(sum(e["event"] == "finished" for e in sweep.Ledger(ledger).events())
                                 if ledger.exists() else 0)
        real_start(gi, group, *args)

    monkeypatch.setattr(batched_executor, "_start_group", counting)
    alone = sweep.run_sweep(configs, tmp_path / "alone", executor=LocalPool(0), data_dir=data_dir)
    together = sweep.run_sweep(configs, tmp_path / "together", executor=Batched(stack=2, workers=2),
                               data_dir=data_dir)
    assert alone["finished"] == together["finished"] == 4 and finished_at_start == [0, 0]
    # --processes: each stack in a worker process of its own, both at once
    apart = sweep.run_sweep(configs, tmp_path / "apart", executor=Batched(stack=2, workers=2, processes=True),
                            data_dir=data_dir)
    assert apart["finished"] == 4
    started = [e for e in sweep.Ledger(tmp_path / "apart" / sweep.LEDGER).events() if e["event"] == "started"]
    by_pid = {}
    for e in started:
        by_pid.setdefault(e["pid"], set()).add(e["key"])
    stacks = sorted(sorted(c.key() for c in g) for g in batched_executor.stacks(configs, 2))
    assert sorted(sorted(keys) for keys in by_pid.values()) == stacks and os.getpid() not in by_pid
    for cfg in configs:
        a = sweep.run_dir(tmp_path / "alone", cfg)
        for other in ("together", "apart"):
            b = sweep.run_dir(tmp_path / other, cfg)
            for name in OUTPUTS:
                assert (a / name).read_bytes() == (b / name).read_bytes(), (other, cfg.method, cfg.seed, name)


@pytest.mark.slow
def test_a_stack_whose_worker_process_is_killed_resumes_to_the_same_numbers(tmp_path, data_dir):
    """``--processes``: SIGKILL the worker process of one stack once one of its runs has checkpointed a round. The
    pool breaks, as the local pool's does; the runs that had started are computed again, a stack at a time in a
    process of its own, from their checkpoints; every run finishes once, with the files of the runs alone."""
    import dataclasses
    import threading

    configs = [sweep.canonical(dataclasses.replace(c, rounds=4)) for c in _grid() if c.method in ("gca", "fedavg")]
    root = tmp_path / "apart"
    killed: list = []

    def kill_a_worker():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for cfg in configs:
                if (sweep.run_dir(root, cfg) / "checkpoint.pt").exists():
                    pids = [e["pid"] for e in sweep.Ledger(root / sweep.LEDGER).events()
                            if e["event"] == "started" and e["key"] == cfg.key()]
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(cfg.key())
                    return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    res = sweep.run_sweep(configs, root, executor=Batched(stack=2, workers=2, processes=True), data_dir=data_dir)
    killer.join(timeout=5)
    assert killed and res["finished"] == 4 and not res["failed"], res
    events = sweep.Ledger(root / sweep.LEDGER).events()
    resumed = {e["key"] for e in events if e["event"] == "started" and e.get("resume")}
    assert killed[0] in resumed  # computed again from its checkpoint
    assert sorted(e["key"] for e in events if e["event"] == "finished") == sorted(c.key() for c in configs)
    alone = sweep.run_sweep(configs, tmp_path / "alone", executor=LocalPool(0), data_dir=data_dir)
    assert alone["finished"] == 4
    for cfg in configs:
        a, b = sweep.run_dir(tmp_path / "alone", cfg), sweep.run_dir(root, cfg)
        for name in OUTPUTS:
            assert (a / name).read_bytes() == (b / name).read_bytes(), (cfg.method, cfg.seed, name)


def test_a_stacked_epoch_equals_each_stacks_own_epoch():
    """concat → one run_epoch → split equals each stack's own run_epoch, with unequal client counts and shard
    sizes, the whole-tensor Adam path and the client-by-client one (a non-participating client)."""
    from fedgca import seeding
    from fedgca.models import init_model
    from fedgca.training.local import reconstruction_loss
    from fedgca.training.stacked import StackedModels

    torch.set_num_threads(1)
    specs = [(3, 1, 118), (2, 2, 97), (1, 3, 260)]

    def stack(c, s):
        return StackedModels([init_model(s, (21,), i) for i in range(c)])

    rng = np.random.default_rng(0)
    shards = [ClientShards.from_arrays([rng.standard_normal((n + i, 21)).astype(np.float32) for i in range(c)])
              for c, _, n in specs]
    alone, together = [stack(c, s) for c, s, _ in specs], [stack(c, s) for c, s, _ in specs]
    parts = [torch.tensor([True, False, True]), torch.ones(2, dtype=torch.bool), torch.ones(1, dtype=torch.bool)]
    broker = EpochBroker(1)
    for epoch in range(3):
        rngs = [seeding.client_rngs(s, "t", (epoch,), range(c)) for c, s, _ in specs]
        for m, sh, g, p in zip(alone, shards, rngs, parts):
            run_epoch(m, sh, g, 50, reconstruction_loss(m, 1), list(m.params), p)
        merged = concat_models(together)
        rngs = [seeding.client_rngs(s, "t", (epoch,), range(c)) for c, s, _ in specs]
        run_epoch(merged, broker._merged_shards(shards), [g for r in rngs for g in r], 50,
                  reconstruction_loss(merged, 1), list(merged.params), torch.cat(parts))
        split_models(merged, together)
    for a, b in zip(alone, together):
        for k in a.params:
            assert torch.equal(a.params[k], b.params[k]) and torch.equal(a.optim.exp_avg_sq[k], b.optim.exp_avg_sq[k])
        assert torch.equal(a.optim.epochs, b.optim.epochs)


@pytest.mark.parametrize("engine", ["fused", "device"])
def test_fedprox_epochs_of_several_runs_are_one_with_each_runs_numbers(engine, monkeypatch):
    """FedProx's epochs (L_recon + c·||θ_i − θ^(r)||², each run with its own θ^(r)) are merged by the broker into
    one stacked epoch, and every run gets the parameters, Adam state and losses of its epoch alone, bit for bit,
    on the CPU's fused Adam and on the device engine's masked step. Before, a FedProx epoch always ran alone."""
    from fedgca import seeding
    from fedgca.models import init_model
    from fedgca.training import local, stacked
    from fedgca.training.local import ProximalTerm, reconstruction_loss
    from fedgca.training.lockstep import _Request
    from fedgca.training.stacked import StackedModels

    monkeypatch.setattr(stacked, "device_engine", lambda device: engine == "device")
    torch.set_num_threads(1)
    sizes, coef = (3, 2, 1), 0.05

    def stacks():
        return [StackedModels([init_model(s, (21,), i) for i in range(c)]) for s, c in enumerate(sizes)]

    rng = np.random.default_rng(0)
    shards = [ClientShards.from_arrays([rng.standard_normal((80 + 7 * i, 21)).astype(np.float32) for i in range(c)])
              for c in sizes]
    # each run's θ^(r): another model per run, so every proximal term differs
    centres = [{k: v.detach()[0].clone() for k, v in StackedModels([init_model(50 + s, (21,), 0)]).params.items()}
               for s in range(len(sizes))]
    alone, together = stacks(), stacks()
    parts = [torch.tensor([True, False, True]), torch.ones(2, dtype=torch.bool), torch.ones(1, dtype=torch.bool)]

    def loss(m, s):
        return reconstruction_loss(m, 1, ProximalTerm(coef, m.params, centres[s]))

    merges = []
    real_merge = local._merge_proximal
    monkeypatch.setattr(local, "_merge_proximal", lambda ps, m: merges.append(len(ps)) or real_merge(ps, m))
    for epoch in range(2):
        expected = [run_epoch(m, sh, seeding.client_rngs(s, "t", (epoch,), range(c)), 50, loss(m, s),
                              list(m.params), p)
                    for s, (m, sh, c, p) in enumerate(zip(alone, shards, sizes, parts))]
        reqs = [_Request(m, sh, seeding.client_rngs(s, "t", (epoch,), range(c)), 50, loss(m, s), tuple(m.params), p)
                for s, (m, sh, c, p) in enumerate(zip(together, shards, sizes, parts))]
        assert len({r.group_key() for r in reqs}) == 1
        EpochBroker(3)._compute_group(reqs)
        for r, e in zip(reqs, expected):
            assert r.error is None and r.merged_with == 3 and torch.equal(r.result, e)
    assert merges == [3, 3]
    for a, b in zip(alone, together):
        assert a.optim.masked == (engine == "device")
        for k in a.params:
            assert torch.equal(a.params[k], b.params[k]), k
            assert torch.equal(a.optim.exp_avg[k], b.optim.exp_avg[k])
            assert torch.equal(a.optim.exp_avg_sq[k], b.optim.exp_avg_sq[k])
    # another coefficient is another loss: never merged with these
    other = _Request(together[0], shards[0], [], 50,
                     reconstruction_loss(together[0], 1, ProximalTerm(2 * coef, together[0].params, centres[0])),
                     tuple(together[0].params), parts[0])
    assert other.group_key() != reqs[0].group_key()


def test_a_stacked_epoch_that_fails_as_a_whole_is_computed_run_by_run(monkeypatch):
    """A stacked epoch that fails (on a GPU: out of memory) before any run's models are written back is computed
    run by run from the same draws: each run gets the numbers of its epoch alone; a run that fails alone fails."""
    from fedgca import seeding
    from fedgca.models import init_model
    from fedgca.training import lockstep
    from fedgca.training.local import reconstruction_loss
    from fedgca.training.lockstep import _Request
    from fedgca.training.stacked import StackedModels

    torch.set_num_threads(1)
    sizes = (3, 2, 1)

    def fragile(clients, *args, **kw):  # the merged epoch (6 clients) and run 2's own (2 clients) fail
        if clients.num_clients in (6, 2):
            raise RuntimeError("out of memory")
        return run_epoch(clients, *args, **kw)

    def stacks():
        return [StackedModels([init_model(s, (21,), i) for i in range(c)]) for s, c in enumerate(sizes)]

    rng = np.random.default_rng(0)
    shards = [ClientShards.from_arrays([rng.standard_normal((90 + 7 * i, 21)).astype(np.float32) for i in range(c)])
              for c in sizes]
    alone, together = stacks(), stacks()
    expected = [run_epoch(m, sh, seeding.client_rngs(s, "t", (0,), range(c)), 50, reconstruction_loss(m, 1),
                          list(m.params), torch.ones(c, dtype=torch.bool))
                for s, (m, sh, c) in enumerate(zip(alone, shards, sizes))]
    monkeypatch.setattr(lockstep, "run_epoch", fragile)
    reqs = [_Request(m, sh, seeding.client_rngs(s, "t", (0,), range(c)), 50, reconstruction_loss(m, 1),
                     tuple(m.params), torch.ones(c, dtype=torch.bool))
            for s, (m, sh, c) in enumerate(zip(together, shards, sizes))]
    EpochBroker(3)._compute_group(reqs)
    assert isinstance(reqs[1].error, RuntimeError) and reqs[0].error is None and reqs[2].error is None
    for i in (0, 2):
        assert torch.equal(reqs[i].result, expected[i])
        for k in alone[i].params:
            assert torch.equal(alone[i].params[k], together[i].params[k]), (i, k)
    for k in together[1].params:  # the failed run's models as they were
        assert torch.equal(together[1].params[k], stacks()[1].params[k])


def test_stacks_group_by_dataset_and_device_in_order():
    cfgs = [RunConfig(dataset=d, method="gca", seed=s) for d, s in
            [("magic", 1), ("adult", 1), ("magic", 2), ("magic", 3)]]
    groups = batched_executor.stacks(cfgs, 2)
    assert [[(c.dataset, c.seed) for c in g] for g in groups] == [[("magic", 1), ("magic", 2)], [("magic", 3)],
                                                                  [("adult", 1)]]
    with pytest.raises(ValueError, match="--stack must be at least 1"):
        executor("batched", stack=0)
    with pytest.raises(ValueError, match="--stack and --processes are the batched executor's"):
        executor("local", stack=4)
    with pytest.raises(ValueError, match="--stack and --processes are the batched executor's"):
        executor("ray", processes=True)
    with pytest.raises(ValueError, match="--workers must be at least 1"):
        executor("batched", processes=True, workers=0)
    assert executor("batched", processes=True, workers=3) == Batched(workers=3, processes=True)


def test_a_failing_run_leaves_the_stack_and_the_others_finish(tmp_path, data_dir):
    """A run that fails (here: K larger than the codes it can ever upload is fine, so: an unknown dataset file)
    is recorded as failed; the broker stops waiting for it and the other runs of its stack finish."""
    good = _grid()[:2]
    bad = sweep.canonical(RunConfig(dataset="academic", method="gca", seed=5, rounds=2, rho=1e-6))
    res = sweep.run_sweep([good[0], bad, good[1]], tmp_path, executor=Batched(), data_dir=data_dir)
    assert res["finished"] == 2 and len(res["failed"]) == 1


def test_a_killed_batched_sweep_resumes_to_the_same_numbers(tmp_path, data_dir):
    """SIGKILL `fedgca sweep --executor batched` once some run has checkpointed a round; the same command
    finishes every run once, with the metrics of an uninterrupted run one after another."""
    spec = tmp_path / "grid.toml"
    spec.write_text("[base]\ndataset = \"academic\"\nrounds = 3\nrecon_epochs = 1\nalign_epochs = 1\nk = 10\n"
                    "[grid]\nmethod = [\"gca\", \"fedavg\"]\nseed = [100, 200]\n")
    root = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "fedgca.cli.main", "sweep", str(spec), "--out", str(root), "--data-dir",
           str(data_dir), "--executor", "batched"]
    with (tmp_path / "err.txt").open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list((root / "runs").glob("*/checkpoint.pt")):
            assert proc.poll() is None, (tmp_path / "err.txt").read_text()[-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(list(root.rglob("summary.json"))) < 4  # it was stopped part way
    from fedgca.cli.main import main

    assert main(cmd[3:]) == 0  # the same command again (in this process): it finishes every run
    configs = sweep.load_spec(spec).configs
    reference = sweep.run_sweep(configs, tmp_path / "alone", executor=LocalPool(0), data_dir=data_dir)
    assert reference["finished"] == 4
    for cfg in configs:
        for name in OUTPUTS:
            assert (sweep.run_dir(root, cfg) / name).read_bytes() == \
                (sweep.run_dir(tmp_path / "alone", cfg) / name).read_bytes(), (cfg.method, cfg.seed, name)
    finished = [e["key"] for e in sweep.Ledger(root / sweep.LEDGER).events() if e["event"] == "finished"]
    assert sorted(finished) == sorted(c.key() for c in configs)
