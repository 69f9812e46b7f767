"""The "book" presets: Profiles derived from the times the chapters report (../shared/seeds/).

The chapters ran on three machines, and one set of numbers cannot describe all three:

- "book": the d2l-en 12.2 machine (seed 001, CPU) together with the d2l-zh 8.3 machine (seed 002,
  CPU and GPU). Both time a CPU matrix product and agree on its speed (about 450 GFLOP/s), so they
  share one profile. 12.2 gives the frontend (t1, t3) and the CPU sampler and reduction costs;
  8.3 gives the CPU and GPU matrix products and the GPU->CPU copy bandwidth.
- "book-zh": the older d2l-zh notebook machine of chapter 8.2 (seed 003, CPU only), whose matrix
  product is 8x slower and whose frontend is 6x slower.

Every number below is solved from the model's own formula for the row it comes from (a row is
'label: seconds' as printed in the chapter), so simulating that row's code with the profile gives
the printed time back. Rows not used for fitting are predicted; the docstrings of `book` and
`book_zh` list how close they come. Values the chapters do not measure (GPU elementwise speed,
kernel launch latency, copies other than GPU->CPU) are marked ASSUMED.

Model recap (asyncsim.simulate): one CPU worker (MXNet's default), an op can start once issued and
its inputs are ready, a blocker costs t3 after its wait, and a region of n back-to-back ops closed
by a blocker takes t1 + sum(op costs) + t3 when the backend is the bottleneck.
"""

from __future__ import annotations

from asyncsim.model.profile import LINKS, Cost, Profile

F32 = 4  # bytes per float32

# ---- d2l-zh notebook 8.2 (seed 003), machine C ---------------------------------------------------
# 8.2.1 'Workloads are queued. time: 0.0014 sec': uniform, dot, sum issued, nothing waited for.
C_T1 = 0.0014 / 3
# 8.2.3 loop of 1000 `y = x + 1` on a 2000x2000 x: 'synchronous. 7.3877 sec' = 1000 (t1 + e + t3)
# (a wait_to_read per iteration), 'asynchronous. 3.5370 sec' = t1 + 1000 e + t3 (backend-bound,
# closed by waitall). Subtracting: 999 (t1 + t3) = 7.3877 - 3.5370.
C_T3 = (7.3877 - 3.5370) / 999 - C_T1
C_ADD_2000 = (3.5370 - C_T1 - C_T3) / 1000
C_ELEMENTWISE_BW = 2 * 2000 * 2000 * F32 / C_ADD_2000  # x + 1 reads 16 MB and writes 16 MB
# 8.2.2 'y = dot; z = dot; waitall: 0.6061 sec' = t1 + 2 dot + t3 (z's issue hides behind y's dot)
C_DOT_2000 = (0.6061 - C_T1 - C_T3) / 2
C_PEAK = 2 * 2000**3 / C_DOT_2000
# 8.2.2 'y = dot; y.norm().asscalar(): 0.3302 sec' = t1 + dot + norm + t3
C_NORM_2000 = 0.3302 - C_T1 - C_DOT_2000 - C_T3
C_REDUCE_BW = (2000 * 2000 * F32 + F32) / C_NORM_2000  # sum and mean assumed as fast as norm
# 8.2.2 'uniform; dot; sum; wait_to_read: 0.3558 sec' = t1 + uniform + dot + sum + t3
C_UNIFORM_2000 = 0.3558 - C_T1 - C_DOT_2000 - C_NORM_2000 - C_T3
C_SAMPLER_BW = 2000 * 2000 * F32 / C_UNIFORM_2000

# ---- d2l-en 12.2 (seed 001), machine A, and d2l-zh 8.3 (seed 002), machine B ------------------
# 12.2.1 'mxnet.np: 0.0044 sec': 10 x (np.random.normal, np.dot) issued without waiting: 20 issues.
T1 = 0.0044 / 20
# 12.2.3 loop of 1000 `y = x + 1` on x = np.ones((1, 2)): 'asynchronous: 0.0769 sec' is
# frontend-bound (a 2-element add is far cheaper than its issue): 1000 t1e + s with s = t2 + t3;
# 'synchronous: 0.0789 sec' = 1000 (t1e + s). So 999 s = 0.0789 - 0.0769.
SMALL_SUM = (0.0789 - 0.0769) / 999
T1_ELEMENTWISE = (0.0769 - SMALL_SUM) / 1000  # `x + 1` issues 3x faster than np.random.normal
T3 = SMALL_SUM / 2  # ASSUMED: the book gives only t2 + t3 of a tiny op; split evenly
SMALL_OP = SMALL_SUM / 2  # the latency of a tiny CPU op
# 8.3.1 'Run on CPU. time: 0.3588 sec' = t1 + 10 dot(2000x2000) + t3
CPU_DOT_2000 = (0.3588 - T1 - T3) / 10
CPU_PEAK = 2 * 2000**3 / CPU_DOT_2000
CPU_DOT_1000 = 2 * 1000**3 / CPU_PEAK
# 12.2.1 'Done: 0.7144 sec' = t1 + 10 (normal(1000x1000) + dot(1000x1000)) + t3, taking the
# region to start with an idle backend (with the 'mxnet.np' loop's backlog still queued it would
# hold twice the work, and 12.2.4's 40 ms per batch fits the slower sampler this gives)
NORMAL_1000 = (0.7144 - T1 - T3) / 10 - CPU_DOT_1000
SAMPLER_BW = 1000 * 1000 * F32 / NORMAL_1000
# 12.2.2 'scalar conversion: 0.0145 sec' = t1 + dot + sum + t3 (`b.sum().item()`)
SUM_1000 = 0.0145 - T1 - CPU_DOT_1000 - T3
REDUCE_BW = (1000 * 1000 * F32 + F32) / (SUM_1000 - SMALL_OP)
# 8.3.1 'Then run on GPU. time: 1.2104 sec' = t1 + 10 dot(6000x6000) + t3
GPU_DOT_6000 = (1.2104 - T1 - T3) / 10
GPU_PEAK = 2 * 6000**3 / GPU_DOT_6000
# 8.3.2 'Then copy to CPU. time: 0.5272 sec' = t1 + 10 copies of a 6000x6000 float32 + t3
GPU_TO_CPU_BW = 6000 * 6000 * F32 / ((0.5272 - T1 - T3) / 10)
# No chapter times a large elementwise op on machine A or B: use machine C's (8.2.3 above).
ELEMENTWISE_BW = C_ELEMENTWISE_BW
GPU_LAUNCH = 10e-6  # ASSUMED: a CUDA kernel launch
GPU_BW = 240e9  # ASSUMED: device memory bandwidth of a Tesla K80 die (3.6 TFLOP/s matches one)


