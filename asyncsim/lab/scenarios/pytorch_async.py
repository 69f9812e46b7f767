"""The PyTorch edition's asynchronous-computation page (seed 004) as workloads.

PyTorch queues GPU ops on a stream and returns; `torch.cuda.synchronize(device)` waits for every
queued op of the device, which is `nd.waitall()` here (PyTorch has no per-tensor wait_to_read).
`torch.randn`/`torch.mm` become `nd.random.normal`/`nd.dot` on `nd.gpu(0)`. The page prints code
for the warm-up and the dependency example only; its loop of 10000 `y = x + 1` is given as a
formula, so the loop below is 12.2's loop on the GPU with synchronize as the per-step blocker.
Its exercise (benchmark the same products on the CPU) is the warm-up with gpu=False: PyTorch's
CPU ops run inside the call, which realexec's mode='sync' (MXNet's NaiveEngine) models.
Units: sizes are matrix sides; the book's numbers in the registry are seconds.
"""

from __future__ import annotations

import numpy

from asyncsim.lab.scenarios.base import Scenario


def _ctx(nd, gpu):
    return nd.gpu(0) if gpu else nd.cpu()


def torch_warmup(nd, n=10, size=1000, gpu=True, numpy_part=True):
    """The GPU warm-up, ten normal matrices and products in NumPy and in torch, then synchronized.

    'numpy' is plain NumPy on the frontend: only a measured run fills it. 'torch' ends without
    synchronising and shows queuing; 'Done' is the page's next cell (a cell boundary,
    `nd.cell()`, lets what 'torch' queued finish first) and synchronises its own products.
    """
    device = _ctx(nd, gpu)
    a = nd.random.normal(shape=(size, size), ctx=device)  # GPU warm-up
    b = nd.dot(a, a)

    if numpy_part:
        with nd.benchmark('numpy'):
            for _ in range(n):
                a = numpy.random.normal(size=(size, size))
                b = numpy.dot(a, a)

    with nd.benchmark('torch'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size), ctx=device)
            b = nd.dot(a, a)

    nd.cell()  # the page's next cell: the queued products finish before it starts
    with nd.benchmark('Done'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size), ctx=device)
            b = nd.dot(a, a)
        nd.waitall()  # torch.cuda.synchronize(device)
    del b


def torch_dependency(nd, gpu=True):
    """The dependency example on the GPU: `z = x * y + 2`, then showing z (a blocker)."""
    device = _ctx(nd, gpu)
    with nd.benchmark('z = x * y + 2'):
        x = nd.ones((1, 2), ctx=device)
        y = nd.ones((1, 2), ctx=device)
        z = x * y + 2
        print(z)


def torch_sync_vs_async(nd, n=10000, shape=(1, 2), gpu=True):
    """10000 `y = x + 1` on the GPU, synchronising after each, then once at the end.

    x is the page's `torch.ones((1, 2), device=device)` from the dependency example.
    """
    device = _ctx(nd, gpu)
    x = nd.ones(shape, ctx=device)
    nd.waitall()

    with nd.benchmark('synchronous'):
        for _ in range(n):
            y = x + 1
            nd.waitall()  # torch.cuda.synchronize(device)

    with nd.benchmark('asynchronous'):
        for _ in range(n):
            y = x + 1
        nd.waitall()
    del y


_PT = "004_344996d425b31308.txt"

SCENARIOS = [
    Scenario(
        "torch_warmup", torch_warmup, dict(n=10, size=1000, gpu=True, numpy_part=True),
        dict(n=2, size=8, gpu=True, numpy_part=True),
        "ten randn+mm 1000x1000 on the GPU: queued ('torch') vs synchronized ('Done'); "
        "'numpy' only a measured run fills",
        f"PyTorch 异步计算, 通过后端异步处理 ({_PT})", ("numpy", "torch", "Done"),
        devices="cpu+gpu",
        book={"numpy": 0.3780, "torch": 0.0015, "Done": 0.0083},
        book_source=f"{_PT} 通过后端异步处理", measured_only=("numpy",)),
    Scenario(
        "torch_warmup_cpu", torch_warmup, dict(n=10, size=1000, gpu=False, numpy_part=True),
        dict(n=2, size=8, gpu=False, numpy_part=True),
        "the exercise: the same products on the CPU (PyTorch's CPU ops are synchronous: "
        "compare with realexec mode='sync')",
        f"PyTorch 异步计算, exercise 1 ({_PT})", ("numpy", "torch", "Done"),
        measured_only=("numpy",)),
    Scenario(
        "torch_dependency", torch_dependency, dict(gpu=True), dict(gpu=True),
        "z = x * y + 2 on the GPU, printed",
        f"PyTorch 异步计算, dependency graph ({_PT})", ("z = x * y + 2",), devices="cpu+gpu"),
    Scenario(
        "torch_sync_vs_async", torch_sync_vs_async, dict(n=10000, shape=(1, 2), gpu=True),
        dict(n=5, shape=(1, 2), gpu=True),
        "10000 x (y = x + 1) on the GPU: synchronize each vs once "
        "(10000 (t1+t2+t3) vs t1 + 10000 t2 + t3)",
        f"PyTorch 异步计算, 改进计算 ({_PT})", ("synchronous", "asynchronous"),
        devices="cpu+gpu"),
]
