"""Vision datasets and the vision AE (SPEC §3, §4): loaders, safe unpickling, invariants."""
from __future__ import annotations

import gzip
import io
import json
import math
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgca.data import iid_partition
from fedgca.data.errors import DataError
from fedgca.data.vision import (
    CIFAR_TEST_BATCH,
    CIFAR_TRAIN_BATCHES,
    class_pair,
    load_vision,
    read_idx,
    read_images,
    safe_unpickle,
)
from fedgca.models import build_model, param_count
from fedgca.models.conv import ConvAE, conv_param_count

# --------------------------------------------------------------------------- Fashion-MNIST, real files


@pytest.fixture(scope="module")
def fmnist(data_dir):
    if not (data_dir / "fashion_mnist" / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Fashion-MNIST files not in the data directory")
    return load_vision("fashion_mnist", data_dir, seed=100, download=False)


def test_fmnist_seed100(fmnist):
    assert fmnist.kind == "vision"
    assert fmnist.info["normal"] == [2] and fmnist.info["anomaly"] == [8]
    assert fmnist.train.shape == (6000, 1, 28, 28)
    assert fmnist.test_x.shape == (2000, 1, 28, 28)
    assert fmnist.train.dtype == np.float32 and fmnist.test_x.dtype == np.float32
    assert fmnist.test_y.dtype == np.int64
    assert int(fmnist.test_y.sum()) == 1000 and set(np.unique(fmnist.test_y)) == {0, 1}
    for x in (fmnist.train, fmnist.test_x):
        assert x.min() == -1.0 and x.max() == 1.0
    assert fmnist.input_shape == (1, 28, 28)
    # scaling is x / 127.5 - 1: every value is k / 127.5 - 1 for an integer k
    k = (fmnist.train[:50] + 1.0) * 127.5
    assert np.allclose(k, np.rint(k), atol=1e-3)


@pytest.mark.parametrize("seed,pair", [(200, (0, 4)), (300, (9, 5))])
def test_fmnist_other_seeds(data_dir, seed, pair):
    if not (data_dir / "fashion_mnist" / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Fashion-MNIST files not in the data directory")
    assert class_pair(seed) == pair
    ds = load_vision("fashion_mnist", data_dir, seed=seed, download=False)
    assert (ds.info["normal"], ds.info["anomaly"]) == ([pair[0]], [pair[1]])
    assert ds.train.shape == (6000, 1, 28, 28)
    assert len(ds.test_y) == 2000 and int(ds.test_y.sum()) == 1000


def test_class_pair_rule():
    assert class_pair(100) == (2, 8)
    for seed in (1, 7, 12345):
        a, b = class_pair(seed)
        assert a != b and 0 <= a < 10 and 0 <= b < 10
        assert class_pair(seed) == (a, b)


@pytest.mark.parametrize("n,expected", [(6000, 600), (5000, 500)])
def test_iid_uploads_per_round(n, expected):
    """SPEC §4 invariant: U = Σ floor(ρ N_i) with C = 20, ρ = 0.1 (F-MNIST 600, CIFAR-10 500)."""
    shards = iid_partition(n, 20, 100)
    sizes = [len(s) for s in shards]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
    assert sum(math.floor(0.1 * s) for s in sizes) == expected


def test_iid_uploads_real_fmnist(fmnist):
    sizes = [len(s) for s in iid_partition(len(fmnist.train), 20, 100)]
    assert sum(math.floor(0.1 * s) for s in sizes) == 600


# --------------------------------------------------------------------------- Fashion-MNIST, synthetic IDX


def _idx(path: Path, magic: int, arr: np.ndarray) -> None:
    header = struct.pack(">i", magic) + struct.pack(f">{arr.ndim}i", *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def _fake_fmnist(root: Path, *, image_magic: int = 2051, truncate: bool = False) -> Path:
    d = root / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("t10k", 20)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        if truncate and split == "train":
            images = images[:, :27]  # header still says 28 rows
            data = struct.pack(">iiii", image_magic, n, 28, 28) + images.tobytes()
            with gzip.open(d / f"{split}-images-idx3-ubyte.gz", "wb") as f:
                f.write(data)
        else:
            _idx(d / f"{split}-images-idx3-ubyte.gz", image_magic, images)
        _idx(d / f"{split}-labels-idx1-ubyte.gz", 2049, labels)
    return root


def test_idx_synthetic_roundtrip(tmp_path):
    root = _fake_fmnist(tmp_path)
    ds = load_vision("fashion_mnist", root, seed=100, download=False)
    assert ds.train.shape == (4, 1, 28, 28) and ds.test_x.shape == (4, 1, 28, 28)
    assert ds.test_y.tolist() == [0, 1, 0, 1]
    raw = read_idx(root / "fashion_mnist" / "train-images-idx3-ubyte.gz", 2051)
    np.testing.assert_array_equal(ds.train[0, 0], raw[2] / np.float32(127.5) - 1)


def test_idx_bad_magic(tmp_path):
    root = _fake_fmnist(tmp_path, image_magic=2049)
    with pytest.raises(DataError, match="magic"):
        load_vision("fashion_mnist", root, download=False)


def test_idx_truncated(tmp_path):
    root = _fake_fmnist(tmp_path, truncate=True)
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz"):
        load_vision("fashion_mnist", root, download=False)


def test_idx_not_gzip(tmp_path):
    p = tmp_path / "x-idx1-ubyte.gz"
    p.write_bytes(b"this is not gzip")
    with pytest.raises(DataError, match="gzip"):
        read_idx(p, 2049)


def test_missing_files_offline(tmp_path):
    for name, expected in (("fashion_mnist", "t10k-labels-idx1-ubyte.gz"), ("cifar10", "cifar-10-python.tar.gz")):
        with pytest.raises(DataError) as e:
            load_vision(name, tmp_path, download=False)
        assert str(tmp_path / name) in str(e.value) and expected in str(e.value)


# --------------------------------------------------------------------------- CIFAR-10, generated canonical files


def _cifar_batches(per_class_train: int = 3, per_class_test: int = 2) -> dict[str, dict]:
    """Small batches in the canonical format: dict with b"data" uint8 [n, 3072], b"labels" list."""
    rng = np.random.default_rng(1)
    out = {}
    for i, name in enumerate((*CIFAR_TRAIN_BATCHES, CIFAR_TEST_BATCH)):
        k = per_class_test if name == CIFAR_TEST_BATCH else per_class_train
        labels = [int(c) for c in np.tile(np.arange(10), k)]
        data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
        data[0, 0], data[0, 1] = 0, 255
        out[name] = {
            b"batch_label": f"batch {i}".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}_{j}.png".encode() for j in range(len(labels))],
        }
    return out


def _write_dir(root: Path, batches: dict[str, dict], override: dict[str, bytes] | None = None) -> Path:
    d = root / "cifar10" / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for name, batch in batches.items():
        blob = (override or {}).get(name) or pickle.dumps(batch, protocol=2)
        (d / name).write_bytes(blob)
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"x"] * 10}, protocol=2))
    return root


