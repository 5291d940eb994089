"""Vision datasets: Fashion-MNIST and CIFAR-10 (SPEC §4), and images to score.

:func:`load_vision` reads the distributors' canonical files from
``<data_dir>/<name>/`` (see ``shared/data/*/SOURCE.md``):

- ``fashion_mnist``: the four gzip-compressed IDX files
  (``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
  ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz``). Headers are
  parsed as big-endian IDX (magic 2051 for images, 2049 for labels, then the
  dimensions); any mismatch raises :class:`DataError`.
- ``cifar10``: the python version, either the directory
  ``cifar-10-batches-py/`` (``data_batch_1`` .. ``data_batch_5``,
  ``test_batch``) or the archive ``cifar-10-python.tar.gz`` whose members are
  read straight from the tar stream (nothing is extracted to disk). The
  directory wins when both are present.

Missing files are fetched with :func:`fedgca.data.download.ensure_files` from the
distributors' URLs with their published MD5s (SPEC §4, "Missing files");
offline, a :class:`DataError` names the directory and the expected files.

Safe loading (SPEC §4): CIFAR-10 batches are Python 2 pickles. They are only
ever read through :class:`RestrictedUnpickler`, whose ``find_class`` admits
exactly what numpy arrays and plain containers need; every other global
(``os.system``, ``builtins.eval``, ``subprocess.Popen``, ...) is refused with
``DataError("refusing to unpickle <module>.<name> from <file>")`` before
anything is called.

Classes (SPEC §4): seed 100 → normal/anomaly 2/8, 200 → 0/4, 300 → 9/5. Any
other seed draws an ordered pair of distinct classes deterministically from
the seed (:func:`class_pair`). Training = every training image of the normal
class, in file order (6,000 Fashion-MNIST, 5,000 CIFAR-10); test = every test
image of the two classes in file order (1,000 + 1,000), ``test_y`` = 1 for the
anomaly class. Pixels are scaled to [−1, 1] as ``x / 127.5 − 1`` (float32),
arrays are ``[N, C, H, W]``.

:func:`read_images` turns new data (a PNG directory or an ``.npy`` array) into
model inputs with the same scaling, for ``fedgca score``.
"""
from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np

from .. import seeding
from . import registry
from .dataset import FederatedDataset, split_info
from .download import ensure_files, resolve_data_dir
from .errors import DataError

__all__ = [
    "CLASS_NAMES",
    "SEED_CLASSES",
    "RestrictedUnpickler",
    "class_pair",
    "load_vision",
    "read_idx",
    "read_images",
    "safe_unpickle",
    "scale_pixels",
]

#: SPEC §4: seed → (normal class, anomaly class).
SEED_CLASSES: dict[int, tuple[int, int]] = {100: (2, 8), 200: (0, 4), 300: (9, 5)}
NUM_CLASSES = 10

CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "fashion_mnist": (
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ),
    "cifar10": (
        "airplane", "automobile", "bird", "cat", "deer",
        "dog", "frog", "horse", "ship", "truck",
    ),
}

FMNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned byte, 1 dimension

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_BATCH = "test_batch"
CIFAR_SHAPE = (3, 32, 32)


# --------------------------------------------------------------------------- classes and scaling


def class_pair(seed: int) -> tuple[int, int]:
    """The (normal, anomaly) classes for ``seed`` (SPEC §4).

    Seeds 100, 200, 300 give 2/8, 0/4, 9/5 as the SPEC fixes. Any other seed
    gives two distinct classes drawn without replacement from 0..9 by
    ``fedgca.seeding.rng(seed, "vision-classes")`` — deterministic, and the
    same for both vision datasets.
    """
    seed = int(seed)
    if seed in SEED_CLASSES:
        return SEED_CLASSES[seed]
    normal, anomaly = seeding.rng(seed, "vision-classes").choice(NUM_CLASSES, size=2, replace=False)
    return int(normal), int(anomaly)


def scale_pixels(x: np.ndarray) -> np.ndarray:
    """uint8 pixels 0..255 → float32 in [−1, 1] as ``x / 127.5 − 1`` (0 → −1, 255 → 1 exactly)."""
    return (np.asarray(x, dtype=np.float32) / np.float32(127.5) - np.float32(1.0)).astype(np.float32, copy=False)


