"""The "book" presets: one Profile per book machine, derived from the numbers its chapter printed
(`asyncsim.model.printed`), each declaring the few numbers it was fitted to.

The seeds ran on four machines:
- A, d2l-en 12.2 (seed 001, CPU, MXNet's numpy interface), and B, the d2l-zh book's GPU machine
  (8.3 in seed 002; 8.4 and 8.5 copied into seed 003): preset "book". Both time a CPU matrix
  product and agree on its speed (B's 2000x2000 rate predicts A's 1000x1000 blockers).
- C, the d2l-zh chapter 8 notebook (seed 003, 8.1 and 8.2, CPU only): preset "book-zh". Its issue
  cost is half A's, its matrix product 8x slower, and its blockers (wait_to_read) cost ms.
- P, the PyTorch edition's page (seed 004, a GPU): preset "book-torch". It issues 3x faster than
  A, on a GPU that multiplies 1000x1000 matrices in 0.8 ms.

A preset is fitted to as few numbers as its unknowns need (`FITTED`, the one place they are
declared; `Profile.fitted` reads them): each value below is solved from the model's own formula
for one printed line (a region of n back-to-back ops closed by a blocker takes t1 + sum of the op
costs + t3 when the backend is the bottleneck, n t1 + the last op + t3 when the frontend is), so
simulating that line's scenario gives the printed time back. Every other printed number is a
prediction. Values no chapter measures are ASSUMED and say so.

Two rules about what the book's framework pays for:
- MXNet's FullyConnected and Convolution add their bias inside the op; the workloads write that
  as a broadcast add after the product, so the presets price a broadcast add's issue at zero
  ("frontend:broadcast"; its execution is still paid).
- `x + 1` (12.2.3's loop) issues through MXNet's scalar fast path, 3x cheaper than the operator
  calls that 12.2.1 times; only that op ("frontend:add_scalar") gets the cheaper price.
"""

from __future__ import annotations

import re

from asyncsim.model.cost import LINKS, Cost
from asyncsim.model.printed import value
from asyncsim.model.profile import Profile

F32 = 4  # bytes per float32
MIB = 2**20

# The numbers each preset is fitted to, as (scenario, label) rows of asyncsim.model.printed.
FITTED: dict[str, frozenset[tuple[str, str]]] = {
    "book": frozenset({
        ("warmup", "mxnet.np"),  # t1
        ("sync_vs_async_12_2", "asynchronous"),  # the issue of x + 1
        ("sync_vs_async_12_2", "synchronous"),  # a tiny op's t2 + t3
        ("blockers", "scalar conversion"),  # the reduction (sum)
        ("memory_no_barrier", "time per epoch"),  # the normal sampler
        ("cpu_gpu_parallel", "Run on CPU."),  # the CPU matrix product
        ("cpu_gpu_parallel", "Then run on GPU."),  # the GPU matrix product
        ("compute_copy_overlap", "Then copy to CPU."),  # the GPU -> CPU link
    }),
    "book-zh": frozenset({
        ("hybridize_mlp", "before hybridizing"),  # t1
        ("hybridize_mlp", "after hybridizing"),  # a hybridized block's call
        ("queued_vs_finished", "Workloads are queued."),  # the sampler's issue
        ("blockers_8_2", "Workloads are finished."),  # t3 (print of a computed array)
        ("sync_vs_async", "asynchronous."),  # the elementwise bandwidth
        ("sync_vs_async", "synchronous."),  # what a wait_to_read adds
        ("blockers_8_2", "waitall"),  # the matrix product
        ("blockers_8_2", "wait_to_read"),  # the uniform sampler
    }),
    "book-torch": frozenset({
        ("torch_warmup", "torch"),  # t1
        ("torch_warmup", "Done"),  # the GPU matrix product
    }),
}

