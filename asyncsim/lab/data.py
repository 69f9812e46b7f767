"""Fashion-MNIST for the book's helpers, without a download.

`load_data_fashion_mnist(batch_size)` gives the book's two iterators (train shuffled, test in
order). Where the images come from:

- the real Fashion-MNIST idx files, when the user has them: a folder passed as `root`, or named
  by the environment variable ASYNCSIM_FASHION_MNIST, holding train-images-idx3-ubyte,
  train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each plain or
  .gz, as the dataset is distributed). A folder that is named but lacks them is an error, never a
  silent fallback;
- otherwise a deterministic synthetic stand-in of the same shapes (60000 train / 10000 test
  images of 28x28, 10 balanced classes): each image is its class's prototype (a textured
  silhouette), blended with less than half of another class's, scaled, shifted by up to 3
  pixels and noised, so a classifier has something to learn and is not perfect at once. Its
  pixel statistics and spread of class brightness are close to Fashion-MNIST's; the book's
  LeNet (8.4: weights of scale 0.01, lr 0.2, batch 256) stays at chance through its first epoch
  on it and starts learning late in its second (the book's was at 0.60 by then). One line
  printed per call says the data is synthetic and how to point at the real files. Nothing is
  ever downloaded.

Images are stored as uint8 (as the files hold them) and become float32 in [0, 1] of shape
(batch, 1, 28, 28) per batch, as Gluon's ToTensor makes them; labels are float32 class indices
of shape (batch,). Each batch is made with `nd.array(...)` on the `nd` the workload runs on
(`asyncsim.nd.frontend.current()`): a host-to-device copy op, as a data loader's would be. The
last partial batch is kept (Gluon DataLoader's default, last_batch='keep').
"""

from __future__ import annotations

import functools
import gzip
import os
import struct

import numpy as np

from asyncsim.nd.frontend import current

ENV_VAR = "ASYNCSIM_FASHION_MNIST"
SIDE = 28
NUM_CLASSES = 10
SIZES = {"train": 60000, "test": 10000}
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
TEXT_LABELS = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
               "bag", "ankle boot"]

# idx type codes (http://yann.lecun.com/exdb/mnist/): big-endian element types
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class IdxError(ValueError):
    """A file that is not a well-formed idx file (or not Fashion-MNIST's)."""


