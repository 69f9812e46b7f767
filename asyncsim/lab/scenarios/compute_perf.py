"""8.4's data-parallelism helpers from D2L Chinese chapter 8 (seed 003); 8.1 is in `training`.

- 8.4 builds data parallelism from `allreduce` and `split_and_load`; both helpers are here with
  the chapter's demo data. `data[0].copyto(data[i])` (a copy into an existing array) is written
  `data[i][:] = data[0].copyto(data[i].context)`, and `nd.arange(24).reshape((6, 4))` is an
  `nd.array` of numpy's arange, as the frontend has neither. LeNet training (8.4.6) and ResNet-18
  on two GPUs (8.5) need convolutions and autograd, which the frontend lacks: not included.
Units: sizes are counts of features, examples and GPUs; the book's numbers are seconds.
"""

from __future__ import annotations

from math import prod

import numpy

from asyncsim.lab.scenarios.base import Scenario


def allreduce(data):
    """8.4.3: sum the arrays on gpu0, then broadcast the sum back to every other GPU."""
    for i in range(1, len(data)):
        data[0][:] += data[i].copyto(data[0].context)
    for i in range(1, len(data)):
        data[i][:] = data[0].copyto(data[i].context)


def split_and_load(data, ctx):
    """8.4.3: split a batch along its first axis into one equal part per context."""
    n, k = data.shape[0], len(ctx)
    m = n // k  # the chapter assumes n divides evenly
    assert m * k == n, '# examples is not divided by # devices.'
    return [data[i * m: (i + 1) * m].as_in_context(ctx[i]) for i in range(k)]


def multi_gpu_helpers(nd, num_gpus=2, shape=(1, 2), batch_shape=(6, 4)):
    """8.4.3: the allreduce demo (ones * (i + 1) per GPU) and split_and_load of a 6x4 batch."""
    ctx = [nd.gpu(i) for i in range(num_gpus)]

    with nd.benchmark('allreduce'):
        data = [nd.ones(shape, ctx=ctx[i]) * (i + 1) for i in range(num_gpus)]
        print('before allreduce:', data)
        allreduce(data)
        print('after allreduce:', data)

    with nd.benchmark('split_and_load'):
        batch = nd.array(numpy.arange(prod(batch_shape)).reshape(batch_shape))
        splitted = split_and_load(batch, ctx)
        print('input: ', batch)
        print('load into', [str(c) for c in ctx])
        print('output:', splitted)


_ZH8 = "003_3c45022c8209ddba.txt"

SCENARIOS = [
    Scenario(
        "multi_gpu_helpers", multi_gpu_helpers,
        dict(num_gpus=2, shape=(1, 2), batch_shape=(6, 4)),
        dict(num_gpus=2, shape=(1, 2), batch_shape=(6, 4)),
        "8.4's allreduce across two GPUs and split_and_load of a 6x4 batch (demo data)",
        f"8.4.3 ({_ZH8})", ("allreduce", "split_and_load"), devices="cpu+2gpu"),
]