def _cpu_costs(elementwise: Cost, sampler: Cost, reduce: Cost, dot: Cost) -> dict[str, Cost]:
    """The CPU rows every book machine has: memory-bound groups at one bandwidth, the random
    samplers at theirs, reductions, and the matrix product at a peak flop rate."""
    return {"cpu:*": elementwise, "cpu:elementwise": elementwise, "cpu:create": elementwise,
            "cpu:copy": elementwise, "cpu:normal": sampler, "cpu:uniform": sampler,
            "cpu:reduce": reduce, "cpu:dot": dot}


def book() -> Profile:
    """Machines A (d2l-en 12.2) and B (d2l-zh 8.3), one CPU worker, two GPUs (8.4/8.5 use two).

    Rows reproduced by construction: 12.2.1 'mxnet.np' 0.0044 and 'Done' 0.7144; 12.2.2 'scalar
    conversion' 0.0145; 12.2.3 'synchronous' 0.0789 and 'asynchronous' 0.0769; 8.3.1 'Run on CPU'
    0.3588 and 'Then run on GPU' 1.2104; 8.3.2 'Then copy to CPU' 0.5272.
    Predicted: 12.2.2 'waitall' 0.0046, 'wait_to_read' 0.0044 and 'numpy conversion' 0.0048 all as
    t1 + dot + t3 = 4.70 ms; 8.3.1 'Run on both CPU and GPU in parallel' 1.2183 as 1.2126 (the GPU
    dots start after the 10 CPU issues); 8.3.2 'Run on GPU' 1.2223 as 1.2104 and 'Run and copy in
    parallel' 1.2770 as 1.2631 (each copy overlaps the next product; the last copy is exposed).
    """
    gpu = Cost(latency=GPU_LAUNCH, bandwidth=GPU_BW)
    costs = {
        **_cpu_costs(elementwise=Cost(latency=SMALL_OP, bandwidth=ELEMENTWISE_BW),
                     sampler=Cost(bandwidth=SAMPLER_BW),
                     reduce=Cost(latency=SMALL_OP, bandwidth=REDUCE_BW),
                     dot=Cost(peak=CPU_PEAK)),
        "gpu:*": gpu,
        "gpu:dot": Cost(peak=GPU_PEAK),
        "frontend:elementwise": Cost(latency=T1_ELEMENTWISE),
    }
    links = {key: Cost(bandwidth=GPU_TO_CPU_BW) for key in LINKS}  # ASSUMED symmetric, via host
    return Profile(name="book", t1=T1, t3=T3, workers=1, cores=8, gpus=2, costs=costs,
                   links=links, meta={
                       "source": "the chapters' reported times (asyncsim/book.py derives each)",
                       "machines": "d2l-en 12.2 (seed 001) and d2l-zh 8.3 (seed 002)",
                       "assumed": "t2/t3 split of a tiny op, GPU elementwise cost, copy links "
                                  "other than gpu->cpu, elementwise bandwidth (from seed 003), "
                                  "cores",
                   })


def book_zh() -> Profile:
    """Machine C (the d2l-zh notebook, chapter 8.2): CPU only, one worker.

    Reproduced by construction: 'Workloads are queued.' 0.0014; 'time' 0.3558 (uniform, dot, sum,
    wait_to_read); 'y, z = dot, dot; waitall' 0.6061; 'norm().asscalar()' 0.3302; 'synchronous.'
    7.3877 and 'asynchronous.' 3.5370. Predicted: 'Workloads are finished.' 0.3517 as 0.3544;
    'asnumpy' 0.3111 as 0.3050; but 'print' of an already computed y, 0.0011, as t3 = 3.4 ms: the
    book's sync loop needs 3.4 ms per blocker that this lone print does not show.
    """
    costs = {
        **_cpu_costs(elementwise=Cost(bandwidth=C_ELEMENTWISE_BW),
                     sampler=Cost(bandwidth=C_SAMPLER_BW),
                     reduce=Cost(bandwidth=C_REDUCE_BW), dot=Cost(peak=C_PEAK)),
    }
    return Profile(name="book-zh", t1=C_T1, t3=C_T3, workers=1, cores=4, gpus=0, costs=costs,
                   meta={"source": "the chapters' reported times (asyncsim/book.py derives each)",
                         "machines": "d2l-zh notebook chapter 8.2 (seed 003)",
                         "assumed": "reductions all as fast as norm; cores"})
