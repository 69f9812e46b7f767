"""Every number the chapters printed (../shared/seeds/), as data: the line as printed and where
the toolkit models it.

The five seeds print 61 timing and memory numbers, each on a line such as "synchronous. time:
7.3877 sec", "increased memory: 4.648000 MB" or "epoch 1, time 1.5 sec, test acc 0.10". Each is
a `Printed` row: the seed file, its section, the exact printed line, the value, its unit, and
the key that finds it in a prediction: `(scenario, label)`. For a time, the label is the
scenario's benchmark region; for an "increased memory" line it is "increased memory", the change
of the process's resident memory across region `over` (the book's `ps` reads before and after
it; `asyncsim.model.rss` predicts it).

`machine` names the book machine that printed the row (see `asyncsim.model.book`, where each
machine's preset is derived from these values; "G" is the book's GPU machine as 8.4 and 8.5
run it, whose preset `asyncsim.lab.presets` derives). `needs` says what a model of the engine cannot
do about a row: "numpy" for plain NumPy on the frontend, which no prediction sees.

Units: seconds ("s") and the book's megabytes ("MB": its `get_mem` divides the RSS that `ps`
reports in KiB by 1e3, so an "MB" is 1024e3 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

RSS = "increased memory"  # the label of a row that is a change of resident memory

SEEDS = {
    "000": "000_6080be87bce40d23.txt",
    "001": "001_c4db6a957a3c16a4.txt",
    "002": "002_497eb3d3148709f0.txt",
    "003": "003_3c45022c8209ddba.txt",
    "004": "004_344996d425b31308.txt",
}


@dataclass(frozen=True)
class Printed:
    """One number a chapter printed."""

    seed: str  # "001": the seed file (SEEDS)
    section: str  # "12.2.1"
    text: str  # the line exactly as printed
    value: float  # the number in it, in `unit`
    unit: str  # "s" or "MB"
    scenario: str  # the scenario that models it
    label: str  # its benchmark region, or RSS
    machine: str  # "A", "B", "C", "G" or "P" (asyncsim.model.book.MACHINES)
    over: str = ""  # for an RSS row: the region across which memory is read
    needs: str = ""  # "numpy": not a number a model of the engine can predict

    @property
    def key(self) -> tuple[str, str]:
        return (self.scenario, self.label)

    @property
    def file(self) -> str:
        return SEEDS[self.seed]


def _t(seed, section, text, value, scenario, label, machine, needs=""):
    return Printed(seed, section, text, value, "s", scenario, label, machine, needs=needs)


def _mem(seed, section, text, value, scenario, machine):
    return Printed(seed, section, text, value, "MB", scenario, RSS, machine, over="time per epoch")


def _epochs(section, scenario, times, accs):
    return [_t("003", section, f"epoch {k}, time {t:.1f} sec, test acc {a}", t, scenario,
               f"epoch {k}", "G") for k, (t, a) in enumerate(zip(times, accs, strict=True), 1)]


PRINTED: tuple[Printed, ...] = (
    # -- seed 001: d2l-en 12.2 (machine A) --------------------------------------------------------
    _t("001", "12.2.1", "numpy: 0.8840 sec", 0.8840, "warmup", "numpy", "A", needs="numpy"),
    _t("001", "12.2.1", "mxnet.np: 0.0044 sec", 0.0044, "warmup", "mxnet.np", "A"),
    _t("001", "12.2.1", "Done: 0.7144 sec", 0.7144, "warmup", "Done", "A"),
    _t("001", "12.2.2", "waitall: 0.0046 sec", 0.0046, "blockers", "waitall", "A"),
    _t("001", "12.2.2", "wait_to_read: 0.0044 sec", 0.0044, "blockers", "wait_to_read", "A"),
    _t("001", "12.2.2", "numpy conversion: 0.0048 sec", 0.0048, "blockers", "numpy conversion",
       "A"),
    _t("001", "12.2.2", "scalar conversion: 0.0145 sec", 0.0145, "blockers", "scalar conversion",
       "A"),
    _t("001", "12.2.3", "synchronous: 0.0789 sec", 0.0789, "sync_vs_async_12_2", "synchronous",
       "A"),
    _t("001", "12.2.3", "asynchronous: 0.0769 sec", 0.0769, "sync_vs_async_12_2", "asynchronous",
       "A"),
    _t("001", "12.2.4", "batch 50, time 2.0848 sec", 2.0848, "memory_barrier", "batch 50", "A"),
    _t("001", "12.2.4", "batch 100, time 4.1301 sec", 4.1301, "memory_barrier", "batch 100", "A"),
    _t("001", "12.2.4", "batch 150, time 6.1954 sec", 6.1954, "memory_barrier", "batch 150", "A"),
    _t("001", "12.2.4", "time per epoch: 6.1967 sec", 6.1967, "memory_barrier", "time per epoch",
       "A"),
    _mem("001", "12.2.4", "increased memory: 23.696000 MB", 23.696, "memory_barrier", "A"),
    _t("001", "12.2.4", "batch 50, time 0.1198 sec", 0.1198, "memory_no_barrier", "batch 50",
       "A"),
    _t("001", "12.2.4", "batch 100, time 0.2371 sec", 0.2371, "memory_no_barrier", "batch 100",
       "A"),
    _t("001", "12.2.4", "batch 150, time 0.3538 sec", 0.3538, "memory_no_barrier", "batch 150",
       "A"),
    _t("001", "12.2.4", "time per epoch: 6.0500 sec", 6.0500, "memory_no_barrier",
       "time per epoch", "A"),
    _mem("001", "12.2.4", "increased memory: -8.168000 MB", -8.168, "memory_no_barrier", "A"),
    # -- seed 002: d2l-zh 8.3 (machine B) ---------------------------------------------------------
    _t("002", "8.3.1", "Run on CPU. time: 0.3588 sec", 0.3588, "cpu_gpu_parallel", "Run on CPU.",
       "B"),
    _t("002", "8.3.1", "Then run on GPU. time: 1.2104 sec", 1.2104, "cpu_gpu_parallel",
       "Then run on GPU.", "B"),
    _t("002", "8.3.1", "Run on both CPU and GPU in parallel. time: 1.2183 sec", 1.2183,
       "cpu_gpu_parallel", "Run on both CPU and GPU in parallel.", "B"),
    _t("002", "8.3.2", "Run on GPU. time: 1.2223 sec", 1.2223, "compute_copy_overlap",
       "Run on GPU.", "B"),
    _t("002", "8.3.2", "Then copy to CPU. time: 0.5272 sec", 0.5272, "compute_copy_overlap",
       "Then copy to CPU.", "B"),
    _t("002", "8.3.2", "Run and copy in parallel. time: 1.2770 sec", 1.2770,
       "compute_copy_overlap", "Run and copy in parallel.", "B"),
    # -- seed 003: the d2l-zh chapter 8 notebook (machine C; 8.4 and 8.5 are the book's B) --------
    _t("003", "8.1.2", "before hybridizing: 0.4943 sec", 0.4943, "hybridize_mlp",
       "before hybridizing", "C"),
    _t("003", "8.1.2", "after hybridizing: 0.2053 sec", 0.2053, "hybridize_mlp",
       "after hybridizing", "C"),
    _t("003", "8.2.1", "Workloads are queued. time: 0.0014 sec", 0.0014, "queued_vs_finished",
       "Workloads are queued.", "C"),
    _t("003", "8.2.1", "Workloads are finished. time: 0.3517 sec", 0.3517, "queued_vs_finished",
       "Workloads are finished.", "C"),
    _t("003", "8.2.2", "time: 0.3558 sec", 0.3558, "blockers_8_2", "wait_to_read", "C"),
    _t("003", "8.2.2", "Workloads are finished. time: 0.0011 sec", 0.0011, "blockers_8_2",
       "Workloads are finished.", "C"),
    _t("003", "8.2.2", "time: 0.6061 sec", 0.6061, "blockers_8_2", "waitall", "C"),
    _t("003", "8.2.2", "time: 0.3111 sec", 0.3111, "blockers_8_2", "asnumpy", "C"),
    _t("003", "8.2.2", "time: 0.3302 sec", 0.3302, "blockers_8_2", "asscalar", "C"),
    _t("003", "8.2.3", "synchronous. time: 7.3877 sec", 7.3877, "sync_vs_async", "synchronous.",
       "C"),
    _t("003", "8.2.3", "asynchronous. time: 3.5370 sec", 3.5370, "sync_vs_async",
       "asynchronous.", "C"),
    _t("003", "8.2.4", "batch 50, time 13.377381 sec", 13.377381, "train_asscalar_8_2",
       "batch 50", "C"),
    _t("003", "8.2.4", "batch 100, time 26.867962 sec", 26.867962, "train_asscalar_8_2",
       "batch 100", "C"),
    _mem("003", "8.2.4", "increased memory: 4.648000 MB", 4.648, "train_asscalar_8_2", "C"),
    _t("003", "8.2.4", "batch 50, time 0.083964 sec", 0.083964, "train_no_barrier_8_2",
       "batch 50", "C"),
    _t("003", "8.2.4", "batch 100, time 0.166682 sec", 0.166682, "train_no_barrier_8_2",
       "batch 100", "C"),
    _mem("003", "8.2.4", "increased memory: 0.016000 MB", 0.016, "train_no_barrier_8_2", "C"),
    *_epochs("8.4.6", "lenet_1gpu", (1.5, 1.4, 1.4, 1.4), ("0.10", "0.60", "0.75", "0.68")),
    *_epochs("8.4.6", "lenet_2gpu", (2.6, 2.6, 2.4, 2.5), ("0.10", "0.69", "0.74", "0.74")),
    *_epochs("8.5.2", "resnet18_1gpu", (14.0, 12.9, 13.0, 13.0), ("0.89", "0.91", "0.91", "0.92")),
    *_epochs("8.5.2", "resnet18_2gpu", (7.3, 6.7, 6.7, 6.7), ("0.69", "0.86", "0.89", "0.90")),
    # -- seed 004: the PyTorch edition's page (machine P) ----------------------------------------
    _t("004", "通过后端异步处理", "> numpy: 0.3780 sec", 0.3780, "torch_warmup", "numpy", "P",
       needs="numpy"),
    _t("004", "通过后端异步处理", "> torch: 0.0015 sec", 0.0015, "torch_warmup", "torch", "P"),
    _t("004", "通过后端异步处理", "> Done: 0.0083 sec", 0.0083, "torch_warmup", "Done", "P"),
)

BY_KEY: dict[tuple[str, str], Printed] = {row.key: row for row in PRINTED}


def value(scenario: str, label: str) -> float:
    """The printed value of row (scenario, label): the book's number the presets derive from."""
    try:
        return BY_KEY[scenario, label].value
    except KeyError:
        raise KeyError(f"the seeds print no number for ({scenario!r}, {label!r})") from None


def rows_of(scenario: str) -> list[Printed]:
    """The printed rows a scenario models, in the order the seeds print them."""
    return [row for row in PRINTED if row.scenario == scenario]


__all__ = ["BY_KEY", "PRINTED", "RSS", "SEEDS", "Printed", "rows_of", "value"]
