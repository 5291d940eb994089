"""The device engine (``training.stacked.device_engine``: Adam by ``StackedAdam.step_masked``, every client scored
at once), checked on the CPU, where these tests force it on: Adam's formulas; a client's numbers the same alone
or anywhere in a stack, through the batched engine too; a checkpoint that resumes to the same numbers; operator
calls per training step and per evaluation that do not grow with the clients on the axis (S = 1, 8, 64); and no
read back to the host inside an epoch. On a GPU the engine is on by itself; the CUDA test skips without one."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from fedgca import methods, seeding
from fedgca.config import RunConfig
from fedgca.evaluation import metrics
from fedgca.experiments import sweep
from fedgca.experiments.executors import Batched, LocalPool
from fedgca.models import init_model
from fedgca.training import stacked
from fedgca.training.local import reconstruction_loss
from fedgca.training.lockstep import EpochBroker, concat_models, split_models
from fedgca.training.loop import ClientShards, run_epoch
from fedgca.training.stacked import AdamConfig, StackedAdam, StackedModels

D = 10


@pytest.fixture
def device_engine(monkeypatch):
    monkeypatch.setattr(stacked, "device_engine", lambda device: True)
    torch.set_num_threads(1)


def _stack(ids) -> StackedModels:
    return StackedModels([init_model(100, (D,), i) for i in ids])


def _shards(sizes, seed=0) -> ClientShards:
    rng = np.random.default_rng(seed)
    return ClientShards.from_arrays([rng.standard_normal((n, D)).astype(np.float32) for n in sizes])


def _epoch(models: StackedModels, shards: ClientShards, ids, epoch: int, part=None):
    part = torch.ones(models.num_clients, dtype=torch.bool) if part is None else part
    return run_epoch(models, shards, seeding.client_rngs(7, "t", (epoch,), ids), 50, reconstruction_loss(models, 1),
                     list(models.params), part)


def test_the_masked_step_is_adams_formulas_per_client():
    """Three clients stepping on different steps (step counts drift apart), with StepLR: each client's
    parameters follow its own ``torch.optim.Adam`` to float32 precision (the fused kernel rounds differently, so
    not bit for bit)."""
    torch.manual_seed(0)
    shapes = {"w": (4, 3), "b": (4,)}
    params = {k: torch.randn(3, *s) for k, s in shapes.items()}
    cfg = AdamConfig(lr=1e-2, lr_step=2, lr_gamma=0.5)
    opt = StackedAdam(params, cfg, masked=True)
    refs = [{k: params[k][i].clone().requires_grad_(True) for k in shapes} for i in range(3)]
    torch_opts = [torch.optim.Adam(list(r.values()), lr=cfg.lr) for r in refs]
    scheds = [torch.optim.lr_scheduler.StepLR(o, cfg.lr_step, cfg.lr_gamma) for o in torch_opts]
    gen = torch.Generator().manual_seed(1)
    for epoch in range(5):
        for _ in range(6):
            active = torch.rand(3, generator=gen) < 0.6
            grads = {k: torch.randn(3, *s, generator=gen) for k, s in shapes.items()}
            opt.step_masked(grads, active)
            for i in np.flatnonzero(active.numpy()):
                for k in shapes:
                    refs[i][k].grad = grads[k][i].clone()
                torch_opts[i].step()
        opt.end_epoch(torch.ones(3, dtype=torch.bool))
        for s in scheds:
            s.step()
    for i in range(3):
        for k in shapes:
            torch.testing.assert_close(params[k][i], refs[i][k].detach(), rtol=1e-5, atol=1e-6)
    # βᵗ as running products: βᵗ to float32 precision
    torch.testing.assert_close(opt.beta_pow["w"], torch.stack([b ** opt.step_count["w"] for b in cfg.betas], -1))


def test_a_client_gives_the_same_numbers_alone_or_anywhere_in_a_stack(device_engine):
    """Eight clients of unequal shards (their step counts drift apart), one absent for an epoch, three epochs:
    each client's parameters and Adam state equal those of the client trained alone, bit for bit — and through
    the batched engine's concat → one epoch → split, as each stack's own epochs."""
    sizes = [37, 260, 120, 51, 199, 88, 260, 143]
    ids = list(range(8))
    shards = _shards(sizes)
    together = _stack(ids)
    assert together.optim.masked
    alone = [_stack([i]) for i in ids]
    for epoch in range(3):
        part = torch.ones(8, dtype=torch.bool)
        part[3] = epoch != 1
        _epoch(together, shards, ids, epoch, part)
        for i in ids:
            if part[i]:
                _epoch(alone[i], shards.only(i), [i], epoch)
    for i in ids:
        for k in together.params:
            assert torch.equal(together.params[k][i], alone[i].params[k][0]), (i, k)
            assert torch.equal(together.optim.exp_avg_sq[k][i], alone[i].optim.exp_avg_sq[k][0])
            assert torch.equal(together.optim.beta_pow[k][i], alone[i].optim.beta_pow[k][0])

    # two stacks merged for their epochs, as the batched engine merges runs
    first, second = _stack(ids[:3]), _stack(ids[3:])
    own = [_stack(ids[:3]), _stack(ids[3:])]
    parts = [_shards(sizes[:3], 1), _shards(sizes[3:], 2)]
    broker = EpochBroker(1)
    for epoch in range(3):
        merged = concat_models([first, second])
        run_epoch(merged, broker._merged_shards(parts), seeding.client_rngs(7, "t", (epoch,), ids), 50,
                  reconstruction_loss(merged, 1), list(merged.params), torch.ones(8, dtype=torch.bool))
        split_models(merged, [first, second])
        for m, sh, i in zip(own, parts, (ids[:3], ids[3:])):
            _epoch(m, sh, i, epoch)
    for a, b in zip(own, (first, second)):
        for k in a.params:
            assert torch.equal(a.params[k], b.params[k]) and torch.equal(a.optim.beta_pow[k], b.optim.beta_pow[k])


def test_a_checkpoint_resumes_to_the_same_numbers(device_engine):
    """state_dict → a fresh stack → on training: the numbers of the stack that never stopped; and the state of
    the fused step (a CPU checkpoint, no β powers) loads with βᵗ from its step counts, to float32 precision."""
    ids, shards = list(range(4)), _shards([90, 150, 60, 150])
    kept = _stack(ids)
    for epoch in range(2):
        _epoch(kept, shards, ids, epoch)
    resumed = _stack(ids)
    resumed.load_state_dict(kept.state_dict())
    fused = {k: v for k, v in kept.optim.state_dict().items() if k != "beta_pow"}
    from_cpu = _stack(ids)
    from_cpu.optim.load_state_dict(fused)
    for k in kept.params:
        torch.testing.assert_close(from_cpu.optim.beta_pow[k], kept.optim.beta_pow[k], rtol=1e-5, atol=0)
    for epoch in range(2, 4):
        _epoch(kept, shards, ids, epoch)
        _epoch(resumed, shards, ids, epoch)
    for k in kept.params:
        assert torch.equal(kept.params[k], resumed.params[k])


_VIEW_OPS = ("aten::slice", "aten::expand", "aten::view", "aten::alias", "aten::unsqueeze", "aten::as_strided",
             "aten::narrow")
_VIEWS = collections.Counter({name: 1 << 30 for name in _VIEW_OPS})  # subtracted: drops every view call


def _aten_calls(fn) -> collections.Counter:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def test_operator_calls_per_step_and_per_evaluation_do_not_grow_with_the_stack(device_engine):
    """The same operator calls, name by name, for one training epoch (4 mini-batch steps, step counts drifted
    apart by unequal shards) and for one evaluation (the shared test rows, each client's own rows, and a whole
    evaluation: thresholds, test scores and detection metrics), with
    S = 1, 8 and 64 clients on the axis. The CPU's fused step and one-model scoring grow with S (the baseline
    printed for comparison)."""
    test_rows, labels = torch.randn(1000, D), np.arange(1000) % 7 == 0
    counts = {}
    for s in (1, 8, 64):
        ids = list(range(s))
        sizes = [200] + [50 + (37 * i) % 150 for i in range(1, s)]
        models, shards = _stack(ids), _shards(sizes)
        _epoch(models, shards, ids, 0)  # the step counts drift apart
        train = _aten_calls(lambda: _epoch(models, shards, ids, 1))
        shared = _aten_calls(lambda: metrics.shared_scores(models, test_rows))
        own = _aten_calls(lambda: metrics.shard_scores(models, shards))
        # views launch nothing, and torch.cat's internals take one more for one client than for more
        evaluation = _aten_calls(lambda: metrics.evaluate_clients(models, shards, test_rows, labels, 0.75)) - _VIEWS
        counts[s] = (train, shared, own, evaluation)
        print(f"S = {s}: {sum(train.values())} calls per epoch, {sum(shared.values())} per shared scoring, "
              f"{sum(own.values())} per own-rows scoring, {sum(evaluation.values())} per evaluation")
    assert counts[1] == counts[8] == counts[64]


def test_the_cpu_engine_grows_with_the_stack_where_the_device_engine_does_not():
    """The comparison that gives the test above its meaning: the CPU's engine scores client by client."""
    calls = {s: sum(_aten_calls(lambda: metrics.shared_scores(_stack(range(s)), torch.randn(1000, D))).values())
             for s in (1, 8)}
    assert calls[8] > 2 * calls[1]