# -- machine C (seed 003, 8.1 and 8.2) -------------------------------------------------------------
# 8.2.2 'Workloads are finished.' prints a y computed by the block before: nothing to wait for.
C_T3 = value("blockers_8_2", "Workloads are finished.")
# 8.1.2 'before hybridizing': 1000 forwards of Dense(256)-Dense(128)-Dense(2) on one example, each
# 3 products, 2 relus and 3 bias adds (free, as in FullyConnected): frontend-bound, the last op's
# microseconds and a waitall after 5000 issues.
C_T1 = (value("hybridize_mlp", "before hybridizing") - C_T3) / 5000
# 8.1.2 'after hybridizing': the same 1000 forwards as one cached graph each, frontend-bound too:
# 1000 calls and a waitall. A call costs this machine two plain ops' issue (Gluon's Python around
# the cached op and its C++ invocation); no other number on machine C prices it, so it is fitted.
C_GRAPH_CALL = (value("hybridize_mlp", "after hybridizing") - C_T3) / 1000
# 8.2.3 'asynchronous.': 1000 `y = x + 1` on 2000x2000 behind one issue, then a waitall.
C_ADD_2000 = (value("sync_vs_async", "asynchronous.") - C_T1 - C_T3) / 1000
C_ELEMENTWISE_BW = 2 * 2000 * 2000 * F32 / C_ADD_2000  # x + 1 reads 16 MB and writes 16 MB
# 8.2.3 'synchronous.': 1000 (t1 + add + t3 + what a wait_to_read adds): a wait_to_read that
# waits costs this machine 3.8 ms in all, a print with nothing to wait for 1.1 ms.
C_WAIT_TO_READ = value("sync_vs_async", "synchronous.") / 1000 - C_T1 - C_ADD_2000 - C_T3
# 8.2.2 'waitall': y = dot, z = dot, waitall = t1 + 2 dot + t3 (z's issue hides behind y's dot).
C_DOT_2000 = (value("blockers_8_2", "waitall") - C_T1 - C_T3) / 2
C_PEAK = 2 * 2000**3 / C_DOT_2000
C_SUM_2000 = (2000 * 2000 * F32 + F32) / C_ELEMENTWISE_BW  # ASSUMED: reductions stream like x + 1
# 8.2.1 'Workloads are queued.': uniform, dot and sum issued, nothing waited for. They cost 7x the
# issue 8.1.2 gives; the model puts the difference on the sampler's issue.
C_UNIFORM_ISSUE = value("queued_vs_finished", "Workloads are queued.") - 2 * C_T1
# 8.2.2 'time': uniform, dot, sum, wait_to_read = its issue + uniform + dot + sum + t3 + the wait.
C_UNIFORM_2000 = (value("blockers_8_2", "wait_to_read") - C_UNIFORM_ISSUE - C_DOT_2000
                  - C_SUM_2000 - C_T3 - C_WAIT_TO_READ)
C_SAMPLER_BW = 2000 * 2000 * F32 / C_UNIFORM_2000

# -- machines A and B (seeds 001 and 002) ----------------------------------------------------------
# 12.2.1 'mxnet.np': 10 x (np.random.normal, np.dot) issued without waiting: 20 operator calls.
T1 = value("warmup", "mxnet.np") / 20
# 12.2.3: 1000 `y = x + 1` on a (1, 2) x. 'asynchronous' is frontend-bound: 1000 t1e + t2 + t3;
# 'synchronous' is 1000 (t1e + t2 + t3). So 999 (t2 + t3) is their difference.
SMALL_SUM = (value("sync_vs_async_12_2", "synchronous")
             - value("sync_vs_async_12_2", "asynchronous")) / 999
T1_ADD_SCALAR = (value("sync_vs_async_12_2", "asynchronous") - SMALL_SUM) / 1000
T3 = SMALL_SUM / 2  # ASSUMED: the book gives only t2 + t3 of a tiny op; split evenly
SMALL_OP = SMALL_SUM / 2  # the latency of a tiny CPU op
# 8.3.1 'Run on CPU.': t1 + 10 products of 2000x2000 + t3.
CPU_DOT_2000 = (value("cpu_gpu_parallel", "Run on CPU.") - T1 - T3) / 10
CPU_PEAK = 2 * 2000**3 / CPU_DOT_2000
CPU_DOT_1000 = 2 * 1000**3 / CPU_PEAK
# 12.2.2 'scalar conversion': b = dot; b.sum().item() = t1 + dot + sum + t3.
SUM_1000 = value("blockers", "scalar conversion") - T1 - CPU_DOT_1000 - T3
REDUCE_BW = (1000 * 1000 * F32 + F32) / (SUM_1000 - SMALL_OP)
ELEMENTWISE_BW = C_ELEMENTWISE_BW  # ASSUMED: no chapter times a large elementwise op on A or B


