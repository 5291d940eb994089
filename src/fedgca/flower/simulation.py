"""Local Flower simulations of a fedgca run: the real Flower apps, no SuperLink.

``simulate(cfg, out_dir, engine=...)``:

* ``engine="inprocess"`` (default): :mod:`fedgca.flower.inprocess` — every
  node's ClientApp runs in this process, one message at a time.
* ``engine="ray"``: Flower's Simulation Engine (``flwr.simulation.run_simulation``;
  needs ``pip install "flwr[simulation]"``, i.e. Ray).

Both give node i the node config ``partition-id=i num-partitions=C``, so
client i holds the simulator's partition i, and both produce the files of
:mod:`fedgca.flower.server` in ``out_dir``.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from fedgca.config import RunConfig
from fedgca.flower.config import to_run_config
from fedgca.flower.nodestate import NODE_DEFAULTS_ENV, STATE_DIR
from fedgca.ray_local import pin_loopback
from fedgca.threads import available_cores

log = logging.getLogger("fedgca.flower")

ENGINES = ("inprocess", "ray")
NODE_STATE = "node-state"  # under a simulation's out-dir: the nodes' saved client states while the run lasts


def node_configs(cfg: RunConfig, data_dir=None, extra: dict[int, dict] | None = None) -> list[dict]:
    cfg = cfg.resolved()
    out = []
    for i in range(cfg.clients):
        nc = {"partition-id": i, "num-partitions": cfg.clients, "cache-dir": ""}  # in memory already
        if data_dir:
            nc["data-dir"] = str(data_dir)
        nc.update((extra or {}).get(i, {}))
        out.append(nc)
    return out


def own_data_nodes(source, out_dir, cfg: RunConfig | None = None, dataset=None) -> dict[int, dict]:
    """Node configs for own data in a directory of per-site files: one node per client of the simulator's
    federation — with ``cfg`` and ``dataset`` (bound), the sites the simulator keeps after ``--small-sites``, in its
    client order; without them every site file — each reading its site's file with the run's schema, written to
    ``out_dir/schema.json`` (so a --test-split given on the command line reaches the nodes too). ``site-index`` is the
    site's place among all the files: the per-site test split draws with it, as the simulator does."""
    from fedgca.data.partition import check_per_site
    from fedgca.data.readers import file_label, site_files
    from fedgca.runrecord import client_sites

    path = Path(source.path or "")
    if not path.is_dir() or source.schema is None:
        raise ValueError("a Flower simulation of own data needs a directory of per-site files and a schema "
                         "(--data DIR --schema S.json): each node reads one site's file")
    if source.schema.test_split != "per-site":
        raise ValueError(f"a Flower simulation over per-site files evaluates each node on its own site's rows; the "
                         f"schema's {source.schema.test_split!r} test split draws one test set from all sites, which "
                         "no node holds: add --test-split per-site (and `fedgca run` with it gives the same numbers)")
    if cfg is not None:
        check_per_site(cfg.partition, cfg.small_sites, cfg.spec.pooled)  # the simulator's rule: client i is site i
    files = sorted(site_files(path), key=file_label)
    if source.schema.test_file:
        files = [f for f in files if f.name != source.schema.test_file]
    labels = [file_label(f) for f in files]
    clients = (client_sites(cfg, dataset) if dataset is not None else None) or labels
    schema_path = Path(out_dir) / "schema.json"
    schema_path.parent.mkdir(parents=True, exist_ok=True)
    source.schema.save(schema_path)
    return {i: {"data-path": str(files[labels.index(site)].resolve()), "schema-path": str(schema_path.resolve()),
                "client-id": i, "site-index": labels.index(site)} for i, site in enumerate(clients)}