def _scoring_runs(count: int) -> list[tuple]:
    """``count`` runs' (models, own rows, shared test rows) of unequal sizes; every third run's test rows
    column-major, as a loaded test set may come."""
    runs = []
    for r in range(count):
        models = _stack(range(10 * r, 10 * r + 2 + r % 3))
        test = torch.randn(700 + 50 * (r % 8), D)  # sizes vary, bounded (64 runs stay quick)
        runs.append((models, _shards([40 + 7 * i + r for i in range(models.num_clients)], seed=r),
                     test.T.contiguous().T if r % 3 == 0 else test))
    return runs


def test_the_runs_scorings_are_one_pass_with_each_runs_numbers(device_engine):
    """Five runs' evaluations through one broker (each run in its own thread, as in the batched engine): every
    scoring computed once for all runs — their models on one axis, their rows padded to one block — and each
    run's scores, on its own rows and on its test rows, bit for bit those it computes alone."""
    runs = _scoring_runs(5)

    def scores(m, sh, x):
        return metrics.shard_scores(m, sh), metrics.to_numpy(metrics.shared_scores(m, x))

    alone = [scores(*run) for run in runs]
    broker, together = _through_one_broker([m for m, _, _ in runs], lambda i: scores(*runs[i]))
    assert broker.stats["scorings"] == 10 and broker.stats["stacked_scorings"] == 2, broker.stats
    for i, (own, test) in enumerate(alone):
        got_own, got_test = together[i]
        assert len(got_own) == len(own) and all(np.array_equal(a, b) for a, b in zip(got_own, own)), i
        assert np.array_equal(got_test, test), i