def _mlp_batch_rest(batch=1024, inputs=512, hidden=(2048, 512)) -> float:
    """Seconds on machine A of one 12.2.4 batch without its sampler: ones, three products, three
    bias adds, two relus and the loss (sub, mul_scalar, mul), as `memory.get_net` and `loss`."""
    sizes = (inputs, *hidden, 1)
    seconds = 2 * batch * sum(a * b for a, b in zip(sizes, sizes[1:], strict=False))
    seconds /= CPU_PEAK
    elementwise = [batch]  # ones: its output
    for width in sizes[1:]:
        elementwise.append(2 * batch * width + width)  # + b reads Z and b, writes
    for width in hidden:
        elementwise.append(2 * batch * width)  # relu
    elementwise += [3 * batch, 2 * batch, 3 * batch]  # the loss on (batch, 1)
    return seconds + sum(SMALL_OP + n * F32 / ELEMENTWISE_BW for n in elementwise)


# 12.2.4 without a barrier, 'time per epoch': backend-bound, one issue then 150 batches back to back
# and a waitall. The sampler is what is left of a batch (12.2.1's 'Done' is then a prediction).
NORMAL_BATCH = ((value("memory_no_barrier", "time per epoch") - T1 - T3) / 150
                - _mlp_batch_rest())
SAMPLER_BW = 1024 * 512 * F32 / NORMAL_BATCH
# 8.3.1 'Then run on GPU.': t1 + 10 products of 6000x6000 + t3; 8.3.2 'Then copy to CPU.': t1 + 10
# copies of a 6000x6000 float32 + t3.
GPU_DOT_6000 = (value("cpu_gpu_parallel", "Then run on GPU.") - T1 - T3) / 10
GPU_PEAK = 2 * 6000**3 / GPU_DOT_6000
GPU_TO_CPU_BW = 6000 * 6000 * F32 / ((value("compute_copy_overlap", "Then copy to CPU.")
                                      - T1 - T3) / 10)
GPU_LAUNCH = 10e-6  # ASSUMED: a CUDA kernel launch
CXX_ISSUE = 5e-6  # ASSUMED: MXNet's C++ push of one op that backward or a kvstore issues
GPU_BW = 240e9  # ASSUMED: device memory bandwidth of a Tesla K80 die (3.6 TFLOP/s matches one)
# ASSUMED: freed buffers glibc keeps resident: its trim threshold, twice the largest buffer freed
# (the MLP's 8 MiB activations); asyncsim.model.rss.
RSS_KEEP = 2 * 8 * MIB

# -- machine P (seed 004) --------------------------------------------------------------------------
# 'torch': 10 x (torch.randn, torch.mm) on the GPU issued without waiting: 20 calls.
P_T1 = value("torch_warmup", "torch") / 20
P_T3 = T3  # ASSUMED: as A's
# 'Done' (the next cell: the GPU idle when it starts): 10 (randn + mm of 1000x1000) and a sync.
# The first randn is done before the first mm is issued; after that the GPU is the bottleneck:
# 2 t1 + 10 mm + 9 randn + t3.
P_NORMAL_1000 = GPU_LAUNCH + 1000 * 1000 * F32 / GPU_BW  # ASSUMED: as B's GPU
P_GPU_DOT_1000 = (value("torch_warmup", "Done") - 2 * P_T1 - P_T3 - 9 * P_NORMAL_1000) / 10
P_GPU_PEAK = 2 * 1000**3 / (P_GPU_DOT_1000 - GPU_LAUNCH)


def _cpu_costs(elementwise: Cost, sampler: Cost, reduce: Cost, dot: Cost) -> dict[str, Cost]:
    """The CPU rows every book machine has: memory-bound groups at one bandwidth, the random
    samplers at theirs, reductions, and the matrix product at a peak flop rate."""
    return {"cpu:*": elementwise, "cpu:elementwise": elementwise, "cpu:create": elementwise,
            "cpu:copy": elementwise, "cpu:normal": sampler, "cpu:uniform": sampler,
            "cpu:reduce": reduce, "cpu:dot": dot}


def _a_cpu() -> dict[str, Cost]:
    return _cpu_costs(elementwise=Cost(latency=SMALL_OP, bandwidth=ELEMENTWISE_BW),
                      sampler=Cost(bandwidth=SAMPLER_BW),
                      reduce=Cost(latency=SMALL_OP, bandwidth=REDUCE_BW),
                      dot=Cost(peak=CPU_PEAK))


def _meta(name: str, machines: str, assumed: str) -> dict:
    return {"source": "the chapters' printed numbers (asyncsim.model.book derives each)",
            "machines": machines, "assumed": assumed,
            "fitted": sorted([list(pair) for pair in FITTED[name]])}


