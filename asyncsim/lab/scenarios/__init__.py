"""The chapters' experiments and exercises as workloads, in one registry.

`SCENARIOS` maps a name to a `Scenario` (see `base.py`): the workload function, its book-sized
and quick parameters, the regions it declares, the devices it needs and the numbers the chapter
printed. `get(name)` looks one up. Modules group the workloads by chapter:

- `async_compute`: 12.2 / 8.2 (warm-up, dependencies, blockers, the sync-vs-async loop, ex. 4)
- `memory`: 12.2.4 / 8.2.4 (memory with and without a per-batch blocker, ex. 2 and ex. 3)
- `auto_parallel`: 8.3 (CPU and GPU together, compute and copy overlapped, its exercises)
- `pytorch_async`: the PyTorch edition's page (GPU warm-up, dependency, 10000-step loop)
- `training`: 8.1 (hybridize), 8.2.4's training loop and 12.2.4's recorded loop (Gluon)
- `compute_perf`: 8.4 (allreduce, split_and_load)
- `data_parallel`: 8.4's LeNet and 8.5's ResNet-18 on 1 and 2 GPUs (the book's) and CPU devices

Usage: `asyncsim.record(get('sync_vs_async').workload, **get('sync_vs_async').quick)`, or
`get(name).record(quick=True)`.
"""

from __future__ import annotations

from dataclasses import replace

from asyncsim.lab.scenarios import (
    async_compute,
    auto_parallel,
    compute_perf,
    data_parallel,
    memory,
    pytorch_async,
    training,
)
from asyncsim.lab.scenarios.base import DEVICES, Scenario, UnknownScenarioError

__all__ = ["DEVICES", "MEASURE", "SCENARIOS", "Scenario", "UnknownScenarioError", "get", "names"]


# Sizes for real runs (`asyncsim compare`, `asyncsim figures`, benchmarks/accuracy.py) where the
# book's would not do on a small machine: the 'numpy' part of the warm-ups is plain NumPy on the
# frontend that a prediction cannot see; the book's 2000x2000 loop without a per-iteration blocker
# holds up to 1000 live outputs (16 GB) and the memory experiment without one holds 4.8 GB:
# the effect the chapter warns about, and far more than realexec's 1 GiB buffer cache keeps, so
# every run would fault in fresh pages, a cost the model does not have.
# The training loops run 50 batches, or 20 with a backward pass, instead of 100 or 150: a batch
# costs the same early and late in the epoch (with a blocker per batch) or only adds to the
# backlog (without), so the fewer batches show the same effect on the timelines and memory
# curves, and the main job fits a class period on a two-core machine (each real run is done
# twice, the first a warm-up). Their 'batch 100' and 'batch 150' regions then do not exist;
# `asyncsim predict` gives the book's sizes. run()'s products are 1000 per side, not 2000: one
# already keeps both cores of such a machine busy, as the larger does. 8.4's and 8.5's GPU runs
# train two epochs of 20 batches, not four of 235: a step costs the same anywhere in an epoch
# (the book prints each epoch at the same time, give or take 8%) and the second epoch shows the
# steady state; on a machine without a GPU the main job predicts them, and whole epochs of
# ResNet-18 take the model tens of seconds (the book table extrapolates them from a few batches:
# `data_parallel.epochs_extrapolated`).
_NO_NUMPY = {"numpy_part": False}
_SHORT = {"num_batches": 50}
_SHORT_NO_BARRIER = {"num_batches": 50, "batch_size": 128}
_TRAIN = {"num_batches": 20}
MEASURE = {
    "warmup": _NO_NUMPY,
    "torch_warmup": _NO_NUMPY,
    "torch_warmup_cpu": _NO_NUMPY,
    "sync_vs_async": {"n": 50},
    "memory_barrier": _SHORT,
    "memory_overlap": _SHORT,
    "memory_asscalar_8_2": _SHORT,
    "memory_no_barrier": _SHORT_NO_BARRIER,
    "memory_no_barrier_8_2": _SHORT_NO_BARRIER,
    "record_barrier": _SHORT,
    "record_no_barrier": _SHORT_NO_BARRIER,
    "train_asscalar_8_2": _TRAIN,
    "train_no_barrier_8_2": {**_TRAIN, "batch_size": 128},
    "independent_products": {"size": 1000},
    **{name: {"epochs": 2, "num_train": 20 * batch, "num_test": batch}
       for name, batch in (("lenet_1gpu", 256), ("lenet_2gpu", 256), ("resnet18_1gpu", 256),
                           ("resnet18_2gpu", 512))},
}


def _collect() -> dict[str, Scenario]:
    table: dict[str, Scenario] = {}
    for module in (async_compute, memory, auto_parallel, pytorch_async, training, compute_perf,
                   data_parallel):
        for scenario in module.SCENARIOS:
            if scenario.name in MEASURE:
                scenario = replace(scenario, measure=MEASURE[scenario.name])
            if scenario.name in table:
                raise ValueError(f"scenario {scenario.name!r} is registered twice")
            table[scenario.name] = scenario
    return table


SCENARIOS: dict[str, Scenario] = _collect()


def names(devices: str | None = None) -> list[str]:
    """Registered names in chapter order; with `devices`, only those runnable on that set."""
    if devices is None:
        return list(SCENARIOS)
    have = DEVICES.index(devices)
    return [n for n, s in SCENARIOS.items() if DEVICES.index(s.devices) <= have]


def get(name: str) -> Scenario:
    """The scenario called `name`, or an UnknownScenarioError that lists every name."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenarioError(
            f"unknown scenario {name!r}; known scenarios: {', '.join(SCENARIOS)}") from None
