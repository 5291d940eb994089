"""``fedgca compare``: GCA and the baselines on the same data, partitions and seeds (the runs; their tables
are rendered by ``fedgca.reporting.comparison``)."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from fedgca import methods as registry
from fedgca.config import SEEDS, RunConfig

log = logging.getLogger("fedgca")

def grid(base: RunConfig, datasets, methods, seeds, source=None, options: dict | None = None) -> list[RunConfig]:
    """One canonical config per (dataset, method, seed), each method at the dataset's preset.

    Own data (``source``, a :class:`~fedgca.data.DataSource`): one dataset, each seed bound to it
    (``fedgca.binding.bind``): ``options``, the options the user set, and the rest from the data
    (without ``options``, every field of ``base`` counts as set).
    """
    from fedgca.experiments.sweep_spec import canonical

    if source is None:
        return [canonical(dataclasses.replace(base, dataset=d, method=m, seed=s))
                for d in datasets for m in methods for s in seeds]
    from fedgca.binding import bind

    if options is None:
        options = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name != "dataset"}
    options = {k: v for k, v in options.items() if k not in ("dataset", "method", "seed")}
    bound = {}
    for s in seeds:
        bound[s], _ = bind({**options, "seed": s}, source)
    return [canonical(dataclasses.replace(bound[s], method=m)) for m in methods for s in seeds]


def run_grid(configs: list[RunConfig], root: Path, *, data_dir=None, sources: dict | None = None,
             executor=None) -> list[dict]:
    """Run every config of a comparison (``grid``) not already finished in ``root``; resume unfinished ones.

    A comparison is a sweep: same run directories (``root/runs/<config key>``), ledger, skipping,
    resuming and executors (``experiments/executors.py``) as ``fedgca sweep``, so a comparison and a sweep that
    share a directory share their runs. ``data_dir``: the built-in datasets'; ``sources``: own data's by name.
    """
    from fedgca.experiments import sweep

    # the table is read only when complete: start the longest runs first (the shortest makespan)
    result = sweep.run_sweep(configs, root, executor=executor, data_dir=data_dir, sources=sources,
                             order="longest-first")
    if result["failed"]:
        raise RuntimeError(f"{len(result['failed'])} run(s) failed (see {Path(root) / sweep.LEDGER}): "
                           + "; ".join(str(f) for f in result["failed"])[:500])
    return [json.loads((sweep.run_dir(root, c) / sweep.SUMMARY).read_text()) for c in configs]


def attack_grid(base: RunConfig, datasets, methods, seeds, root: Path, data_dir=None,
                options: dict | None = None, *, sources: dict | None = None) -> list[dict]:
    """SPEC §6 on client 0 of every attackable run of the grid (skipping runs attacked already): attack records."""
    from fedgca.attacks.run import attack_run
    from fedgca.data.source import source_for
    from fedgca.experiments import sweep

    records = []
    attacked = [m for m in methods if m in registry.names(attack=True)]
    for cfg in grid(base, datasets, attacked, seeds, _own(datasets, sources), options):
        out = sweep.run_dir(root, cfg)
        done = out / "attack.json"
        records.append(json.loads(done.read_text()) if done.exists() else
                       attack_run(out, victim=0, source=source_for(cfg.dataset, data_dir, sources)))
    return records


def _own(datasets, sources: dict | None):
    """Own data's source when the grid is over one own dataset (``grid`` binds each seed to it), else None."""
    own = [sources[d] for d in datasets if sources and d in sources and not sources[d].is_builtin]
    if own and len(datasets) > 1:
        raise ValueError("a comparison over own data is over that one dataset")
    return own[0] if own else None


DEFAULT_METHODS = registry.names(in_paper=True)  # the paper's seven, in table order (DP-GCA etc. on request)
DEFAULT_SEEDS = SEEDS
