"""The asynchronous-computation chapters as workloads: D2L 12.2 (English) and 8.2 (Chinese).

Seeds: 000 (the Chinese "异步计算" page), 001 (English 12.2), 003 (Chinese chapter 8, section 8.2).
The code is the chapters' own with `nd.` for `np.`/`nd.`, `nd.waitall()` for `npx.waitall()`
and `with nd.benchmark(label):` for d2l's `Benchmark`, which does not wait for the backend when
the block ends. The rendered 12.2 text lost the explicit synchronisations of several blocks
(`npx.waitall()`, `b.wait_to_read()`, `b.asnumpy()`, `b.sum().item()`, the loop's
`y.wait_to_read()`); they are restored here from the notebook the page was rendered from.

The memory experiments (12.2.4 / 8.2.4) live in `memory.py`.
Units: sizes are matrix sides; the book's numbers in the registry are seconds.
"""

from __future__ import annotations

import numpy

from asyncsim.lab.scenarios.base import Scenario


def warmup(nd, n=10, size=1000, numpy_part=True):
    """12.2.1: ten random matrices and products, in NumPy and in the backend.

    The 'numpy' region is plain NumPy on the frontend thread: a measured run fills it, a
    prediction records no op in it. The 'mxnet.np' region ends without waiting, so it shows only
    the time to queue. 'Done' is the book's next notebook cell: a cell boundary (`nd.cell()`)
    lets the products 'mxnet.np' queued finish first, as they did while the book's reader moved
    on, so 'Done' times its own ten products on an idle backend.
    """
    if numpy_part:
        with nd.benchmark('numpy'):
            for _ in range(n):
                a = numpy.random.normal(size=(size, size))
                b = numpy.dot(a, a)

    with nd.benchmark('mxnet.np'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size))
            b = nd.dot(a, a)

    nd.cell()  # the book's next cell: its reader idles while the queued products finish
    with nd.benchmark('Done'):
        for _ in range(n):
            a = nd.random.normal(shape=(size, size))
            b = nd.dot(a, a)
        nd.waitall()
    del b


def dependency(nd, gpu=False):
    """12.2.1 / 8.2.1: `z = x * y + 2` then printing z, the first blocker the reader meets."""
    ctx = nd.gpu(0) if gpu else nd.cpu()
    with nd.benchmark('z = x * y + 2'):
        x = nd.ones((1, 2), ctx=ctx)
        y = nd.ones((1, 2), ctx=ctx)
        z = x * y + 2
        print(z)


def queued_vs_finished(nd, size=2000):
    """8.2.1: `y = nd.dot(x, x).sum()` returns at once; printing y waits for the product."""
    with nd.benchmark('Workloads are queued.'):
        x = nd.random.uniform(shape=(size, size))
        y = nd.dot(x, x).sum()

    with nd.benchmark('Workloads are finished.'):
        print('sum =', y)


def blockers(nd, size=1000):
    """12.2.2: the same product closed by each blocker: waitall, wait_to_read, asnumpy, item."""
    a = nd.random.normal(shape=(size, size))  # the warm-up's last matrix
    nd.waitall()

    with nd.benchmark('waitall'):
        b = nd.dot(a, a)
        nd.waitall()

    with nd.benchmark('wait_to_read'):
        b = nd.dot(a, a)
        b.wait_to_read()

    with nd.benchmark('numpy conversion'):
        b = nd.dot(a, a)
        b.asnumpy()

    with nd.benchmark('scalar conversion'):
        b = nd.dot(a, a)
        b.sum().item()


def blockers_8_2(nd, size=2000):
    """8.2.2: wait_to_read, print, waitall (two products), asnumpy and asscalar of the norm.

    The chapter's blocks are unlabelled `Benchmark()`s; each region is named by its blocker.
    """
    with nd.benchmark('wait_to_read'):
        x = nd.random.uniform(shape=(size, size))
        y = nd.dot(x, x).sum()
        y.wait_to_read()

    with nd.benchmark('Workloads are finished.'):
        print('sum =', y)

    with nd.benchmark('waitall'):
        y = nd.dot(x, x)
        z = nd.dot(x, x)
        nd.waitall()

    with nd.benchmark('asnumpy'):
        y = nd.dot(x, x)
        y.asnumpy()

    with nd.benchmark('asscalar'):
        y = nd.dot(x, x)
        y.norm().asscalar()
    del z


def sync_vs_async_8_2(nd, n=1000, shape=(2000, 2000)):
    """8.2.3 (and seed 000): `y = x + 1` n times, waiting on each y, then with one waitall."""
    x = nd.random.uniform(shape=shape)  # the x of 8.2.1
    nd.waitall()

    with nd.benchmark('synchronous.'):
        for _ in range(n):
            y = x + 1
            y.wait_to_read()

    with nd.benchmark('asynchronous.'):
        for _ in range(n):
            y = x + 1
        nd.waitall()


def sync_vs_async_12_2(nd, n=1000, shape=(1, 2)):
    """12.2.3: the same loop on 12.2's x, the (1, 2) ones of the dependency example."""
    x = nd.ones(shape)
    nd.waitall()

    with nd.benchmark('synchronous'):
        for _ in range(n):
            y = x + 1
            y.wait_to_read()

    with nd.benchmark('asynchronous'):
        for _ in range(n):
            y = x + 1
        nd.waitall()