def _write_tar(root: Path, batches: dict[str, dict], override: dict[str, bytes] | None = None) -> Path:
    d = root / "cifar10"
    d.mkdir(parents=True)
    with tarfile.open(d / "cifar-10-python.tar.gz", "w:gz") as tf:
        for name, batch in batches.items():
            blob = (override or {}).get(name) or pickle.dumps(batch, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    return root


def _check_cifar(ds, batches):
    n_train = sum(b[b"labels"].count(2) for n, b in batches.items() if n != CIFAR_TEST_BATCH)
    assert ds.train.shape == (n_train, 3, 32, 32) and ds.train.dtype == np.float32
    test = batches[CIFAR_TEST_BATCH]
    assert ds.test_x.shape == (4, 3, 32, 32)
    assert ds.test_y.tolist() == [0, 1, 0, 1]  # labels 2, 8, 2, 8 in file order
    # First training image = first label-2 row of data_batch_1, R/G/B planes of 32x32.
    first = batches["data_batch_1"]
    row = first[b"data"][first[b"labels"].index(2)]
    np.testing.assert_array_equal(ds.train[0], row.reshape(3, 32, 32) / np.float32(127.5) - 1)
    row = test[b"data"][test[b"labels"].index(8)]
    np.testing.assert_array_equal(ds.test_x[1], row.reshape(3, 32, 32) / np.float32(127.5) - 1)
    assert -1.0 <= ds.train.min() and ds.train.max() <= 1.0


@pytest.mark.parametrize("layout", ["dir", "tar"])
def test_cifar_canonical(tmp_path, layout):
    batches = _cifar_batches()
    root = (_write_dir if layout == "dir" else _write_tar)(tmp_path, batches)
    ds = load_vision("cifar10", root, seed=100, download=False)
    _check_cifar(ds, batches)
    assert ds.info["files"] == ["cifar-10-batches-py" if layout == "dir" else "cifar-10-python.tar.gz"]
    if layout == "tar":  # read in place, nothing extracted
        assert sorted(p.name for p in (root / "cifar10").iterdir()) == ["cifar-10-python.tar.gz"]


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("layout", ["dir", "tar"])
def test_cifar_malicious_pickle_refused(tmp_path, layout):
    marker = tmp_path / "pwned"
    batches = _cifar_batches()
    evil = dict(batches["data_batch_2"])
    evil[b"labels"] = [_Evil(marker)]
    root = (_write_dir if layout == "dir" else _write_tar)(
        tmp_path / "root", batches, {"data_batch_2": pickle.dumps(evil, protocol=2)}
    )
    with pytest.raises(DataError, match=r"refusing to unpickle (posix|os|nt)\.system from .*data_batch_2"):
        load_vision("cifar10", root, download=False)
    assert not marker.exists()


def test_restricted_unpickler_refuses_globals(tmp_path):
    marker = tmp_path / "pwned2"
    cases = [
        pickle.dumps(_Evil(marker), protocol=0),
        pickle.dumps(_Evil(marker), protocol=5),
        b"cbuiltins\neval\n(S'print(1)'\ntR.",
        b"csubprocess\nPopen\n(S'true'\ntR.",
        pickle.dumps(_Evil, protocol=2),  # a class reference alone
    ]
    for blob in cases:
        with pytest.raises(DataError, match="refusing to unpickle"):
            safe_unpickle(blob, "blob")
    assert not marker.exists()
    # _codecs.encode only for latin-1 (how protocol 2 stores bytes)
    with pytest.raises(DataError):
        safe_unpickle(b"c_codecs\nencode\n(Vabc\nVrot13\ntR.", "blob")
    assert safe_unpickle(pickle.dumps({b"k": [1, 2.5, "s", None]}, protocol=2), "blob") == {b"k": [1, 2.5, "s", None]}
    arr = safe_unpickle(pickle.dumps(np.arange(6, dtype=np.uint8).reshape(2, 3), protocol=2), "blob")
    np.testing.assert_array_equal(arr, np.arange(6).reshape(2, 3))


def _py2_pickle(batch: dict) -> bytes:
    """A batch byte-for-byte as Python 2 + numpy 1.x write it (protocol 2, BINSTRING, numpy.core)."""

    def s(b: bytes) -> bytes:  # SHORT_BINSTRING / BINSTRING: a Python 2 str
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b

    data = batch[b"data"]
    arr = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + s(b"b") + b"\x87R"
        + b"(K\x01M" + struct.pack("<H", data.shape[0]) + b"M" + struct.pack("<H", data.shape[1]) + b"\x86"
        + b"cnumpy\ndtype\n" + s(b"u1") + b"K\x00K\x01\x87R(K\x03" + s(b"|")
        + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89" + s(data.tobytes()) + b"tb"
    )
    labels = b"](" + b"".join(b"K" + bytes([v]) for v in batch[b"labels"]) + b"e"
    return b"\x80\x02}(" + s(b"batch_label") + s(batch[b"batch_label"]) + s(b"data") + arr + s(b"labels") + labels + b"u."