# --------------------------------------------------------------------------- Fashion-MNIST (IDX)


def read_idx(path: Path | str, expected_magic: int) -> np.ndarray:
    """Read one gzip-compressed (or plain) IDX file of unsigned bytes as a uint8 array.

    IDX header (big-endian): a 4-byte magic ``0x00 0x00 <type> <ndim>`` —
    2051 for images (uint8, 3 dims) and 2049 for labels (uint8, 1 dim) — then
    ``ndim`` 4-byte sizes, then the data. The magic must equal
    ``expected_magic`` and the data must have exactly ``prod(sizes)`` bytes;
    otherwise :class:`DataError` names the file.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read gzip-compressed IDX file ({e})") from None
    if len(raw) < 4:
        raise DataError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    (magic,) = struct.unpack(">i", raw[:4])
    if magic != expected_magic:
        kind = "images" if expected_magic == IDX_IMAGES_MAGIC else "labels"
        raise DataError(f"{path}: bad IDX magic number {magic} (expected {expected_magic} for {kind})")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header ({len(raw)} bytes, need {header})")
    dims = struct.unpack(f">{ndim}i", raw[4:header])
    if any(d < 0 for d in dims):
        raise DataError(f"{path}: negative IDX dimension in {dims}")
    size = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != size:
        raise DataError(
            f"{path}: IDX header says {'x'.join(map(str, dims))} = {size} bytes of data, "
            f"file has {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=np.uint8, count=size, offset=header).reshape(dims)


def _read_fmnist_split(dataset_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    img_path = dataset_dir / FMNIST_FILES[f"{split}_images"]
    lbl_path = dataset_dir / FMNIST_FILES[f"{split}_labels"]
    images = read_idx(img_path, IDX_IMAGES_MAGIC)
    labels = read_idx(lbl_path, IDX_LABELS_MAGIC)
    if len(images) != len(labels):
        raise DataError(f"{img_path}: {len(images)} images but {lbl_path.name} has {len(labels)} labels")
    if labels.size and labels.max() >= NUM_CLASSES:
        raise DataError(f"{lbl_path}: label {int(labels.max())} outside 0..{NUM_CLASSES - 1}")
    return images[:, None, :, :], labels.astype(np.int64)


# --------------------------------------------------------------------------- CIFAR-10 (safe pickles)


def _latin1_encode(obj, encoding="utf-8", errors="strict"):
    """Stand-in for ``_codecs.encode`` (how Python 3 writes ``bytes`` at protocol ≤ 2).

    Only the latin-1 text → bytes conversion that pickle itself emits is
    allowed; any other codec is refused.
    """
    if not isinstance(obj, str) or str(encoding).lower().replace("_", "-") not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return obj.encode("latin-1", errors)


def _allowed_globals() -> dict[tuple[str, str], object]:
    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        # Plain containers / values without a dedicated opcode at protocol 2.
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "bytearray"): bytearray,
        ("builtins", "complex"): complex,
    }
    # Python 2 spells the module __builtin__ (the overridden find_class skips pickle's name mapping).
    for (module, name), obj in list(allowed.items()):
        if module == "builtins":
            allowed[("__builtin__", name)] = obj
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
    allowed[("numpy.core.multiarray", "_reconstruct")] = _reconstruct
    allowed[("numpy._core.multiarray", "_reconstruct")] = _reconstruct
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays and plain containers, nothing else (SPEC §4).

    Admitted globals: ``numpy.core.multiarray._reconstruct`` /
    ``numpy._core.multiarray._reconstruct``, ``numpy.ndarray``,
    ``numpy.dtype``, ``_codecs.encode`` restricted to latin-1 (Python 3
    ``bytes`` at protocol ≤ 2) and ``builtins.set/frozenset/bytearray/complex``
    (also as Python 2's ``__builtin__``).
    Lists, tuples, dicts, bytes, strings, ints, floats, bools and ``None`` use
    native opcodes. Any other global — and any persistent id — raises
    :class:`DataError` ``refusing to unpickle <module>.<name> from <source>``
    before it is looked up, so nothing it names is imported or called.
    """

    _ALLOWED: dict[tuple[str, str], object] | None = None

    def __init__(self, file, *, source: str = "<pickle>", **kwargs):
        kwargs.setdefault("encoding", "bytes")
        super().__init__(file, **kwargs)
        self.source = source
        if RestrictedUnpickler._ALLOWED is None:
            RestrictedUnpickler._ALLOWED = _allowed_globals()

    def find_class(self, module: str, name: str):
        obj = self._ALLOWED.get((module, name))
        if obj is None:
            raise DataError(f"refusing to unpickle {module}.{name} from {self.source}")
        return obj

    def persistent_load(self, pid):
        raise DataError(f"refusing to unpickle persistent id {pid!r} from {self.source}")