def read_idx(path: str) -> np.ndarray:
    """The array an idx file holds (plain, or gzip-compressed when the name ends in .gz), in
    native byte order; an IdxError naming the file if it is not a well-formed idx file."""
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise IdxError(f"{path}: cannot be read as an idx file ({exc})") from None
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise IdxError(f"{path}: not an idx file (its first 4 bytes {raw[:4].hex() or 'none'} "
                       f"are not 00 00 <type code> <dimensions>)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxError(f"{path}: truncated idx header ({len(raw)} bytes, {header} needed for "
                       f"{ndim} dimensions)")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    need = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != need:
        raise IdxError(f"{path}: holds {len(raw) - header} bytes of data, its header says "
                       f"{'x'.join(map(str, dims))} of {dtype.newbyteorder('=').name} "
                       f"({need} bytes)")
    data = np.frombuffer(raw, dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="))


def _find(root: str, name: str) -> str:
    for candidate in (name, name + ".gz"):
        path = os.path.join(root, candidate)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"Fashion-MNIST: {root} has no {name} (nor {name}.gz); it needs "
                            f"{', '.join(n for pair in FILES.values() for n in pair)}")


def read_fashion_mnist(root: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 28, 28) uint8 and labels (n,) uint8 of `split` ('train' or 'test') from the
    idx files in folder `root`; an IdxError naming the file that does not fit."""
    image_path, label_path = (_find(root, name) for name in FILES[split])
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (SIDE, SIDE):
        raise IdxError(f"{image_path}: expected uint8 images of shape (n, {SIDE}, {SIDE}), "
                       f"found {images.dtype} {images.shape}")
    if labels.dtype != np.uint8 or labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise IdxError(f"{label_path}: expected {images.shape[0]} uint8 labels (one per image "
                       f"of {image_path}), found {labels.dtype} {labels.shape}")
    if labels.size and labels.max() >= NUM_CLASSES:
        raise IdxError(f"{label_path}: label {labels.max()} is not a class 0..{NUM_CLASSES - 1}")
    return images, labels


# -- the synthetic stand-in ------------------------------------------------------------------
_CHUNK = 1000  # examples drawn per random stream: the first n of a set do not depend on its size
# an image: scale * ((1 - w) * own prototype + w * another's), w < 1/2 so the label stays the
# dominant class; shifted together; noise of sigma _TEXTURE * pixel + _SENSOR
_BLEND, _SHIFT, _TEXTURE, _SENSOR = 0.45, 3, 0.3, 0.1


def _blur(images: np.ndarray, passes: int) -> np.ndarray:
    """Images smoothed by `passes` separable [1, 2, 1] / 4 filters (edges repeated)."""
    for _ in range(passes):
        p = np.pad(images, ((0, 0), (1, 1), (0, 0)), mode="edge")
        images = (p[:, :-2] + 2 * p[:, 1:-1] + p[:, 2:]) / 4
        p = np.pad(images, ((0, 0), (0, 0), (1, 1)), mode="edge")
        images = (p[:, :, :-2] + 2 * p[:, :, 1:-1] + p[:, :, 2:]) / 4
    return images


@functools.lru_cache(maxsize=4)
def prototypes(seed: int = 0) -> np.ndarray:
    """One 28x28 image in [0, 1] per class, float32: a smooth silhouette on a black background,
    covering from 10% to 70% of the image (so classes differ in brightness and outline, as
    garments do), filled with a smooth texture."""
    rng = np.random.default_rng([seed, 0])
    field = _blur(np.kron(rng.random((NUM_CLASSES, 7, 7)), np.ones((4, 4))), passes=4)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE] - (SIDE - 1) / 2
    field -= 0.9 * np.hypot(yy, xx) / SIDE  # silhouettes gather towards the centre
    cover = rng.permutation(np.linspace(0.1, 0.7, NUM_CLASSES))
    cut = np.array([np.quantile(f, 1 - a) for f, a in zip(field, cover, strict=True)])
    silhouette = _blur((field > cut[:, None, None]).astype(np.float64), passes=1)
    texture = _blur(np.kron(rng.random((NUM_CLASSES, 14, 14)), np.ones((2, 2))), passes=1)
    return (silhouette * (0.45 + 0.55 * texture)).astype(np.float32)


@functools.lru_cache(maxsize=4)
def _shifted_prototypes(seed: int) -> np.ndarray:
    """Every prototype under every shift: (classes, shifts, 28, 28), shifts numbered dy-major."""
    protos = prototypes(seed)
    steps = range(-_SHIFT, _SHIFT + 1)
    return np.stack([np.stack([np.roll(p, (dy, dx), axis=(0, 1)) for dy in steps for dx in steps])
                     for p in protos])


def _synthetic_chunk(seed: int, split: str, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 1 if split == "train" else 2, chunk])
    shifted = _shifted_prototypes(seed)
    labels = rng.permutation(np.arange(_CHUNK) % NUM_CLASSES)
    other = (labels + rng.integers(1, NUM_CLASSES, _CHUNK)) % NUM_CLASSES
    shift = rng.integers(0, shifted.shape[1], _CHUNK)
    blend = rng.uniform(0, _BLEND, _CHUNK).astype(np.float32)[:, None, None]
    scale = rng.uniform(0.7, 1.15, _CHUNK).astype(np.float32)[:, None, None]
    images = (scale * (1 - blend)) * shifted[labels, shift]
    images += (scale * blend) * shifted[other, shift]
    noise = rng.standard_normal(images.shape, dtype=np.float32)  # one draw serves both
    noise *= _TEXTURE * images + _SENSOR
    images += noise
    np.clip(images, 0, 1, out=images)
    images *= 255
    return np.rint(images, out=images).astype(np.uint8), labels.astype(np.uint8)


@functools.lru_cache(maxsize=4)
def synthetic_fashion_mnist(split: str, num: int | None = None,
                            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic stand-in of `split`: images (num, 28, 28) uint8 and labels (num,) uint8,
    the same for the same arguments (read-only, cached); `num` defaults to Fashion-MNIST's."""
    num = SIZES[split] if num is None else _count("num", num)
    chunks = [_synthetic_chunk(seed, split, c) for c in range(-(-num // _CHUNK))]
    images = np.concatenate([c[0] for c in chunks])[:num]
    labels = np.concatenate([c[1] for c in chunks])[:num]
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"load_data_fashion_mnist: {name} must be a positive int, got {value!r}")
    return int(value)


# -- the iterators ---------------------------------------------------------------------------
class DataLoader:
    """Batches of (X, y) NDArrays over images and labels held in host memory, made on the `nd`
    active when iteration starts. With `shuffle`, each pass takes a new order, the same from run
    to run (numpy's generator seeded with `seed` and the pass number)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, batch_size: int,
                 shuffle: bool = False, seed: int = 0, source: str = ""):
        self.images, self.labels = images, labels
        self.batch_size = _count("batch_size", batch_size)
        self.shuffle, self.seed, self.source = shuffle, seed, source
        self._passes = 0

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)

    def __iter__(self):
        nd = current()
        n, size = len(self.labels), self.batch_size
        order = None
        if self.shuffle:
            order = np.random.default_rng([self.seed, self._passes]).permutation(n)
        self._passes += 1
        for start in range(0, n, size):
            rows = slice(start, start + size) if order is None else order[start:start + size]
            X = self.images[rows].astype(np.float32).reshape(-1, 1, SIDE, SIDE) / 255
            y = self.labels[rows].astype(np.float32)
            yield nd.array(X), nd.array(y)

    def __repr__(self) -> str:
        return (f"DataLoader({len(self.labels)} examples of {self.source}, batch_size="
                f"{self.batch_size}, shuffle={self.shuffle})")


def load_data_fashion_mnist(batch_size: int, resize=None, root: str | None = None,
                            num_train: int | None = None, num_test: int | None = None,
                            seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """The book's `(train_iter, test_iter)`: the real files from `root` (or $ASYNCSIM_FASHION_MNIST)
    when given, else the synthetic stand-in (saying so in one printed line). `num_train` and
    `num_test` keep the first that many examples of each set (all by default)."""
    if resize is not None:
        raise ValueError(f"load_data_fashion_mnist: resize={resize!r} is not supported (images "
                         f"stay {SIDE}x{SIDE}; use resize=None)")
    batch_size = _count("batch_size", batch_size)
    counts = {"train": num_train, "test": num_test}
    for split, num in counts.items():
        if num is not None:
            _count(f"num_{split}", num)
    folder = root if root is not None else os.environ.get(ENV_VAR) or None
    sets = {}
    if folder is not None:
        folder = os.path.expanduser(str(folder))
        for split, num in counts.items():
            images, labels = read_fashion_mnist(folder, split)
            if num is not None and num > len(labels):
                raise ValueError(f"load_data_fashion_mnist: num_{split}={num}, but the "
                                 f"{split} files in {folder} hold {len(labels)} examples")
            sets[split] = (images[:num], labels[:num])
        source = f"Fashion-MNIST from {folder}"
    else:
        for split, num in counts.items():
            sets[split] = synthetic_fashion_mnist(split, num, seed)
        source = "synthetic Fashion-MNIST"
        print(f"load_data_fashion_mnist: no Fashion-MNIST files given, so the data is SYNTHETIC "
              f"(same shapes: {len(sets['train'][1])} train / {len(sets['test'][1])} test "
              f"images of 1x{SIDE}x{SIDE}, {NUM_CLASSES} classes); for the real data pass "
              f"root=DIR or set {ENV_VAR}=DIR, a folder with the four idx files "
              f"(train-images-idx3-ubyte[.gz], ...)")
    train_iter = DataLoader(*sets["train"], batch_size, shuffle=True, seed=seed, source=source)
    test_iter = DataLoader(*sets["test"], batch_size, shuffle=False, source=source)
    return train_iter, test_iter


def get_fashion_mnist_labels(labels) -> list[str]:
    """The text label of each class index (numbers, a numpy array or an NDArray)."""
    if hasattr(labels, "asnumpy"):
        labels = labels.asnumpy()
    return [TEXT_LABELS[int(i)] for i in np.asarray(labels).reshape(-1)]


__all__ = ["ENV_VAR", "DataLoader", "IdxError", "get_fashion_mnist_labels",
           "load_data_fashion_mnist", "prototypes", "read_fashion_mnist", "read_idx",
           "synthetic_fashion_mnist"]