def test_cifar_python2_pickles(tmp_path):
    """The real batches are Python 2 pickles (numpy.core.multiarray, str keys read as bytes)."""
    batches = _cifar_batches()
    root = _write_dir(tmp_path, batches, {n: _py2_pickle(b) for n, b in batches.items()})
    _check_cifar(load_vision("cifar10", root, seed=100, download=False), batches)


def test_cifar_bad_batch_structure(tmp_path):
    batches = _cifar_batches()
    bad = dict(batches["test_batch"])
    bad[b"data"] = bad[b"data"][:, :100]
    root = _write_dir(tmp_path, batches, {"test_batch": pickle.dumps(bad, protocol=2)})
    with pytest.raises(DataError, match="test_batch"):
        load_vision("cifar10", root, download=False)


# --------------------------------------------------------------------------- ConvAE (SPEC §3)


@pytest.mark.parametrize("shape,params,latent", [((3, 32, 32), 339_219, 1024), ((1, 28, 28), 334_609, 784)])
def test_conv_ae(shape, params, latent):
    torch.manual_seed(0)
    model = build_model(shape)
    assert isinstance(model, ConvAE)
    assert param_count(model) == params == conv_param_count(shape[0])
    assert model.latent_dim == latent and model.input_dim == int(np.prod(shape))
    assert (model.in_channels, model.height, model.width) == shape
    x = torch.randn(4, *shape) * 5
    z = model.encoder(x)
    assert z.shape == (4, latent)
    y = model.decoder(z)
    assert y.shape == x.shape
    out = model(x)
    assert out.shape == x.shape and out.min() >= -1 and out.max() <= 1
    assert not any(isinstance(m, (torch.nn.BatchNorm2d, torch.nn.GroupNorm, torch.nn.LayerNorm)) for m in model.modules())


def test_conv_ae_rejects_odd_sizes():
    with pytest.raises(ValueError):
        ConvAE(1, 30, 30)


# --------------------------------------------------------------------------- read_images