def safe_unpickle(data: bytes, source: str) -> object:
    """Unpickle ``data`` (a Python 2 / protocol ≤ 5 pickle) with :class:`RestrictedUnpickler`.

    ``encoding="bytes"`` keeps Python 2 ``str`` values as ``bytes`` (the CIFAR
    keys are ``b"data"``, ``b"labels"``). Malformed pickles raise DataError.
    """
    try:
        return RestrictedUnpickler(io.BytesIO(data), source=source, encoding="bytes").load()
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 — any parse failure of untrusted bytes is a data error
        raise DataError(f"{source}: not a valid CIFAR-10 pickle ({type(e).__name__}: {e})") from None


def _cifar_batch(obj: object, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate one unpickled batch dict → (uint8 [n, 3, 32, 32], int64 [n])."""
    if not isinstance(obj, dict):
        raise DataError(f"{source}: expected a dict batch, got {type(obj).__name__}")

    def get(key: str):
        for k in (key.encode(), key):
            if k in obj:
                return obj[k]
        raise DataError(f"{source}: batch has no {key!r} entry (keys: {sorted(map(repr, obj))})")

    data, labels = get("data"), get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        desc = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{source}: 'data' must be a uint8 array of shape [n, 3072], got {desc}")
    try:
        lab = np.asarray(labels)
    except Exception:  # noqa: BLE001
        lab = np.asarray([], dtype=object)
    if lab.ndim != 1 or lab.dtype.kind not in "iu" or len(lab) != len(data):
        raise DataError(f"{source}: 'labels' must be {len(data)} integers, got {type(labels).__name__} of {lab.shape}")
    if lab.size and (lab.min() < 0 or lab.max() >= NUM_CLASSES):
        raise DataError(f"{source}: label outside 0..{NUM_CLASSES - 1}")
    # Row layout: R plane, G plane, B plane, each 32x32 row-major.
    return data.reshape(len(data), *CIFAR_SHAPE), lab.astype(np.int64)


def _cifar_from_dir(batch_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for name in (*CIFAR_TRAIN_BATCHES, CIFAR_TEST_BATCH):
        path = batch_dir / name
        if not path.is_file():
            raise DataError(
                f"{batch_dir}: missing {name}; expected {', '.join((*CIFAR_TRAIN_BATCHES, CIFAR_TEST_BATCH))} "
                f"(or the archive {CIFAR_ARCHIVE} in {batch_dir.parent})"
            )
        out[name] = _cifar_batch(safe_unpickle(path.read_bytes(), str(path)), str(path))
    return out


def _cifar_from_tar(archive: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read the six batches straight from the archive stream (one pass, nothing extracted)."""
    wanted = {f"{CIFAR_DIR}/{n}": n for n in (*CIFAR_TRAIN_BATCHES, CIFAR_TEST_BATCH)}
    out = {}
    try:
        with tarfile.open(archive, "r:*") as tf:
            for member in tf:
                name = member.name[2:] if member.name.startswith("./") else member.name
                if name not in wanted:
                    continue
                source = f"{archive}:{name}"
                if not member.isfile():
                    raise DataError(f"{source}: archive member is not a regular file")
                f = tf.extractfile(member)
                assert f is not None
                out[wanted[name]] = _cifar_batch(safe_unpickle(f.read(), source), source)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataError(f"{archive}: cannot read the archive ({e})") from None
    missing = [m for m, n in wanted.items() if n not in out]
    if missing:
        raise DataError(f"{archive}: archive lacks member(s) {', '.join(missing)}")
    return out


def _read_cifar(dataset_dir: Path) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], list[str]]:
    batch_dir, archive = dataset_dir / CIFAR_DIR, dataset_dir / CIFAR_ARCHIVE
    if batch_dir.is_dir():
        batches, files = _cifar_from_dir(batch_dir), [CIFAR_DIR]
    elif archive.is_file():
        batches, files = _cifar_from_tar(archive), [CIFAR_ARCHIVE]
    else:  # ensure_files ran, so only a non-directory named like the batch dir can get here
        raise DataError(f"{dataset_dir}: expected the directory {CIFAR_DIR}/ or the archive {CIFAR_ARCHIVE}")
    train = [batches[n] for n in CIFAR_TRAIN_BATCHES]
    x_train = np.concatenate([b[0] for b in train])
    y_train = np.concatenate([b[1] for b in train])
    return (x_train, y_train), batches[CIFAR_TEST_BATCH], files


