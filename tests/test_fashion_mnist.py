"""Fashion-MNIST without a download (`asyncsim.lab.data`): the idx reader on files the tests write,
the real-files path, the synthetic stand-in (deterministic, balanced, learnable, announced) and
the batches the iterators make on the active `nd`.
"""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import realexec
from asyncsim.lab import data
from asyncsim.nd.frontend import current
from asyncsim.nd.record import record

_CODES = {np.dtype("uint8"): 0x08, np.dtype("int8"): 0x09, np.dtype("int16"): 0x0B,
          np.dtype("int32"): 0x0C, np.dtype("float32"): 0x0D, np.dtype("float64"): 0x0E}


def write_idx(path, array: np.ndarray) -> None:
    """An idx file as the format defines it: 0, 0, type code, ndim, big-endian dims, data."""
    header = bytes([0, 0, _CODES[array.dtype], array.ndim])
    header += struct.pack(f">{array.ndim}I", *array.shape)
    body = array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + body)


def write_fashion(folder, n_train=7, n_test=5, gz=False) -> dict:
    """Four Fashion-MNIST files in `folder`; image i of a set is filled with the value i."""
    sets = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = np.repeat(np.arange(n, dtype=np.uint8), 28 * 28).reshape(n, 28, 28)
        labels = (np.arange(n) % 10).astype(np.uint8)
        names = data.FILES[split]
        suffix = ".gz" if gz else ""
        write_idx(folder / (names[0] + suffix), images)
        write_idx(folder / (names[1] + suffix), labels)
        sets[split] = (images, labels)
    return sets


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(sorted(_CODES, key=str)),
       shape=st.lists(st.integers(0, 4), min_size=1, max_size=3), gz=st.booleans(),
       seed=st.integers(0, 2**16))
def test_read_idx_round_trips(tmp_path_factory, dtype, shape, gz, seed):
    """Any array of an idx type, written plain or gzipped, reads back equal, in native order."""
    array = (np.random.default_rng(seed).random(shape) * 100).astype(dtype)
    path = tmp_path_factory.mktemp("idx") / ("a.idx.gz" if gz else "a.idx")
    write_idx(path, array)
    back = data.read_idx(str(path))
    assert back.dtype == array.dtype and back.dtype.isnative
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("raw, says", [
    (b"", "not an idx file"),
    (b"\x01\x00\x08\x01" + struct.pack(">I", 2) + b"ab", "not an idx file"),
    (b"\x00\x00\x07\x01" + struct.pack(">I", 2) + b"ab", "not an idx file"),
    (b"\x00\x00\x08\x02" + struct.pack(">I", 2), "truncated idx header"),
    (b"\x00\x00\x08\x01" + struct.pack(">I", 3) + b"ab", "holds 2 bytes of data"),
])
def test_bad_idx_files_name_the_file(tmp_path, raw, says):
    """A malformed file is one IdxError that names the file and what is wrong with it."""
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(raw)
    with pytest.raises(data.IdxError, match=says) as err:
        data.read_idx(str(path))
    assert str(path) in str(err.value)


def test_a_gz_name_that_is_not_gzip_names_the_file(tmp_path):
    """A .gz file that is not gzip data is an IdxError naming it, not a bare gzip error."""
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x01\x05")
    with pytest.raises(data.IdxError, match="cannot be read") as err:
        data.read_idx(str(path))
    assert str(path) in str(err.value)