def simulate(cfg: RunConfig, out_dir, *, engine: str = "inprocess", data_dir=None, source=None, dataset=None,
             node_extra: dict[int, dict] | None = None, client_app=None, resume: bool = False,
             **flower_options) -> dict:
    """Run ``cfg`` through the Flower apps locally; returns the summary (also in ``out_dir/summary.json``).

    ``source``/``dataset``: own data in a directory of per-site files (a :class:`~fedgca.data.DataSource` and its
    bound dataset): one node per client of the simulator's federation (:func:`own_data_nodes`), and the summary's
    ``data`` block as the simulator writes it. ``client_app``: another ClientApp to run on every node instead of
    fedgca's (e.g. fedgca's handlers behind your own mods or wrappers).

    Every node writes its deployed detector under ``out_dir/clients/`` and keeps its client's state under
    ``out_dir/node-state/`` (each client's files deleted once it deployed): ``resume`` continues a run whose server was stopped, from its
    checkpoint, with each node where that checkpoint left it (``fedgca.flower.checkpoint``, ``nodestate``). The Ray
    engine gives its nodes no node configs: they get the same two directories from ``$FEDGCA_NODE_DEFAULTS``
    (``client_app.node_defaults``).

    Everything that can refuse the run is checked before anything is written; a run that fails before its clients
    are registered leaves no directory it made.
    """
    from fedgca import privacy
    from fedgca.flower.server_app import make_server_app

    if client_app is None:
        from fedgca.flower.client_app import app as client_app

    cfg = cfg.resolved()
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    own = source is not None and not source.is_builtin
    if own:
        privacy.refuse_plain_statistics(cfg)  # the nodes fit the shared encoding from per-site statistics
    if (own or node_extra) and engine == "ray":
        raise ValueError("the Ray engine gives nodes only partition-id/num-partitions; use engine='inprocess'")
    out = Path(out_dir)
    made = not out.exists()
    # each node writes its deployed detector where the simulator does, and keeps its client's state on "its disk"
    per_node = {"detector-dir": str(out.resolve()), STATE_DIR: str((out / NODE_STATE).resolve())}
    try:
        if own:
            node_extra = {i: {**nc, **(node_extra or {}).get(i, {})}
                          for i, nc in own_data_nodes(source, out, cfg, dataset).items()}
        if engine != "ray":
            node_extra = {i: {**per_node, **(node_extra or {}).get(i, {})} for i in range(cfg.clients)}
        run_config = to_run_config(cfg, out_dir=str(out.resolve()), resume=resume, **flower_options)
        server_app = make_server_app(run_config, data=dataset if own else None)
        if engine == "inprocess":
            from fedgca.flower.inprocess import run_inprocess

            run_inprocess(server_app, client_app, node_configs(cfg, data_dir, node_extra))
        else:
            _run_ray(server_app, client_app, cfg, data_dir, per_node)
    except BaseException:
        if made and out.is_dir() and not (out / "config.json").exists():  # refused before registration ended
            shutil.rmtree(out, ignore_errors=True)
        raise
    return json.loads((out / "summary.json").read_text())


def _run_ray(server_app, client_app, cfg: RunConfig, data_dir, node_defaults: dict) -> None:
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise RuntimeError('the Ray engine needs Flower\'s simulation extra: pip install "flwr[simulation]==1.41.*"')
    from flwr.simulation import run_simulation

    if data_dir:  # Ray workers inherit the environment; nodes read $FEDGCA_DATA_DIR
        os.environ["FEDGCA_DATA_DIR"] = str(Path(data_dir).resolve())
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    # Ray's nodes have no node configs: they inherit this for the run (and only this run: in-process nodes after it
    # must not pick it up)
    saved = os.environ.get(NODE_DEFAULTS_ENV)
    os.environ[NODE_DEFAULTS_ENV] = json.dumps(node_defaults)
    try:
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=cfg.clients,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       # the local Ray instance listens on the loopback interface only
                                       "init_args": {"num_cpus": available_cores(), **pin_loopback()}})
    finally:
        if saved is None:
            os.environ.pop(NODE_DEFAULTS_ENV, None)
        else:
            os.environ[NODE_DEFAULTS_ENV] = saved
