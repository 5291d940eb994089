"""Shared pytest fixtures."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Tests compute as fedgca runs do: one torch intra-op thread (``fedgca run``'s default; sweeps give each
# worker cores // workers). A multi-threaded matmul splits its sums by shape — scoring one global model
# ([1, rows, d]) is split differently from scoring it in every client's slot — so the byte-identity
# checks (simulator ≡ Flower) hold at a fixed thread count, and this is the one every run uses.
from fedgca.threads import limit_threads  # noqa: E402

limit_threads(1)

# Scratch directories in RAM where the machine has room there (Linux's /dev/shm; a container's is often 64 MB, and
# a run of the suite writes ~300 MB), unless $TMPDIR says otherwise: every run fsyncs its checkpoint and outputs each
# round (the power-loss rule, fedgca.rundir), which no test can exercise, and on a disk those waits cost ~10 % (four
# modules one after another: 112 s on /tmp's disk, 101 s in RAM). The code path is the same; only the disk is
# faster. The processes the tests start inherit it.
_RAM = Path("/dev/shm")
if "TMPDIR" not in os.environ and _RAM.is_dir() and os.access(_RAM, os.W_OK | os.X_OK) \
        and shutil.disk_usage(_RAM).free >= 2 * 2**30:
    import tempfile

    os.environ["TMPDIR"] = str(_RAM)
    tempfile.tempdir = None  # read $TMPDIR again

# The order xdist hands modules to its two workers (--dist loadfile --no-loadscope-reorder: this order): the modules
# with the most tests first, as xdist's own reordering would, except that the two long modules with few tests
# (Ray's, 80 s; the README's fresh interpreters, 45 s) go mid-way. Handed out last, either left the other core
# idle at the end (40 s of a 341 s run); all long modules first made them start processes at once (354 s).
EARLY = ("test_ray", "test_readme_own_data")


def pytest_collection_modifyitems(config, items):
    count: dict[str, int] = {}
    for item in items:
        count[item.path.stem] = count.get(item.path.stem, 0) + 1
    items.sort(key=lambda item: -(25 if item.path.stem in EARLY else count[item.path.stem]))  # stable


# The project's read-only shared data sits beside the repository (../shared/data).
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Root of the real dataset files (``$FEDGCA_DATA_DIR`` or ../shared/data); skip if absent."""
    path = Path(os.environ.get("FEDGCA_DATA_DIR", DEFAULT_DATA_DIR))
    if not path.is_dir():
        if os.environ.get("CI"):  # CI must test the real files, never skip past them
            pytest.fail(f"dataset directory {path} not found (set FEDGCA_DATA_DIR)")
        pytest.skip(f"dataset directory {path} not found (set FEDGCA_DATA_DIR)")
    return path


@pytest.fixture(scope="module")
def cluster():
    """A head node without CPUs (the driver's) and two worker nodes of one CPU each, all on 127.0.0.1 (module
    scope: test_ray.py's tests share one; its node-removing test comes last)."""
    import ray
    from ray.cluster_utils import Cluster

    from fedgca.ray_local import LOOPBACK, pin_loopback

    pin_loopback()
    node = {"node_ip_address": LOOPBACK, "include_dashboard": False, "object_store_memory": 80 * 2**20}
    c = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 0})
    workers = [c.add_node(**node, num_cpus=1) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    yield c, workers, node
    ray.shutdown()
    c.shutdown()


class RunKilled(Exception):
    """Raised where a test kills a simulated run (``kill_after_round``)."""


@pytest.fixture
def kill_after_round(monkeypatch):
    """``kill_after_round(run_callable, r)``: call it with the runner's progress replaced by one that raises
    ``RunKilled`` once round ``r`` (0-based) is checkpointed — a run killed at that moment."""
    from fedgca.simulation import runner

    def kill(call, r: int):
        class Killer:
            def __init__(self, *a, **k):
                pass

            def set(self, *a):
                pass

            def logging(self):
                import contextlib

                return contextlib.nullcontext()

            def done_round(self, done, row):
                if done == r:
                    raise RunKilled

        with monkeypatch.context() as m:
            m.setattr(runner, "_Progress", Killer)
            with pytest.raises(RunKilled):
                call()

    return kill


@pytest.fixture
def wbc_federation(data_dir):
    """``wbc_federation(options, tamper)``: 42_WBC's federation (2 clients) for ``options``; ``tamper``: its test
    labels permuted and its test rows shuffled and scaled — what no label-free choice may notice."""
    import numpy as np

    from fedgca.binding import bind
    from fedgca.data.source import open_source
    from fedgca.simulation.federation import build_federation

    source = open_source(data_dir / "adbench" / "42_WBC.npz")

    def build(options: dict, tamper: bool):
        cfg, dataset = bind(options, source)
        fed = build_federation(cfg, source, dataset)
        if tamper:
            rng = np.random.default_rng(1)
            fed.dataset.test_y = rng.permutation(fed.dataset.test_y)
            fed.test_x = fed.test_x[rng.permutation(len(fed.test_x))] * 3.0
        return cfg, fed

    return build


# The Flower deployment scenario (tests/deploy_scenario.py) is mostly waiting for Flower's heartbeat verdict on a
# killed node: the suite starts it as a process of its own as soon as it has collected the tests that read it, so
# that the wait overlaps the other tests instead of holding a worker. One process starts it (xdist's gw0, or the
# only one); the tests' fixture runs it itself if nothing did.
_SCENARIO = pytest.StashKey()


def pytest_collection_finish(session):
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    if not any("deployed" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    data = Path(os.environ.get("FEDGCA_DATA_DIR", DEFAULT_DATA_DIR))
    if not data.is_dir():
        return  # the tests skip (or, in CI, fail) on their own
    import subprocess
    import sys

    from deploy_scenario import claim, scenario_dir

    root = scenario_dir(session.config)
    if claim(root):
        with open(root / "scenario.log", "w") as log:
            session.config.stash[_SCENARIO] = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("deploy_scenario.py")), str(root), str(data)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def pytest_sessionfinish(session, exitstatus):
    """A stopped session stops the scenario (its own handler stops the deployment); else it may still be what
    another worker's tests wait for, and this process waits for it."""
    import subprocess

    proc = session.config.stash.get(_SCENARIO, None)
    if proc is None:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail:
        proc.terminate()
    try:
        proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout=60)