def test_fashion_files_of_the_wrong_shape_or_labels_are_refused(tmp_path):
    """Images not (n, 28, 28) uint8, labels that do not match them or are not classes 0..9:
    an IdxError naming the offending file."""
    write_fashion(tmp_path)
    images = tmp_path / data.FILES["train"][0]
    write_idx(images, np.zeros((7, 27, 27), np.uint8))
    with pytest.raises(data.IdxError, match=r"\(n, 28, 28\)") as err:
        data.read_fashion_mnist(str(tmp_path), "train")
    assert str(images) in str(err.value)
    write_idx(images, np.zeros((6, 28, 28), np.uint8))
    with pytest.raises(data.IdxError, match="expected 6 uint8 labels"):
        data.read_fashion_mnist(str(tmp_path), "train")
    labels = tmp_path / data.FILES["test"][1]
    write_idx(labels, np.full(5, 10, np.uint8))
    with pytest.raises(data.IdxError, match="label 10") as err:
        data.read_fashion_mnist(str(tmp_path), "test")
    assert str(labels) in str(err.value)


def test_a_named_folder_without_the_files_is_an_error(tmp_path, monkeypatch):
    """A folder given by root= or by the environment variable that lacks the files is an error
    naming the missing file, never a silent switch to synthetic data."""
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        data.load_data_fashion_mnist(4, root=str(tmp_path))
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        data.load_data_fashion_mnist(4)


def _collect(loader):
    """Every (X, y) batch of one pass, as numpy arrays, on a real engine."""
    with realexec.session(workers=1) as nd:
        assert current() is nd  # the iterator makes its arrays on the active nd
        return [(X.asnumpy(), y.asnumpy()) for X, y in loader]


@pytest.mark.parametrize("gz", [False, True])
def test_real_files_give_the_books_batches(tmp_path, capsys, gz):
    """From the files: X (batch, 1, 28, 28) float32 = pixels / 255, y float32 class indices, the
    last partial batch kept; the test set in file order, the train set a permutation of it; no
    synthetic notice."""
    sets = write_fashion(tmp_path, n_train=7, n_test=5, gz=gz)
    train_iter, test_iter = data.load_data_fashion_mnist(3, root=str(tmp_path))
    assert "SYNTHETIC" not in capsys.readouterr().out
    assert (len(train_iter), len(test_iter)) == (3, 2)
    test_batches = _collect(test_iter)
    assert [X.shape for X, _ in test_batches] == [(3, 1, 28, 28), (2, 1, 28, 28)]
    X = np.concatenate([b[0] for b in test_batches])
    y = np.concatenate([b[1] for b in test_batches])
    assert X.dtype == y.dtype == np.float32
    np.testing.assert_allclose(X[:, 0], sets["test"][0] / 255, rtol=1e-6)
    np.testing.assert_array_equal(y, sets["test"][1])
    train = _collect(train_iter)
    index = np.rint(np.concatenate([b[0] for b in train])[:, 0, 0, 0] * 255).astype(int)
    assert sorted(index) == list(range(7))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in train]), index % 10)


def test_the_environment_variable_points_at_the_files(tmp_path, monkeypatch, capsys):
    """ASYNCSIM_FASHION_MNIST names the folder when root= is not given; num_train/num_test keep
    the first examples; asking for more than the files hold is an error."""
    write_fashion(tmp_path, n_train=7, n_test=5)
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    train_iter, test_iter = data.load_data_fashion_mnist(2, num_train=4, num_test=3)
    assert "SYNTHETIC" not in capsys.readouterr().out
    assert (len(train_iter.labels), len(test_iter.labels)) == (4, 3)
    assert str(tmp_path) in train_iter.source
    with pytest.raises(ValueError, match="num_train=8"):
        data.load_data_fashion_mnist(2, num_train=8)


def test_without_files_the_data_is_synthetic_and_says_so(monkeypatch, capsys):
    """No root and no environment variable: the book's sizes (60000 / 10000, batches of 256 with
    the last kept) from the synthetic set, announced in one line that says how to use the real
    files."""
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    train_iter, test_iter = data.load_data_fashion_mnist(256)
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(lines) == 1
    assert "SYNTHETIC" in lines[0] and data.ENV_VAR in lines[0] and "root=" in lines[0]
    assert (len(train_iter), len(test_iter)) == (235, 40)
    assert train_iter.images.shape == (60000, 28, 28) and test_iter.labels.shape == (10000,)
    assert "synthetic" in train_iter.source


