"""Automatic parallelism (D2L Chinese 8.3, seeds 002 and 003) and its exercises, as workloads.

8.3.1 runs ten products on the CPU and ten on the GPU, apart and together; 8.3.2 computes on the
GPU and copies the results back, apart and overlapped. The code is the chapter's with `nd.gpu(0)`
for `mx.gpu(0)` and the number of products (`n`, ten in the book) and matrix sides as parameters
(the book: 2000 on the CPU, 6000 on the GPU). The exercises (independent products, a graph with
richer dependencies, many small ops) are designed here; the chapter only poses them.

Chained products use x ~ U(0, 2/size): every entry of x @ x then averages what it multiplies, so
long chains neither overflow nor sink into slow denormals when a real engine runs them.
Units: sizes are matrix sides; the book's numbers in the registry are seconds.
"""

from __future__ import annotations

from asyncsim.lab.scenarios.base import Scenario


def _ctx(nd, gpu):
    return nd.gpu(0) if gpu else nd.cpu()


def cpu_gpu_parallel(nd, n=10, cpu_size=2000, gpu_size=6000):
    """8.3.1: ten products on the CPU, then on the GPU, then both without a waitall between."""
    def run(x):
        return [nd.dot(x, x) for _ in range(n)]

    x_cpu = nd.random.uniform(shape=(cpu_size, cpu_size))
    x_gpu = nd.random.uniform(shape=(gpu_size, gpu_size), ctx=nd.gpu(0))

    run(x_cpu)  # warm-up begins
    run(x_gpu)
    nd.waitall()  # warm-up ends

    with nd.benchmark('Run on CPU.'):
        run(x_cpu)
        nd.waitall()

    with nd.benchmark('Then run on GPU.'):
        run(x_gpu)
        nd.waitall()

    with nd.benchmark('Run on both CPU and GPU in parallel.'):
        run(x_cpu)
        run(x_gpu)
        nd.waitall()


def compute_copy_overlap(nd, n=10, gpu_size=6000):
    """8.3.2: ten GPU products, then their copies to host memory; then both overlapped."""
    def run(x):
        return [nd.dot(x, x) for _ in range(n)]

    def copy_to_cpu(x):
        return [y.copyto(nd.cpu()) for y in x]

    x_gpu = nd.random.uniform(shape=(gpu_size, gpu_size), ctx=nd.gpu(0))
    run(x_gpu)  # the warm-up of 8.3.1, which this section follows
    nd.waitall()

    with nd.benchmark('Run on GPU.'):
        y = run(x_gpu)
        nd.waitall()

    with nd.benchmark('Then copy to CPU.'):
        copy_to_cpu(y)
        nd.waitall()

    with nd.benchmark('Run and copy in parallel.'):
        y = run(x_gpu)
        copy_to_cpu(y)
        nd.waitall()


def independent_products(nd, n=10, size=2000, gpu=False):
    """8.3 exercise 1: are run()'s ten independent products executed in parallel?

    The same ten products once independent (as in run()) and once chained, each needing the
    previous one: the chain cannot overlap, so the gap between the two is the parallelism won.
    """
    ctx = _ctx(nd, gpu)
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size), ctx=ctx)
    nd.waitall()

    with nd.benchmark('independent products'):
        ys = [nd.dot(x, x) for _ in range(n)]
        nd.waitall()

    with nd.benchmark('dependent products'):
        y = x
        for _ in range(n):
            y = nd.dot(y, x)
        nd.waitall()
    del ys


def complex_dependencies(nd, size=1000, gpu=False):
    """8.3 exercise 2: a graph with forks and joins, with a blocker after every op and without.

    Left to the engine, the two branches (b beside a, d beside c) may overlap. Both regions
    compute the same e; the workload returns both as numpy arrays, so a call on a
    `realexec.session()` nd can check that the engine's order gives the right values.
    """
    ctx = _ctx(nd, gpu)
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size), ctx=ctx)
    nd.waitall()

    def graph(block):
        a = nd.dot(x, x)
        block(a)
        b = nd.dot(x, x) + 1  # independent of a
        block(b)
        c = nd.dot(a, b)  # joins a and b
        block(c)
        d = nd.dot(a, x)  # needs only a: may run beside c
        block(d)
        e = c + d
        return e.asnumpy()

    with nd.benchmark('a blocker after every op'):
        serial = graph(lambda v: v.wait_to_read())

    with nd.benchmark('left to the engine'):
        overlapped = graph(lambda v: None)
    return serial, overlapped


def small_ops(nd, n=100, size=100, gpu=False):
    """8.3 exercise 3: many small products, independent and chained, on one device.

    A large product keeps every core (or the whole GPU) busy, so independent products gain
    little; small ones leave room, and independent small ops can then run side by side.
    """
    ctx = _ctx(nd, gpu)
    x = nd.random.uniform(0, 2.0 / size, shape=(size, size), ctx=ctx)
    nd.waitall()

    with nd.benchmark('independent small ops'):
        ys = [nd.dot(x, x) for _ in range(n)]
        nd.waitall()

    with nd.benchmark('dependent small ops'):
        y = x
        for _ in range(n):
            y = nd.dot(y, x)
        nd.waitall()
    del ys


_ZH83 = "002_497eb3d3148709f0.txt"

SCENARIOS = [
    Scenario(
        "cpu_gpu_parallel", cpu_gpu_parallel, dict(n=10, cpu_size=2000, gpu_size=6000),
        dict(n=2, cpu_size=8, gpu_size=8),
        "ten products on the CPU (2000) and ten on the GPU (6000), apart and together",
        f"8.3.1 ({_ZH83}; also seed 003)",
        ("Run on CPU.", "Then run on GPU.", "Run on both CPU and GPU in parallel."),
        devices="cpu+gpu",
        book={"Run on CPU.": 0.3588, "Then run on GPU.": 1.2104,
              "Run on both CPU and GPU in parallel.": 1.2183},
        book_source=f"{_ZH83} 8.3.1"),
    Scenario(
        "compute_copy_overlap", compute_copy_overlap, dict(n=10, gpu_size=6000),
        dict(n=2, gpu_size=8),
        "ten GPU products, then copying them to the CPU; then both, each copy overlapping "
        "the next product",
        f"8.3.2 ({_ZH83}; also seed 003)",
        ("Run on GPU.", "Then copy to CPU.", "Run and copy in parallel."),
        devices="cpu+gpu",
        book={"Run on GPU.": 1.2223, "Then copy to CPU.": 0.5272,
              "Run and copy in parallel.": 1.2770},
        book_source=f"{_ZH83} 8.3.2"),
    Scenario(
        "independent_products", independent_products, dict(n=10, size=2000, gpu=False),
        dict(n=3, size=8, gpu=False),
        "run()'s ten independent products vs ten chained ones: do independent ops overlap?",
        f"8.3 exercise 1 ({_ZH83})", ("independent products", "dependent products")),
    Scenario(
        "complex_dependencies", complex_dependencies, dict(size=1000, gpu=False),
        dict(size=8, gpu=False),
        "a fork-join graph of products, with a blocker after every op vs left to the engine",
        f"8.3 exercise 2 ({_ZH83})", ("a blocker after every op", "left to the engine")),
    Scenario(
        "small_ops", small_ops, dict(n=100, size=100, gpu=False),
        dict(n=5, size=4, gpu=False),
        "100 small (100x100) products, independent vs chained, on one device",
        f"8.3 exercise 3 ({_ZH83})", ("independent small ops", "dependent small ops")),
]