def _through_one_broker(stacks: list[StackedModels], work) -> tuple[EpochBroker, dict]:
    """``work(i)`` for every run in a thread of its own, each run's models attached to one broker, as the batched
    engine runs them: the broker and each run's result."""
    import threading

    broker, results = EpochBroker(len(stacks)), {}

    def one(i):
        broker.attach(stacks[i])
        try:
            results[i] = work(i)
        finally:
            broker.leave()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(stacks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return broker, results


def _evaluate(models, shards, x, y, one_model=False) -> dict:
    res = metrics.evaluate_clients(models, shards, x, y, 0.75, one_model=one_model)
    return {k: res[k] for k in ("accuracy", "auroc", "auprc", "per_client", "thresholds")}


def test_the_runs_test_metrics_are_one_computation_with_each_runs_figures(device_engine, monkeypatch):
    """Six runs' evaluations through one broker: each run's test metrics computed where its scores are, with the
    other runs' of the same test-set size as one computation (one of them a one-model run, whose single scoring
    serves each client's τ), and each run's figures bit for bit those it computes alone. Against the host's
    ``detection_metrics`` on the same scores: accuracy and AUROC bit for bit, AUPRC to 1e-14."""
    rng = np.random.default_rng(5)
    runs = []
    for r in range(6):
        models = _stack(range(10 * r, 10 * r + 2 + r % 3))
        m = 700 if r < 4 else 900
        x = torch.randn(m, D)
        y = rng.random(m) < 0.3
        x[torch.from_numpy(y)] *= 2.0  # anomalies: larger rows score higher
        runs.append((models, _shards([40 + 7 * i + r for i in range(models.num_clients)], seed=r), x, y, r == 3))
    alone = [_evaluate(*run) for run in runs]
    groups = []
    of_many = metrics.RowMetrics.of_many
    monkeypatch.setattr(metrics.RowMetrics, "of_many",
                        staticmethod(lambda thens, scores: groups.append(len(thens)) or of_many(thens, scores)))
    _, together = _through_one_broker([run[0] for run in runs], lambda i: _evaluate(*runs[i]))
    assert sorted(groups) == [2, 4], groups  # the 700-row and the 900-row test sets: one computation each
    for i, (models, shards, x, y, one_model) in enumerate(runs):
        assert together[i] == alone[i], i
        scorer = models.slot_view(0) if one_model else models
        host = metrics.detection_metrics(metrics.to_numpy(metrics._scores_at_once(scorer, x)), y,
                                         np.array(alone[i]["thresholds"]))["per_client"]
        got = alone[i]["per_client"]
        assert got["accuracy"] == host["accuracy"] and got["auroc"] == host["auroc"], i
        np.testing.assert_allclose(got["auprc"], host["auprc"], rtol=0, atol=1e-14)
        assert len(got["auroc"]) == models.num_clients


def test_a_failed_stacked_scoring_fails_only_the_run_that_fails_alone(device_engine):
    """A scoring of many runs that fails as a whole is computed run by run: the run whose own scoring fails gets
    the error, the others their scores as alone."""
    from fedgca.training.lockstep import _ScoreRequest

    def fragile(models, x):  # fails on the poisoned run's 777 rows, whether alone or padded into a block
        if x.shape[-2] == 777:
            raise RuntimeError("out of memory")
        return metrics._scores_at_once(models, x)

    runs = [(_stack(range(3 * i, 3 * i + 2)), torch.randn(rows, D)) for i, rows in enumerate((500, 777, 600))]
    reqs = [_ScoreRequest(m, x, fragile) for m, x in runs]
    EpochBroker(3)._score_group(reqs)
    assert isinstance(reqs[1].error, RuntimeError) and reqs[0].error is None and reqs[2].error is None
    for r in (reqs[0], reqs[2]):
        assert torch.equal(r.result, metrics._scores_at_once(r.clients, r.x))


def test_a_failed_batched_fit_falls_back_to_each_fit_alone(monkeypatch):
    """GMM fits of many runs whose batch fails as a whole (memory) are fitted one by one, each as alone."""
    from fedgca.protocol.clustering import GMMBackend
    from fedgca.training.lockstep import _FitRequest

    real = GMMBackend.fit_batch

    def fragile(models, Zs):
        if len(models) > 1:
            raise RuntimeError("out of memory")
        return real(models, Zs)

    monkeypatch.setattr(GMMBackend, "fit_batch", staticmethod(fragile))
    rng = np.random.default_rng(0)
    Zs = [rng.standard_normal((120, 3)) + i for i in range(3)]
    models = [GMMBackend(4, engine="torch", random_state=i) for i in range(3)]
    reqs = [_FitRequest(m, Z, m.batch_key(Z)) for m, Z in zip(models, Zs)]
    EpochBroker(3)._fit_group(reqs)
    assert all(r.error is None for r in reqs)
    for i, m in enumerate(models):
        alone = GMMBackend(4, engine="torch", random_state=i).fit(Zs[i])
        assert np.array_equal(m.means_, alone.means_) and np.array_equal(m.counts_, alone.counts_)


def test_a_stacked_scoring_copies_each_runs_rows_once():
    """What the broker adds to a scoring of many runs (torch profiler, top-level ``aten::`` calls, 8 runs against
    64): the first evaluation copies each run's rows into the padded block once (one copy per run, and views);
    every later evaluation of the same rows reuses the block, so its calls (views aside: each run's result is a
    slice) are the same for 8 runs as for 64."""
    from fedgca.training.lockstep import _ScoreRequest

    views = set(_VIEW_OPS)

    def calls(count, **budget):
        runs, broker, out = _scoring_runs(count), EpochBroker(count, **budget), []
        for _ in range(2):  # a stack's first evaluation, then its next one
            reqs = [_ScoreRequest(m, x, metrics._scores_at_once) for m, _, x in runs]
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                broker._score_group(reqs)
            assert all(r.error is None for r in reqs)
            out.append(collections.Counter(e.name for e in prof.events()
                                           if e.name.startswith("aten::") and e.cpu_parent is None))
        return out

    (first8, next8), (first64, next64) = calls(8), calls(64)
    grown = {k: first64[k] - first8[k] for k in first64 | first8 if first64[k] != first8[k]}
    assert set(grown) <= views | {"aten::copy_"} and grown["aten::copy_"] == 56, grown
    assert next8 - _VIEWS == next64 - _VIEWS and next8["aten::copy_"] < first8["aten::copy_"]  # views launch nothing
    first, again = calls(8, max_cache_bytes=1)  # a block over the memory budget is not kept: copied every time
    assert again["aten::copy_"] == first["aten::copy_"] == first8["aten::copy_"]


class _HostReads(TorchFunctionMode):
    """Counts the calls that read a tensor's values back to the host (a device synchronisation on a GPU)."""

    READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"}

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.READS:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def test_no_host_read_inside_an_epoch(device_engine):
    """An epoch of 2 mini-batch steps and one of 16 read the same (few) values back: the epoch's plan, made on
    the host before the first step; none per step."""
    reads = {}
    for rows in (100, 800):
        ids = [0, 1, 2]
        models, shards = _stack(ids), _shards([rows, rows // 2, rows - 13])
        with _HostReads() as mode:
            _epoch(models, shards, ids, 0)
        reads[rows] = mode.calls
    assert reads[100] == reads[800], reads
    assert sum(reads[800].values()) <= 2, reads


def _top_level_calls(fn) -> collections.Counter:
    """``aten::`` calls made from Python, not from inside another operator, views aside: what a GPU launches
    (a multi-tensor call launches for many tensors at once; on the CPU it loops inside)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::") and not (
        e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))) - _VIEWS - collections.Counter(
        {"aten::detach": 1 << 30, "aten::split": 1 << 30, "aten::select": 1 << 30, "aten::transpose": 1 << 30})


def test_a_stacked_epoch_of_more_runs_reads_back_no_more(device_engine):
    """A stacked epoch through the broker — the runs' models and Adam state joined, the epoch, each run's slice
    copied back — reads the same values back to the host for 2 runs as for 16: the epoch's plan, nothing per
    run. Before, joining and splitting read every tensor's step counts back (12 × S + 24 synchronisations on a
    GPU) and copied each run's tensors one by one: 100 calls per run (770 at S = 2, 2,170 at S = 16). Now 5
    (450 and 520): the parameters and moments of all runs go back in one multi-tensor copy; per run there remain
    the copies of its step counts and β powers (tensors first, so not in that copy), of its StepLR counters (on
    the CPU), and of its rows into the merged shards the first time."""
    from fedgca.training.lockstep import _Request

    def requests(count):
        out = []
        for r in range(count):
            models = _stack(range(3))
            out.append(_Request(models, _shards([120, 90, 101], seed=r), seeding.client_rngs(r, "t", (0,), range(3)),
                                50, reconstruction_loss(models, 1), tuple(models.params),
                                torch.ones(3, dtype=torch.bool)))
        return out

    reads, calls = {}, {}
    for count in (2, 16):
        with _HostReads() as mode:
            EpochBroker(count)._compute_group(requests(count))
        reads[count] = mode.calls
        reqs, broker = requests(count), EpochBroker(count)
        calls[count] = _top_level_calls(lambda: broker._compute_group(reqs))
    assert reads[2] == reads[16] and sum(reads[16].values()) <= 2, reads
    grown = calls[16] - calls[2]
    # per run: its step counts, β powers and StepLR counters, and its rows into the merged shards (the first epoch
    # of a set of shards: kept after it); the participation mask's `to` is the CPU tensor itself, no copy
    assert set(grown) <= {"aten::copy_", "aten::to"} and grown["aten::copy_"] <= 4 * 14, grown


def test_an_evaluation_reads_back_as_often_for_more_clients(device_engine):
    """A whole evaluation (each client's own rows for τ, the test rows and their metrics) reads back the same
    few times for 2 clients as for 16: its own rows' scores once, the test metrics once (not the test scores)."""
    reads = {}
    x, y = torch.randn(900, D), np.arange(900) % 5 == 0
    for s in (2, 16):
        models, shards = _stack(range(s)), _shards([60 + i for i in range(s)])
        with _HostReads() as mode:
            metrics.evaluate_clients(models, shards, x, y, 0.75)
        reads[s] = mode.calls
    assert reads[2] == reads[16], reads
    # the own rows' scores (.cpu, .numpy); the test metrics (.cpu in RowMetrics.of_many), then to_numpy of that
    # host tensor (its .cpu a no-op, .numpy)
    assert reads[16] == {"cpu": 3, "numpy": 2}, reads


def test_scores_of_every_client_at_once_match_client_by_client(device_engine):
    """The device engine's scoring equals the CPU's one-model passes to float32 precision, and a client's
    scores are the same alone or in the stack, bit for bit."""
    ids, x = list(range(6)), torch.randn(700, D)
    models = _stack(ids)
    _epoch(models, _shards([120] * 6), ids, 0)
    together = metrics.shared_scores(models, x)
    by_client = torch.stack([metrics._scores(models, i, x) for i in ids])
    torch.testing.assert_close(together, by_client, rtol=1e-5, atol=1e-6)
    for i in ids:
        assert torch.equal(metrics.shared_scores(models.slot_view(i), x)[0], together[i])
    own = metrics.shard_scores(models, _shards([50, 700, 3, 120, 9, 400]))
    assert [len(s) for s in own] == [50, 700, 3, 120, 9, 400]


def _runs() -> list[RunConfig]:
    base = dict(dataset="academic", rounds=2, recon_epochs=2, align_epochs=2, local_epochs=2, k=10,
                val_fraction=0.2, threshold="val-quantile")
    return [sweep.canonical(RunConfig(**base, method=m, seed=s, backend=b)) for m, s, b in
            [("gca", 100, "gmm"), ("gca", 200, "gmm"), ("fedavg", 100, "gmm"), ("single", 100, "gmm"),
             ("gca", 100, "kmeans")]]


def test_runs_under_the_device_engine_stack_as_they_run_alone_and_agree_with_the_cpu(device_engine, tmp_path,
                                                                                     data_dir, monkeypatch):
    """Five runs through the batched executor and one after another, both under the device engine: every
    metrics row and comm record the same, bit for bit — the two GCA runs' clustering fitted as one batch in
    the stack (the torch full-covariance GMM) and the runs' evaluations scored as one, each alone one after
    another; a fifth run clusters with K-means (the torch engine). Against the CPU engine (another Adam rounding,
    scores of all clients at once, scikit-learn's GMM and K-means): the final AUROC within 0.5 pp, run for run."""
    from fedgca.protocol.clustering import GMMBackend, KMeansBackend
    from fedgca.training import lockstep

    batches, scorings, kmeans = [], [], []
    fit_batch, score_into = GMMBackend.fit_batch, lockstep.EpochBroker._score_into
    kmeans_batch = KMeansBackend.fit_batch
    monkeypatch.setattr(GMMBackend, "fit_batch",
                        staticmethod(lambda models, Zs: batches.append(len(models)) or fit_batch(models, Zs)))
    monkeypatch.setattr(KMeansBackend, "fit_batch",
                        staticmethod(lambda models, Zs: kmeans.append(len(models)) or kmeans_batch(models, Zs)))
    monkeypatch.setattr(lockstep.EpochBroker, "_score_into",
                        staticmethod(lambda reqs, x: scorings.append(len(reqs)) or score_into(reqs, x)))
    configs = _runs()
    alone = sweep.run_sweep(configs, tmp_path / "alone", executor=LocalPool(0), data_dir=data_dir)
    assert batches == [1] * 4  # 2 GCA runs × 2 rounds, each fit alone
    stacked_runs = sweep.run_sweep(configs, tmp_path / "stacked", executor=Batched(), data_dir=data_dir)
    assert batches[4:] == [2, 2]  # both runs' fits as one, every round
    assert kmeans == [1] * 4  # the K-means run's server: the torch engine, 2 rounds alone and 2 in the stack
    assert max(scorings) == len(configs)  # evaluations of all five runs scored as one
    assert alone["finished"] == stacked_runs["finished"] == len(configs)
    for cfg in configs:
        a, b = sweep.run_dir(tmp_path / "alone", cfg), sweep.run_dir(tmp_path / "stacked", cfg)
        for name in ("metrics.csv", "metrics_clients.csv", "comm.json"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), (cfg.method, cfg.seed, name)
    monkeypatch.setattr(stacked, "device_engine", lambda device: False)
    cpu = sweep.run_sweep(configs, tmp_path / "cpu", executor=LocalPool(0), data_dir=data_dir)
    assert cpu["finished"] == len(configs)
    import pandas as pd
    for cfg in configs:
        dev = pd.read_csv(sweep.run_dir(tmp_path / "alone", cfg) / "metrics.csv")
        ref = pd.read_csv(sweep.run_dir(tmp_path / "cpu", cfg) / "metrics.csv")
        assert abs(dev["auroc"].iloc[-1] - ref["auroc"].iloc[-1]) < 0.005, cfg.method


@pytest.mark.parametrize("backend,engine", [("gmm", "torch"), ("kmeans", "torch"), ("softkmeans", "torch"),
                                            ("minibatch", None)])
def test_the_gca_server_clusters_on_the_device_under_the_device_engine(backend, engine, monkeypatch):
    """Which clustering engine a GCA server gets: under the device engine the torch engines on the run's device
    (the GMM, K-means and soft K-means), mini-batch K-means scikit-learn's; on the CPU engine the host's, as the
    committed CPU results were computed (the GMM's device named, its engine left to its own rule)."""
    from fedgca.training.gca import gca_config

    cfg = RunConfig(dataset="magic", method="gca", backend=backend)
    assert gca_config(cfg, "tabular").cluster_options.get("engine") is None
    monkeypatch.setattr(stacked, "device_engine", lambda device: True)
    assert gca_config(cfg, "tabular").cluster_options.get("engine") == engine


def test_a_device_without_float64_clusters_and_ranks_on_the_cpu(monkeypatch):
    """Apple's MPS computes no float64: a run there (the device engine on) gets the host's clustering engines on
    the CPU, and its evaluation ranks on the host (``devices.has_float64``), where a float64 tensor on the device
    would stop the run."""
    from fedgca import devices
    from fedgca.training import gca

    monkeypatch.setattr(devices, "resolve", lambda name="auto": torch.device("cpu" if name == "cpu" else "mps"))
    monkeypatch.setattr(stacked, "device_engine", lambda device: torch.device(device).type != "cpu")
    for backend in ("gmm", "kmeans", "softkmeans"):
        options = gca._cluster_options(RunConfig(dataset="magic", method="gca", backend=backend, device="mps"))
        assert options.get("engine") is None and options.get("device", torch.device("cpu")).type == "cpu", options
    assert not devices.has_float64(torch.device("mps")) and devices.has_float64(torch.device("cuda"))


def test_the_step_program_is_the_loops_step(device_engine):
    """The device engine's epoch runs its steps through ``loop.StepProgram`` (fixed buffers: what CUDA captures
    and replays; eager here). The same epoch through ``run_epoch``'s general loop — the loss differentiated by
    autograd, stepped by ``step_active`` — gives the same parameters and losses bit for bit."""
    ids, shards = list(range(5)), _shards([200, 37, 150, 99, 180])
    by_program, by_loop = _stack(ids), _stack(ids)
    for epoch in range(2):
        part = torch.tensor([True, True, epoch == 0, True, True])
        a = _epoch(by_program, shards, ids, epoch, part)
        b = run_epoch(by_loop, shards, seeding.client_rngs(7, "t", (epoch,), ids), 50,
                      reconstruction_loss(by_loop, 1).value, list(by_loop.params), part)
        assert torch.equal(a, b)
    for k in by_program.params:
        assert torch.equal(by_program.params[k], by_loop.params[k]), k


class _Recording(TorchDispatchMode):
    """A CUDA graph's semantics on the CPU: the operators one step dispatches, recorded with their arguments as
    they were — numbers baked in, tensors by identity — and replayed later on whatever the tensors then hold.
    Intermediates map to their replay's; every other tensor (parameters, optimiser state, the step's buffers) is
    the same object, as a graph's fixed addresses are."""

    def __init__(self):
        super().__init__()
        self.ops, self.replays = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append((func, args, kwargs or {}, out))
        return out

    def replay(self) -> None:
        self.replays += 1
        made: dict[int, torch.Tensor] = {}

        def mine(x):
            return made.get(id(x), x) if isinstance(x, torch.Tensor) else x

        for func, args, kwargs, out in self.ops:
            with torch.no_grad():  # recorded below autograd: the replay is too
                res = func(*tree_map(mine, args), **tree_map(mine, kwargs))
            for was, now in zip(tree_leaves(out), tree_leaves(res)):
                if isinstance(was, torch.Tensor):
                    made[id(was)] = now


def test_the_captured_step_replays_to_the_eager_numbers_on_the_cpu(device_engine, monkeypatch):
    """What CUDA-graph capture assumes of ``loop.StepProgram``'s step — the same operators with the same numbers
    every step, reading only its fixed buffers and the state it updates in place — checked without a GPU: the
    step is recorded once (``_Recording``) and replayed for every later step of the epoch, as a graph is. A
    number the step takes from Python (a learning rate, a step count, a bias correction) or reads back would be
    baked in and the replayed epochs would drift from eager ones. Parameters, Adam's state and losses: bit for
    bit, over epochs with a client absent and StepLR stepping."""
    from fedgca.training import loop

    recordings = []

    def record_and_replay(self):
        self.graph = _Recording()
        with self.graph:
            self.step()  # the recorded step runs, as the eager one would
        recordings.append(self.graph)

    real_init = loop.StepProgram.__init__

    def capturing_init(self, *args, **kw):
        real_init(self, *args, **kw)
        self.capture = True

    ids, shards = list(range(5)), _shards([400, 37, 350, 260, 180])
    adam = AdamConfig(lr=1e-2, lr_step=3, lr_gamma=0.5)
    eager, replayed = (StackedModels([init_model(100, (D,), i) for i in ids], adam) for _ in range(2))
    losses = {}
    for name, models in (("eager", eager), ("replayed", replayed)):
        with monkeypatch.context() as mp:
            if name == "replayed":
                mp.setattr(loop.StepProgram, "__init__", capturing_init)
                mp.setattr(loop.StepProgram, "_capture_and_replay", record_and_replay)
            losses[name] = [_epoch(models, shards, ids, e, torch.tensor([True, e != 1, True, True, True]))
                            for e in range(4)]
    assert len(recordings) == 4 and sum(r.replays for r in recordings) == 4 * 6  # 8 steps an epoch: 1 eager,
    # 1 recorded, 6 replayed
    for a, b in zip(losses["eager"], losses["replayed"]):
        assert torch.equal(a, b)
    for k in eager.params:
        assert torch.equal(eager.params[k], replayed.params[k]), k
    for a, b in zip(_tensors_of(eager.optim.state_dict()), _tensors_of(replayed.optim.state_dict())):
        assert torch.equal(a, b)


def _tensors_of(obj) -> list:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("method", methods.names())
def test_every_method_runs_under_the_device_engine_on_the_run_device_only(method, device_engine, tmp_path, data_dir):
    """Every registered method, under the device engine and the meta-device trap of tests/test_device.py (a tensor
    made without the run's device fails the run): it runs, and its final AUROC is within 0.5 pp of the CPU
    engine's."""
    from test_device import _cfg, meta_default_device

    from fedgca.simulation.runner import run

    with meta_default_device():
        dev = run(_cfg(method), tmp_path / "device", data_dir=data_dir, progress=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stacked, "device_engine", lambda device: False)
        cpu = run(_cfg(method), tmp_path / "cpu", data_dir=data_dir, progress=False)
    assert abs(dev["final"]["auroc"] - cpu["final"]["auroc"]) < 0.005


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_epoch_on_the_gpu_synchronises_no_more_for_more_steps():
    """CUDA's own count of synchronising calls (``set_sync_debug_mode``): an epoch of 2 steps and one of 16 make
    the same number, so none is made per step."""
    import warnings

    counts = {}
    for rows in (100, 800):
        ids = [0, 1, 2]
        models = StackedModels([init_model(100, (D,), i) for i in ids], device="cuda")
        host = _shards([rows, rows // 2, rows - 13])
        shards = ClientShards(host.x.cuda(), host.sizes)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                _epoch(models, shards, ids, 0)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts[rows] = sum("synchroniz" in str(w.message) for w in caught)
    assert counts[100] == counts[800], counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_captured_step_gives_the_eager_steps_numbers(monkeypatch):
    """On CUDA an epoch of at least ``GRAPH_MIN_STEPS`` steps captures its step once and replays it: the same
    parameters as every step eager (FEDGCA_CUDA_GRAPHS=0), and a graph was captured."""
    from fedgca.training import loop

    captured = []
    real = loop.StepProgram._capture_and_replay
    monkeypatch.setattr(loop.StepProgram, "_capture_and_replay", lambda self: captured.append(1) or real(self))
    ids = list(range(6))
    host = _shards([400, 350, 120, 400, 260, 90])
    shards = ClientShards(host.x.cuda(), host.sizes)
    stacks = {}
    for graphs in ("1", "0"):
        monkeypatch.setenv("FEDGCA_CUDA_GRAPHS", graphs)
        models = StackedModels([init_model(100, (D,), i) for i in ids], device="cuda")
        for epoch in range(2):
            _epoch(models, shards, ids, epoch)
        stacks[graphs] = models
    assert captured and not loop._graphs_failed
    for k in stacks["1"].params:
        assert torch.equal(stacks["1"].params[k], stacks["0"].params[k]), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_full_covariance_gmm_on_the_gpu_is_the_cpus():
    """The device engine's GCA clustering on CUDA (float64, batched over 3 runs) against the same fits on the CPU
    and scikit-learn's: the same EM iterations, means and soft counts to 1e-9."""
    from sklearn.mixture import GaussianMixture

    from fedgca.protocol.clustering import GMMBackend

    rng = np.random.default_rng(0)
    Zs = [rng.normal(scale=3.0, size=(20, 6))[rng.integers(0, 20, 900)] + rng.normal(size=(900, 6)) for _ in range(3)]
    gpu = [GMMBackend(20, engine="torch", random_state=i, device="cuda") for i in range(3)]
    assert GMMBackend.fit_batch(gpu, Zs) == [None, None, None]
    for i, (m, Z) in enumerate(zip(gpu, Zs)):
        cpu = GMMBackend(20, engine="torch", random_state=i).fit(Z)
        ref = GaussianMixture(20, covariance_type="full", init_params="k-means++", random_state=i).fit(Z)
        assert m.n_iter_ == cpu.n_iter_ == ref.n_iter_
        np.testing.assert_allclose(m.means_, cpu.means_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(m.means_, ref.means_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(m.counts_, ref.predict_proba(Z).sum(0), rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kmeans_on_the_gpu_is_the_cpus_and_sklearns():
    """The device engine's K-means backend on CUDA (float64, batched over 3 runs) against scikit-learn's KMeans:
    the same labels and iterations, centres to 1e-9."""
    from sklearn.cluster import KMeans

    from fedgca.protocol.clustering import KMeansBackend

    rng = np.random.default_rng(1)
    Zs = [rng.normal(scale=3.0, size=(20, 6))[rng.integers(0, 20, 900)] + rng.normal(size=(900, 6)) for _ in range(3)]
    gpu = [KMeansBackend(20, random_state=i, engine="torch", device="cuda") for i in range(3)]
    assert KMeansBackend.fit_batch(gpu, Zs) == [None, None, None]
    for i, (m, Z) in enumerate(zip(gpu, Zs)):
        ref = KMeans(20, n_init=10, random_state=i).fit(Z)
        assert m.n_iter_ == ref.n_iter_ and np.array_equal(m.labels_, ref.labels_)
        np.testing.assert_allclose(m.centroids_, ref.cluster_centers_, rtol=0, atol=1e-9)