def test_synthetic_data_is_deterministic_and_balanced():
    """The same arguments give the same images and labels (also after the cache is cleared); the
    first n of a set do not depend on its size; classes are balanced; train and test differ."""
    images, labels = data.synthetic_fashion_mnist("train", 2500)
    data.synthetic_fashion_mnist.cache_clear()
    again, again_labels = data.synthetic_fashion_mnist("train", 2500)
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)
    small, small_labels = data.synthetic_fashion_mnist("train", 1300)
    np.testing.assert_array_equal(small, images[:1300])
    np.testing.assert_array_equal(small_labels, labels[:1300])
    assert images.dtype == labels.dtype == np.uint8 and images.shape == (2500, 28, 28)
    assert set(np.bincount(labels[:2000], minlength=10)) == {200}
    test_images, _ = data.synthetic_fashion_mnist("test", 100)
    assert not np.array_equal(test_images, images[:100])
    other_seed, _ = data.synthetic_fashion_mnist("train", 100, seed=1)
    assert not np.array_equal(other_seed, images[:100])


def test_synthetic_data_is_learnable_but_not_trivial():
    """Class means of the train set classify the test set far above chance (0.1), and a
    softmax regression trained by a few epochs of SGD in numpy does better still, yet neither is
    perfect: there is something to learn."""
    x_train, y_train = data.synthetic_fashion_mnist("train", 3000)
    x_test, y_test = data.synthetic_fashion_mnist("test", 1000)
    x_train = x_train.reshape(len(x_train), -1) / 255
    x_test = x_test.reshape(len(x_test), -1) / 255
    means = np.stack([x_train[y_train == c].mean(0) for c in range(10)])
    dists = ((x_test[:, None, :] - means[None]) ** 2).sum(-1)
    nearest = (dists.argmin(1) == y_test).mean()
    W, b = np.zeros((784, 10)), np.zeros(10)
    for _ in range(4):
        for i in range(0, len(x_train), 100):
            xb, yb = x_train[i:i + 100], y_train[i:i + 100]
            z = xb @ W + b
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1
            W -= 0.5 * xb.T @ p / len(yb)
            b -= 0.5 * p.mean(0)
    linear = ((x_test @ W + b).argmax(1) == y_test).mean()
    assert 0.4 < nearest < 0.99
    assert 0.6 < linear < 0.995


def test_each_batch_is_a_host_to_device_copy_on_the_active_nd(monkeypatch, capsys):
    """Recorded, a pass is one `array` op per X and per y, with the book's shapes and the last
    partial batch kept."""
    monkeypatch.delenv(data.ENV_VAR, raising=False)

    def one_pass(nd):
        train_iter, _ = data.load_data_fashion_mnist(4, num_train=10, num_test=2)
        for _ in train_iter:
            pass

    program = record(one_pass)
    arrays = [op for op in program.instrs if getattr(op, "name", None) == "array"]
    shapes = [program.vars[op.out].shape for op in arrays]
    assert shapes == [(4, 1, 28, 28), (4,), (4, 1, 28, 28), (4,), (2, 1, 28, 28), (2,)]
    assert all(program.vars[op.out].dtype == "float32" for op in arrays)


def test_unsupported_arguments_fail_at_the_call():
    """resize other than None, and batch sizes or counts that are not positive ints, are one
    ValueError naming the argument."""
    with pytest.raises(ValueError, match="resize=224"):
        data.load_data_fashion_mnist(4, resize=224)
    with pytest.raises(ValueError, match="batch_size"):
        data.load_data_fashion_mnist(0)
    with pytest.raises(ValueError, match="num_test"):
        data.load_data_fashion_mnist(4, num_test=-1)


def test_text_labels():
    """Class indices name the book's ten garments."""
    assert data.get_fashion_mnist_labels(np.array([0, 9.0])) == ["t-shirt", "ankle boot"]