# --------------------------------------------------------------------------- loader


def load_vision(
    name: str, data_dir: Path | str | None = None, *, seed: int = 100, download: bool = True
) -> FederatedDataset:
    """Load ``fashion_mnist`` or ``cifar10`` as SPEC §4 defines it.

    ``data_dir`` is the root holding ``<name>/`` (default: see
    :func:`fedgca.data.download.resolve_data_dir`); missing files are downloaded
    when ``download`` is true. ``seed`` picks the (normal, anomaly) classes
    via :func:`class_pair`. Returns a ``kind="vision"`` dataset with float32
    ``[N, C, H, W]`` arrays in [−1, 1], ``train`` = normal-class training
    images (file order), ``test_x`` / ``test_y`` = the two classes of the
    provided test split (file order, 1 = anomaly). ``preprocessor`` is
    ``None``: the scaling is fixed (:func:`scale_pixels`).
    """
    if name not in ("fashion_mnist", "cifar10"):
        raise DataError(f"unknown vision dataset {name!r}; known: fashion_mnist, cifar10")
    normal, anomaly = class_pair(seed)
    dataset_dir = resolve_data_dir(data_dir) / name
    ensure_files(dataset_dir, registry.get(name).files, download=download)
    if name == "fashion_mnist":
        (x_tr, y_tr), (x_te, y_te) = (_read_fmnist_split(dataset_dir, s) for s in ("train", "test"))
        files = list(FMNIST_FILES.values())
    else:
        (x_tr, y_tr), (x_te, y_te), files = _read_cifar(dataset_dir)
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise DataError(f"{dataset_dir}: training images are {x_tr.shape[1:]} but test images {x_te.shape[1:]}")

    train = scale_pixels(x_tr[y_tr == normal])
    test_rows = np.flatnonzero((y_te == normal) | (y_te == anomaly))
    test_x = scale_pixels(x_te[test_rows])
    test_y = (y_te[test_rows] == anomaly).astype(np.int64)
    if len(train) == 0 or test_y.sum() == 0 or test_y.sum() == len(test_y):
        raise DataError(
            f"{dataset_dir}: classes {normal}/{anomaly} give {len(train)} training images and "
            f"{len(test_y) - int(test_y.sum())}/{int(test_y.sum())} normal/anomalous test images"
        )
    names = CLASS_NAMES[name]
    info = {
        **split_info(len(train), test_y, files, "provided test split, the two classes"),
        "seed": int(seed),
        "normal": [int(normal)],
        "anomaly": [int(anomaly)],
        "class_names": {"normal": names[normal], "anomaly": names[anomaly]},
        "scaling": "x / 127.5 - 1",
    }
    return FederatedDataset(
        name=name,
        kind="vision",
        train=np.ascontiguousarray(train),
        test_x=np.ascontiguousarray(test_x),
        test_y=test_y,
        preprocessor=None,
        info=info,
    )


# --------------------------------------------------------------------------- new images to score


def _check_shape(input_shape) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise DataError(f"read_images: input_shape must be (C, H, W), got {tuple(input_shape)}")
    return shape  # type: ignore[return-value]


