"""A local Ray instance that listens on the loopback interface only (Flower's Ray engine, the Ray executor).

``ray.init(_node_ip_address="127.0.0.1")`` and ``ray start --node-ip-address=127.0.0.1`` are not enough in
Ray 2.55: both replace a loopback address by the machine's network address (``services.
resolve_ip_for_localhost``), and the GCS, raylet and workers then listen on every interface. Ray keeps
to the loopback address only where it believes multi-node clusters are unsupported
(``ray_constants.ENABLE_RAY_CLUSTER`` false, which the environment variable
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets on Linux too). :func:`pin_loopback` sets both, so every process
of an instance started afterwards (and every node of a ``ray.cluster_utils.Cluster``) binds to 127.0.0.1 —
checked by the tests with :func:`node_addresses`. A cluster that spans machines is started with
``ray start --node-ip-address`` on its private network instead (docs/cluster.md), and the executor connects to it
by address.
"""
from __future__ import annotations

import os

LOOPBACK = "127.0.0.1"
_SINGLE_HOST_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR


def pin_loopback() -> dict:
    """Make Ray instances started by this process loopback-only; returns the ``ray.init`` arguments that start a
    new local instance (``address="local"``: not a cluster that ``ray start`` left running) on 127.0.0.1."""
    os.environ[_SINGLE_HOST_ENV] = "0"  # for processes started from here, which read it at import
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silences a FutureWarning; no GPU requested
    import ray._private.ray_constants as constants

    constants.ENABLE_RAY_CLUSTER = False  # this process may have imported Ray before the variable was set
    return {"address": "local", "_node_ip_address": LOOPBACK, "include_dashboard": False}


def node_addresses() -> list[str]:
    """The address that every live node of the connected Ray cluster reports."""
    import ray

    return [n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")]