def test_read_images_png_dir(tmp_path):
    from PIL import Image

    d = tmp_path / "pngs"
    d.mkdir()
    grey = np.zeros((28, 28), dtype=np.uint8)
    grey[0, 0], grey[0, 1] = 255, 128
    Image.fromarray(grey).save(d / "a.png")
    rgb = np.full((32, 32, 3), 200, dtype=np.uint8)
    Image.fromarray(rgb).save(d / "b.png")  # wrong size and channels: converted
    Image.fromarray(np.zeros((28, 28, 4), dtype=np.uint8)).save(d / "c.png")
    (d / "notes.txt").write_text("ignored")
    x = read_images(d, (1, 28, 28))
    assert x.shape == (3, 1, 28, 28) and x.dtype == np.float32
    assert x[0, 0, 0, 0] == 1.0 and x[0, 0, 1, 1] == -1.0 and x[0, 0, 0, 1] == pytest.approx(128 / 127.5 - 1, abs=1e-6)
    assert np.allclose(x[1], 200 / 127.5 - 1, atol=1e-6)
    assert x.min() >= -1 and x.max() <= 1
    x3 = read_images(d, (3, 32, 32))
    assert x3.shape == (3, 3, 32, 32)
    assert np.allclose(x3[1], 200 / 127.5 - 1, atol=1e-6)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no .png"):
        read_images(empty, (1, 28, 28))


def test_read_images_npy(tmp_path):
    rng = np.random.default_rng(0)
    u8 = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    np.save(tmp_path / "a.npy", u8)
    x = read_images(tmp_path / "a.npy", (1, 28, 28))
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_array_equal(x[:, 0], u8 / np.float32(127.5) - 1)

    nhwc = rng.integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    np.save(tmp_path / "b.npy", nhwc)
    x = read_images(tmp_path / "b.npy", (3, 32, 32))
    assert x.shape == (2, 3, 32, 32)
    np.testing.assert_array_equal(x, nhwc.transpose(0, 3, 1, 2) / np.float32(127.5) - 1)

    nchw = rng.uniform(-1, 1, size=(2, 3, 32, 32)).astype(np.float64)
    np.save(tmp_path / "c.npy", nchw)
    x = read_images(tmp_path / "c.npy", (3, 32, 32))
    assert x.dtype == np.float32 and np.allclose(x, nchw, atol=1e-6)

    np.save(tmp_path / "wrong.npy", np.zeros((2, 27, 28), dtype=np.uint8))
    with pytest.raises(DataError, match="shape"):
        read_images(tmp_path / "wrong.npy", (1, 28, 28))
    np.save(tmp_path / "range.npy", np.full((1, 1, 28, 28), 3.0, dtype=np.float32))
    with pytest.raises(DataError, match=r"\[-1, 1\]"):
        read_images(tmp_path / "range.npy", (1, 28, 28))
    np.save(tmp_path / "obj.npy", np.array([object()] * 4, dtype=object).reshape(1, 2, 2), allow_pickle=True)
    with pytest.raises(DataError):
        read_images(tmp_path / "obj.npy", (1, 2, 2))
    with pytest.raises(DataError):
        read_images(tmp_path / "missing.npy", (1, 28, 28))


# --------------------------------------------------------------------------- end to end on a tiny IDX set


def test_vision_run_and_score_end_to_end(tmp_path):
    """`fedgca run` on Fashion-MNIST-format files, then `fedgca score` on a PNG directory and an .npy array."""
    import csv

    from PIL import Image

    from fedgca.cli.main import main as cli_main

    root = tmp_path / "data"
    d = root / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 200), ("t10k", 40)):  # 20 normal (class 2) training images for seed 100
        _idx(d / f"{split}-images-idx3-ubyte.gz", 2051, rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8))
        _idx(d / f"{split}-labels-idx1-ubyte.gz", 2049, np.arange(n) % 10)
    out = tmp_path / "run"
    args = ["run", "--dataset", "fashion_mnist", "--method", "gca", "--rounds", "1", "--clients", "2",
            "--k", "2", "--rho", "0.5", "--recon-epochs", "1", "--align-epochs", "1",
            "--data-dir", str(root), "--out", str(out)]
    assert cli_main(args) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["input_shape"] == [1, 28, 28] and s["latent_dim"] == 784 and s["param_count"] == 334_609
    assert s["uploads_per_round"] == 10 and s["bytes_up_per_round"] == 4 * 10 * 784
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, size=(28, 28), dtype=np.uint8)).save(pngs / f"{i}.png")
    np.save(tmp_path / "x.npy", rng.integers(0, 256, size=(4, 28, 28), dtype=np.uint8))
    for source, n in ((pngs, 3), (tmp_path / "x.npy", 4)):
        scores = tmp_path / f"scores-{n}.csv"
        assert cli_main(["score", "--run", str(out), "--client", "1", "--input", str(source),
                         "--output", str(scores)]) == 0
        rows = list(csv.DictReader(scores.open()))
        assert len(rows) == n and {r["anomaly"] for r in rows} <= {"0", "1"}
        assert all(float(r["score"]) >= 0 for r in rows)