def waitall_vs_wait_to_read(nd, n=10, size=1000):
    """12.2 exercise 4: issue a product we need and n more after it, then synchronise.

    `wait_to_read` on the first product returns once it is done; `waitall` also waits for the
    n products queued behind it. The leftover work is drained outside the regions.
    """
    a = nd.random.normal(shape=(size, size))
    nd.waitall()

    with nd.benchmark('wait_to_read'):
        b = nd.dot(a, a)  # the intermediate result we need
        more = [nd.dot(a, a) for _ in range(n)]
        b.wait_to_read()
    nd.waitall()

    with nd.benchmark('waitall'):
        b = nd.dot(a, a)
        more = [nd.dot(a, a) for _ in range(n)]
        nd.waitall()
    del more


_EN = "001_c4db6a957a3c16a4.txt"
_ZH8 = "003_3c45022c8209ddba.txt"

SCENARIOS = [
    Scenario(
        "warmup", warmup, dict(n=10, size=1000, numpy_part=True),
        dict(n=2, size=8, numpy_part=True),
        "ten normal+dot 1000x1000: queued ('mxnet.np') vs waited ('Done'); 'numpy' is "
        "plain NumPy that only a measured run fills",
        f"12.2.1 ({_EN})", ("numpy", "mxnet.np", "Done"),
        book={"numpy": 0.8840, "mxnet.np": 0.0044, "Done": 0.7144},
        book_source=f"{_EN} 12.2.1", measured_only=("numpy",)),
    Scenario(
        "dependency", dependency, dict(gpu=False), dict(gpu=False),
        "the dependency graph of z = x * y + 2, printed (a blocker)",
        f"12.2.1 ({_EN}); 8.2.1 ({_ZH8}) and seed 000 as c = a * b + 2",
        ("z = x * y + 2",)),
    Scenario(
        "queued_vs_finished", queued_vs_finished, dict(size=2000), dict(size=8),
        "y = nd.dot(x, x).sum() returns at once; print('sum =', y) waits for it",
        f"8.2.1 ({_ZH8}); seed 000", ("Workloads are queued.", "Workloads are finished."),
        book={"Workloads are queued.": 0.0014, "Workloads are finished.": 0.3517},
        book_source=f"{_ZH8} 8.2.1"),
    Scenario(
        "blockers", blockers, dict(size=1000), dict(size=8),
        "one 1000x1000 product closed by waitall, wait_to_read, asnumpy and sum().item()",
        f"12.2.2 ({_EN})", ("waitall", "wait_to_read", "numpy conversion", "scalar conversion"),
        book={"waitall": 0.0046, "wait_to_read": 0.0044, "numpy conversion": 0.0048,
              "scalar conversion": 0.0145},
        book_source=f"{_EN} 12.2.2"),
    Scenario(
        "blockers_8_2", blockers_8_2, dict(size=2000), dict(size=8),
        "2000x2000 products closed by wait_to_read, print, waitall (two), asnumpy, asscalar",
        f"8.2.2 ({_ZH8}); seed 000", ("wait_to_read", "Workloads are finished.", "waitall",
                                      "asnumpy", "asscalar"),
        book={"wait_to_read": 0.3558, "Workloads are finished.": 0.0011, "waitall": 0.6061,
              "asnumpy": 0.3111, "asscalar": 0.3302},
        book_source=f"{_ZH8} 8.2.2",
        book_note="the chapter's blocks are unlabelled Benchmark()s printing 'time: ...'"),
    Scenario(
        "sync_vs_async", sync_vs_async_8_2, dict(n=1000, shape=(2000, 2000)),
        dict(n=5, shape=(4, 4)),
        "1000 x (y = x + 1) on a 2000x2000 x: wait_to_read each vs one waitall "
        "(n (t1+t2+t3) vs t1 + n t2 + t3)",
        f"8.2.3 ({_ZH8}); seed 000", ("synchronous.", "asynchronous."),
        book={"synchronous.": 7.3877, "asynchronous.": 3.5370}, book_source=f"{_ZH8} 8.2.3"),
    Scenario(
        "sync_vs_async_12_2", sync_vs_async_12_2, dict(n=1000, shape=(1, 2)),
        dict(n=5, shape=(1, 2)),
        "the same loop on 12.2's (1, 2) x: tiny ops, so 1000 t2 > 999 t1 (exercise 1) fails "
        "and the frontend bounds both",
        f"12.2.3 and exercise 1 ({_EN})", ("synchronous", "asynchronous"),
        book={"synchronous": 0.0789, "asynchronous": 0.0769}, book_source=f"{_EN} 12.2.3"),
    Scenario(
        "waitall_vs_wait_to_read", waitall_vs_wait_to_read, dict(n=10, size=1000),
        dict(n=3, size=8),
        "a product then n more: wait_to_read on the first returns early, waitall waits for all",
        f"12.2 exercise 4 ({_EN})", ("wait_to_read", "waitall")),
]
