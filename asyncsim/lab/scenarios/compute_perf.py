"""8.4's data-parallelism helpers from D2L Chinese chapter 8 (seed 003); 8.1 is in `training`.

- 8.4.3 demonstrates the chapter's `allreduce` and `split_and_load` (written once, verbatim, in
  `data_parallel`, which trains LeNet and ResNet-18 with them) on its demo data;
  `nd.arange(24).reshape((6, 4))` is an `nd.array` of numpy's arange, as the frontend has no
  arange.
Units: sizes are counts of features, examples and GPUs; the book's numbers are seconds.
"""

from __future__ import annotations

from math import prod

import numpy

from asyncsim.lab.scenarios.base import Scenario
from asyncsim.lab.scenarios.data_parallel import allreduce, split_and_load


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
