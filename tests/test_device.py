"""--device: every tensor of a run is made on the run's device. Without a GPU, the trap: the default device is
``meta`` while a run computes with ``device="cpu"``, so any tensor created without the run's device is a meta
tensor and the run fails. Tests that need a GPU skip where there is none."""
from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch

from fedgca import devices, methods
from fedgca.config import RunConfig
from fedgca.simulation.runner import run


@contextmanager
def meta_default_device():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def _cfg(method: str, **kw) -> RunConfig:
    return RunConfig(**{"dataset": "academic", "method": method, "rounds": 2, "clients": 3, "k": 4,
                        "recon_epochs": 1, "align_epochs": 1, "local_epochs": 1, "device": "cpu", **kw})


def test_the_trap_catches_a_tensor_made_without_the_device():
    with meta_default_device(), pytest.raises((RuntimeError, NotImplementedError)):
        (torch.zeros(3) + torch.ones(3, device="cpu")).sum().item()


@pytest.mark.parametrize("method", methods.names())
def test_every_method_computes_on_the_run_device_only(method, tmp_path, data_dir):
    reference = run(_cfg(method), tmp_path / "ref", data_dir=data_dir, progress=False)
    with meta_default_device():
        trapped = run(_cfg(method), tmp_path / "trap", data_dir=data_dir, progress=False)
    assert (tmp_path / "trap" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()
    assert trapped["device"] == reference["device"] == "cpu"


def test_device_option_is_checked_and_recorded(tmp_path):
    with pytest.raises(ValueError, match="--device: 'gpu0' is not a device"):
        RunConfig("academic", device="gpu0").resolved()
    assert RunConfig("academic", device="cuda:1").key() == RunConfig("academic").key()  # where, not what
    assert devices.resolve("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: this machine's torch sees no CUDA device"):
            devices.resolve("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["gca", "fedavg", "dpgca"])
def test_cuda_agrees_with_the_cpu(method, tmp_path, data_dir):
    cpu = run(_cfg(method), tmp_path / "cpu", data_dir=data_dir, progress=False)
    gpu = run(_cfg(method, device="cuda"), tmp_path / "gpu", data_dir=data_dir, progress=False)
    assert gpu["device"].startswith("cuda")
    for m in ("accuracy", "auroc"):
        assert gpu["final"][m] == pytest.approx(cpu["final"][m], abs=2e-3)
    assert json.loads((tmp_path / "gpu" / "config.json").read_text())["device"] == "cuda"


SMALL = {"surrogate_options": {"max_epochs": 3}, "inversion_options": {"max_steps": 5}}


@pytest.mark.parametrize("method", ["gca", "fedavg"])  # the latent-only flipping attack and white-box inversion
def test_attacks_compute_on_the_run_device_only(method, tmp_path, data_dir):
    from fedgca.attacks.run import attack_run

    run(_cfg(method), tmp_path / "run", data_dir=data_dir, progress=False)
    reference = attack_run(tmp_path / "run", victim=1, data_dir=data_dir, **SMALL)
    with meta_default_device():
        trapped = attack_run(tmp_path / "run", victim=1, data_dir=data_dir, device="cpu", **SMALL)
    assert trapped["ntmse"] == reference["ntmse"] and trapped["delta_cos"] == reference["delta_cos"]


def test_score_and_detectors_compute_on_their_device_only(tmp_path, data_dir):
    import numpy as np

    import fedgca
    from fedgca.cli.main import main as cli_main

    run(_cfg("gca"), tmp_path / "run", data_dir=data_dir, progress=False)
    rows = data_dir / "academic" / "data.csv"
    cli_main(["score", "--run", str(tmp_path / "run"), "--client", "1", "--input", str(rows),
              "--output", str(tmp_path / "ref.csv")])
    result = fedgca.RunResult(tmp_path / "run")
    x = result.detectors[1].prepare(rows)
    expected = result.detectors[1].decision_function(x)
    with meta_default_device():
        assert cli_main(["score", "--run", str(tmp_path / "run"), "--client", "1", "--input", str(rows),
                         "--device", "cpu", "--output", str(tmp_path / "trap.csv")]) == 0
        det = fedgca.RunResult(tmp_path / "run").detectors[1]
        assert np.array_equal(det.decision_function(x), expected)
    assert (tmp_path / "trap.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


@pytest.mark.parametrize("method", ["gca", "fedavg", "dpgca"])
def test_flower_apps_compute_on_the_run_device_only(method, tmp_path, data_dir):
    """The Flower ServerApp and ClientApps (in-process engine) under the trap: the same metrics.csv as without it."""
    from fedgca.flower.simulation import simulate

    # DP-GCA on Flower sets τ on validation rows (its training rows are the protected ones)
    cfg = _cfg(method, **({"val_fraction": 0.2, "threshold": "val-quantile"} if method == "dpgca" else {}))
    simulate(cfg, tmp_path / "ref", data_dir=data_dir, reply_timeout=120)
    with meta_default_device():
        summary = simulate(cfg, tmp_path / "flower", data_dir=data_dir, reply_timeout=120)
    assert (tmp_path / "flower" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()
    assert summary["device"] == "cpu"


def _fmnist_files(root) -> None:
    """Fashion-MNIST-format files of random images (the vision path: conv AE, the GMM's torch engine)."""
    import gzip
    import struct

    import numpy as np

    d = root / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 200), ("t10k", 40)):
        for magic, arr in ((2051, rng.integers(0, 256, size=(n, 28, 28))), (2049, np.arange(n) % 10)):
            kind = "images-idx3" if magic == 2051 else "labels-idx1"
            with gzip.open(d / f"{split}-{kind}-ubyte.gz", "wb") as f:
                f.write(struct.pack(">i", magic) + struct.pack(f">{arr.ndim}i", *arr.shape) + arr.astype(np.uint8).tobytes())


def test_the_vision_path_computes_on_the_run_device_only(tmp_path):
    _fmnist_files(tmp_path / "data")
    cfg = RunConfig("fashion_mnist", rounds=1, clients=2, k=2, rho=0.5, recon_epochs=1, align_epochs=1, device="cpu")
    run(cfg, tmp_path / "ref", data_dir=tmp_path / "data", progress=False)
    with meta_default_device():
        run(cfg, tmp_path / "trap", data_dir=tmp_path / "data", progress=False)
    assert (tmp_path / "trap" / "metrics.csv").read_bytes() == (tmp_path / "ref" / "metrics.csv").read_bytes()


def test_results_come_back_through_one_helper():
    """A tensor's values reach NumPy only through ``devices.to_numpy`` (which moves them to the host first); a
    Flower message's arrays go through ``flower.records.numpy_dict`` (Flower's ``ArrayRecord.to_numpy_ndarrays``):
    a bare ``.numpy()`` on a CUDA tensor is the TypeError that stopped the first H100 run. Static, so it runs (and
    fails on such code) without a GPU."""
    import ast
    from pathlib import Path

    import fedgca

    allowed = {("devices.py", "to_numpy")}
    root = Path(fedgca.__file__).parent
    found = set()

    class Calls(ast.NodeVisitor):
        def __init__(self, rel):
            self.rel, self.owner = rel, None

        def visit_FunctionDef(self, node):
            outer, self.owner = self.owner, node.name
            self.generic_visit(node)
            self.owner = outer

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" and not node.args:
                found.add((self.rel, self.owner, node.lineno))
            self.generic_visit(node)

    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        Calls(rel).visit(ast.parse(path.read_text(), filename=str(path)))
    bare = sorted((rel, line) for rel, owner, line in found if (rel, owner) not in allowed)
    assert not bare, f".numpy() outside devices.to_numpy: {bare}"
    assert {(rel, owner) for rel, owner, _ in found} == allowed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["gca", "fedavg"])
def test_a_cuda_run_gives_the_same_numbers_twice(method, tmp_path, data_dir):
    """Same config and seed, same numbers on the same machine — on a GPU too, where kernels may sum in varying
    orders (atomics; cuBLAS's split-K across streams without CUBLAS_WORKSPACE_CONFIG). Not yet run: if it fails
    there, runs on CUDA need torch's deterministic settings."""
    for name in ("a", "b"):
        run(_cfg(method, device="cuda"), tmp_path / name, data_dir=data_dir, progress=False)
    for f in ("metrics.csv", "metrics_clients.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_vision_path_gives_the_same_numbers_twice_on_cuda(tmp_path):
    """The conv AE on CUDA (cuDNN's convolution backward may accumulate with atomics) and the vision GMM."""
    _fmnist_files(tmp_path / "data")
    cfg = RunConfig("fashion_mnist", rounds=1, clients=2, k=2, rho=0.5, recon_epochs=1, align_epochs=1, device="cuda")
    for name in ("a", "b"):
        run(cfg, tmp_path / name, data_dir=tmp_path / "data", progress=False)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_runs_checkpoint_is_read_back_once_per_dtype_and_resumes(tmp_path, data_dir, kill_after_round):
    """A GPU run's checkpoint is packed (``tensorpack``): one buffer per dtype, each one read back from the device,
    and it resumes to the numbers of the run never killed."""
    from fedgca import tensorpack

    cfg = _cfg("gca", device="cuda", rounds=3)
    whole = run(cfg, tmp_path / "whole", data_dir=data_dir, progress=False)
    kill_after_round(lambda: run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False), 1)
    kept = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert tensorpack.is_packed(kept) and all(b.device.type == "cpu" for b in kept["buffers"])
    # one buffer per (device, dtype) the state had: the GPU's tensors and the few the run keeps on the CPU
    assert len(kept["buffers"]) <= 2 * len({b.dtype for b in kept["buffers"]})
    resumed = run(cfg, tmp_path / "resumed", data_dir=data_dir, progress=False, resume=True)
    for m in ("accuracy", "auroc"):
        assert resumed["final"][m] == pytest.approx(whole["final"][m], abs=1e-6)