def book() -> Profile:
    """Machines A (d2l-en 12.2) and B (the d2l-zh book's 8.3-8.5), one CPU worker, two GPUs."""
    costs = {
        **_a_cpu(),
        "gpu:*": Cost(latency=GPU_LAUNCH, bandwidth=GPU_BW),
        "gpu:dot": Cost(peak=GPU_PEAK),
        "frontend:add_scalar": Cost(latency=T1_ADD_SCALAR),
        "frontend:broadcast": Cost(),
    }
    links = {key: Cost(bandwidth=GPU_TO_CPU_BW) for key in LINKS}  # ASSUMED symmetric, via host
    return Profile(name="book", t1=T1, t3=T3, workers=1, cores=8, gpus=2, costs=costs,
                   links=links, rss_keep=RSS_KEEP, meta=_meta(
                       "book", "d2l-en 12.2 (seed 001) and the d2l-zh book's 8.3-8.5 "
                       "(seeds 002, 003)",
                       "t2/t3 split of a tiny op, GPU elementwise cost, copy links other than "
                       "gpu->cpu, elementwise bandwidth (machine C's), cores, rss_keep"))


def book_zh() -> Profile:
    """Machine C (the d2l-zh chapter 8 notebook, 8.1 and 8.2): CPU only, one worker."""
    costs = {
        **_cpu_costs(elementwise=Cost(bandwidth=C_ELEMENTWISE_BW),
                     sampler=Cost(bandwidth=C_SAMPLER_BW),
                     reduce=Cost(bandwidth=C_ELEMENTWISE_BW), dot=Cost(peak=C_PEAK)),
        "frontend:uniform": Cost(latency=C_UNIFORM_ISSUE),
        "frontend:graph": Cost(latency=C_GRAPH_CALL),
        # ASSUMED: MXNet pushes backward's ops and a Trainer's kvstore work from C++
        "frontend:backward": Cost(latency=CXX_ISSUE),
        "frontend:kvstore": Cost(latency=CXX_ISSUE),
        "frontend:wait_to_read": Cost(latency=C_WAIT_TO_READ),
        "frontend:broadcast": Cost(),
    }
    return Profile(name="book-zh", t1=C_T1, t3=C_T3, workers=1, cores=4, gpus=0, costs=costs,
                   rss_keep=RSS_KEEP, meta=_meta(
                       "book-zh", "the d2l-zh chapter 8 notebook, 8.1 and 8.2 (seed 003)",
                       "reductions as fast as x + 1, cores, rss_keep, the C++ push of "
                       "backward's and the kvstore's ops (5 us)"))


def book_torch() -> Profile:
    """Machine P (the PyTorch edition's page): its issue cost and GPU; the rest is A's."""
    costs = {
        **_a_cpu(),
        "gpu:*": Cost(latency=GPU_LAUNCH, bandwidth=GPU_BW),
        "gpu:dot": Cost(latency=GPU_LAUNCH, peak=P_GPU_PEAK),
    }
    links = {key: Cost(bandwidth=GPU_TO_CPU_BW) for key in LINKS}
    return Profile(name="book-torch", t1=P_T1, t3=P_T3, workers=1, cores=8, gpus=1,
                   costs=costs, links=links, rss_keep=RSS_KEEP, meta=_meta(
                       "book-torch", "the PyTorch edition's page (seed 004)",
                       "t3, the GPU's bandwidth and launch (machine B's), CPU costs and links "
                       "(machines A and B's), cores, rss_keep"))


PRESETS = {"book": book, "book-zh": book_zh, "book-torch": book_torch}
MACHINES = {"A": "book", "B": "book", "C": "book-zh", "P": "book-torch"}


def preset_for(source: str) -> str:
    """The preset of the machine that printed a scenario's numbers, from its `book_source` or
    `section` (a seed file name and a section): seed 003's 8.3-8.5 are the book's GPU machine's,
    its 8.1 and 8.2 (and seed 000's copy of 8.2) the notebook's."""
    for seed, preset in (("001_", "book"), ("002_", "book"), ("004_", "book-torch")):
        if seed in source:
            return preset
    if "003_" not in source and "000_" not in source:
        return "book"
    section = re.search(r"(?<![\w.])(\d+\.\d+)", source)
    gpu_sections = ("8.3", "8.4", "8.5")
    return "book" if section and section.group(1).startswith(gpu_sections) else "book-zh"