def _png_to_array(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    """One PNG → uint8 [C, H, W]: converted to grey (C=1) or RGB (C=3), resized bilinearly to H×W."""
    from PIL import Image, UnidentifiedImageError

    c, h, w = shape
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode.startswith("I") or im.mode == "F":  # 16-bit / 32-bit grey → 8-bit
                a = np.asarray(im, dtype=np.float64)
                if a.max(initial=0) > 255:
                    a = a / (65535.0 / 255.0)
                im = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))
            im = im.convert("L" if c == 1 else "RGB")
            if im.size != (w, h):
                im = im.resize((w, h), Image.BILINEAR)
            a = np.asarray(im, dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise DataError(f"{path}: cannot read PNG image ({e})") from None
    return a[None] if c == 1 else a.transpose(2, 0, 1)


def _read_png_dir(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    c = shape[0]
    if c not in (1, 3):
        raise DataError(f"{path}: PNG input needs a 1- or 3-channel model, this one has {c} channels")
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == ".png")
    if not files:
        raise DataError(f"{path}: no .png images in the directory")
    return scale_pixels(np.stack([_png_to_array(p, shape) for p in files]))


def _read_npy(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    c, h, w = shape
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"{path}: cannot read .npy array ({e})") from None
    if a.ndim == 3 and c == 1 and a.shape[1:] == (h, w):
        a = a[:, None]
    elif a.ndim == 4 and a.shape[1:] == (c, h, w):
        pass
    elif a.ndim == 4 and a.shape[1:] == (h, w, c):
        a = a.transpose(0, 3, 1, 2)
    else:
        accepted = f"[N, {c}, {h}, {w}] or [N, {h}, {w}, {c}]" + (f" or [N, {h}, {w}]" if c == 1 else "")
        raise DataError(f"{path}: array of shape {list(a.shape)} does not fit the model; expected {accepted}")
    if a.dtype.kind in "iu":
        if a.size and (a.min() < 0 or a.max() > 255):
            raise DataError(f"{path}: integer pixels must lie in 0..255, got {a.min()}..{a.max()}")
        return np.ascontiguousarray(scale_pixels(a))
    if a.dtype.kind == "f":
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise DataError(f"{path}: array contains NaN or infinite values")
        if a.size and (a.min() < -1.0 - 1e-6 or a.max() > 1.0 + 1e-6):
            raise DataError(
                f"{path}: float pixels must already be scaled to [-1, 1] (got {a.min():.4g}..{a.max():.4g}); "
                "pass uint8 0..255 to have them scaled"
            )
        return np.ascontiguousarray(np.clip(a, -1.0, 1.0))
    raise DataError(f"{path}: unsupported dtype {a.dtype} (expected uint8 0..255 or float in [-1, 1])")


def read_images(path: Path | str, input_shape) -> np.ndarray:
    """Images to score → float32 ``[N, C, H, W]`` in [−1, 1] (SPEC §4 scaling).

    ``path`` is one of:

    - a directory of ``.png`` files (sorted by name; other files ignored) or a
      single ``.png``: each image is converted to grey (C = 1) or RGB (C = 3)
      — alpha dropped, palettes expanded, 16-bit grey reduced to 8 bits —
      resized bilinearly to H×W if needed, then scaled ``x / 127.5 − 1``;
    - an ``.npy`` array (read with ``allow_pickle=False``): integer pixels in
      0..255 (normally uint8) shaped ``[N, H, W]`` (C = 1 only),
      ``[N, H, W, C]`` or ``[N, C, H, W]`` are scaled ``x / 127.5 − 1``; a
      float array must already be in [−1, 1] and is used as is. ``[N, C, H,
      W]`` wins when both layouts fit. No resizing: any other shape raises
      :class:`DataError`.
    """
    shape = _check_shape(input_shape)
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_dir() or path.suffix.lower() == ".png":
        return _read_png_dir(path, shape)
    if path.suffix.lower() == ".npy":
        return _read_npy(path, shape)
    raise DataError(f"{path}: expected a directory of .png images, a .png file or a .npy array")
