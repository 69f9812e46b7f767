"""Calibration's measuring half: what to measure (`Settings`, `FULL`, `QUICK`, `kernels`) and the
run of every microbenchmark on the real engine that yields the raw numbers (`_measure`).

`realexec.calibrate` re-exports these names, derives a Profile from the raw numbers and caches
it; `realexec.calibration.gpu` times the same `kernels` on a GPU. Nothing here fits or prices:
`_measure` returns the numbers as measured, each microbenchmark's own summary of its repeats
(see `realexec.calibration.microbench`, `realexec.calibration.host`,
`realexec.calibration.training`, `realexec.calibration.issuing`, `realexec.calibration.firsts`).

Assumptions: the caller has paused the garbage collector (a collection would land in a cost);
`_measure` first keeps every core busy for a second when its settings spread rounds over time
(`realexec.calibration.steady`: idle cores of a virtual machine run slower for a while). Arrays are
float32. Units: sizes in elements (float32), sides in elements per side, times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from realexec.calibration import (
    aftergemm,
    caches,
    firsts,
    frees,
    issuing,
    light,
    microbench,
    places,
    training,
)
from realexec.calibration import gil as microbench_gil
from realexec.calibration import host as microbench_host
from realexec.calibration.fits import FITTED, ROW
from realexec.calibration.steady import (
    LOOK_PAUSE,
    Gate,
    Gates,
    at_once,
    busy,
    product_probe,
    speed_probe,
)
from realexec.sessions import session


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]  # elements (float32) for the bandwidth fits
    dot_sides: tuple[int, ...]  # square products
    gemv_sides: tuple[int, ...]  # (1, n) x (n, n) products
    repeats: int  # ops per size in the fits, in each of `sweeps` sweeps over the sizes
    sweeps: int
    issue_ops: int  # ops per issue loop
    loops: int  # repeats of each issue loop, round trip, backlog
    roundtrips: int
    blocker_sizes: tuple[int, ...]
    crowd_sizes: tuple[int, ...]  # elements of the memory-bound ops run on W workers at once
    compute_size: int  # elements of the compute-bound op run on W workers at once
    fresh_rounds: int  # fresh sessions per blocker size (start-up, cold blockers)
    recheck_size: int  # elements of the ops of the backlog a blocked frontend waits for
    # seconds between the rounds of a per-op microbenchmark (realexec.calibration.steady.central),
    # the cores kept busy meanwhile: 0.1 s spreads a microbenchmark's rounds over a second or
    # more of this machine's swings; 0.2 s did too, at 18 s of a 41 s calibration
    spread: float
    # the training ops (realexec.calibration.training): elements of the memory-bound ones'
    # arrays, and the convolutions' (batch, channels, side, filters, kernel, stride, pad)
    op_sizes: tuple[int, ...] = ()
    conv_shapes: tuple[tuple[int, ...], ...] = ()
    dot_shapes: tuple[tuple[int, int, int], ...] = ()  # (m, k, n), each operand transposed too
    # products priced on their own shape too (`asyncsim.nd.ops.tensor.dot_geometry`): (m, k, n,
    # "", "ta" or "tb"), an (m, k) by (k, n) product with that operand stored transposed
    layer_products: tuple[tuple[int, int, int, str], ...] = ()
    graph_repeats: int = 0  # calls of a hybridized block and of its ops one by one
    # the last-level cache (`realexec.calibration.caches`): float32 elements per buffer, the
    # counts of buffers an output cycles through, and (rounds, sweeps) of each count
    llc_elements: int = 0
    llc_buffers: tuple[int, ...] = ()
    llc_repeats: tuple[int, int] = (3, 3)
    # rounds of the same op on cold outputs, one thread and two at once (`caches.crowding`, over
    # half the largest count of buffers each); 0: not measured
    llc_crowd_rounds: int = 0
    # data another core wrote (`realexec.calibration.places`): float32 elements of the
    # streaming op, the product (m, k, n), rounds of each place; 0 elements: not measured
    place_elements: int = 0
    place_product: tuple[int, int, int] = (128, 512, 2048)
    place_rounds: int = 40
    # caches that forget (`realexec.calibration.caches.forgetting`): float32 elements, the idle
    # spells (seconds), rounds; () idles: not measured
    forget_elements: int = 0
    forget_idles: tuple[float, ...] = ()
    forget_rounds: int = 5


# 2**23: the scenarios' largest arrays (2000 x 2000, ~2**22) spill out of the cache; with 2**22
# the largest size, the bytes fit had one point past the cache and missed it by a third
FULL = Settings(sizes=(2**10, 2**13, 2**16, 2**18, 2**20, 2**21, 2**22, 2**23),
                # each side a geometry priced on its own point too; 100: 8.3's small products
                # (`small_ops`), which BLAS ran at 159 GFLOP/s where the 64 and 128 points
                # gave 133 and 137 (2-core Xeon VM)
                dot_sides=(32, 64, 100, 128, 256, 512, 1024), gemv_sides=(128, 512, 2048),
                repeats=5, sweeps=3, issue_ops=300, loops=15, roundtrips=200,
                blocker_sizes=(2**4, 2**12, 2**18, 2**21), crowd_sizes=(2**20, 2**22),
                compute_size=2**20, fresh_rounds=3, recheck_size=2**13, spread=0.1,
                # 2**22: past the last cache, as the training scenarios' activations are
                op_sizes=(2**10, 2**13, 2**16, 2**19, 2**21, 2**22),
                # every layer of 8.4's LeNet (and a small batch) and of 8.5's ResNet-18 on
                # 28x28 images (its first convolution, then per stage: a 3x3 block, the strided
                # 3x3 and 1x1 that halve the image), each priced on its own geometry as well
                # (`fits.geometry_cost`); batches of 1-5 ms a call
                conv_shapes=((8, 1, 28, 20, 3, 1, 0), (64, 1, 28, 20, 3, 1, 0),
                             (32, 20, 13, 50, 5, 1, 0), (16, 1, 28, 64, 3, 1, 1),
                             (2, 64, 28, 64, 3, 1, 1), (4, 64, 28, 128, 3, 2, 1),
                             (16, 64, 28, 128, 1, 2, 0), (2, 128, 14, 128, 3, 1, 1),
                             (4, 128, 14, 256, 3, 2, 1), (16, 128, 14, 256, 1, 2, 0),
                             (4, 256, 7, 256, 3, 1, 1), (8, 256, 7, 512, 3, 2, 1),
                             (16, 256, 7, 512, 1, 2, 0), (4, 512, 4, 512, 3, 1, 1)),
                # dense layers' products: a batch through a layer, and its gradients
                dot_shapes=((64, 128, 256), (256, 512, 1024), (512, 1024, 256)),
                # the products of the MLP of 12.2.4 and 8.2.4 (512-2048-512-1) at the batches
                # the scenarios measure (1024, and 128 without a blocker), as the workloads call
                # them: nd.dot's forward, Gluon Dense's (weight transposed), and the weight's
                # gradient; BLAS runs them 10-20% apart at one size
                layer_products=tuple((m, k, n, t) for batch in (128, 1024)
                                     for m, k, n, t in ((batch, 512, 2048, ""),
                                                        (batch, 2048, 512, ""),
                                                        (batch, 512, 2048, "tb"),
                                                        (batch, 2048, 512, "tb"),
                                                        (512, batch, 2048, "ta"),
                                                        (2048, batch, 512, "ta")))
                # and 8.1.2's (512-256-128-2, one example a call: `hybridize_mlp`), whose
                # products by a transposed weight ran 1.17-1.27x the price of the (1, n) by
                # (n, n) products that stood for them (`benchmarks/breakdown.py hybridize_mlp`)
                + ((1, 512, 256, "tb"), (1, 256, 128, "tb"), (1, 128, 2, "tb")),
                graph_repeats=100,
                # 8 MB buffers, 0-512 MB gone through between two touches of one: past the
                # last cache of the machines seen (warm to cold between 67 and 270 MB here)
                llc_elements=2**21, llc_buffers=(1, 2, 3, 5, 9, 17, 33), llc_crowd_rounds=7,
                # 8 MiB and a dense layer's product (the MLP's first, batch 128)
                place_elements=2**21, place_product=(128, 512, 2048), place_rounds=40,
                # 8 MiB; up to 80 ms, where the op was as slow as with its buffers evicted
                forget_elements=2**21, forget_idles=(0.0, 0.005, 0.01, 0.02, 0.04, 0.08),
                forget_rounds=5)
QUICK = Settings(sizes=(2**8, 2**12, 2**16, 2**18), dot_sides=(16, 64, 256), gemv_sides=(64, 256),
                 repeats=3, sweeps=1, issue_ops=100, loops=5, roundtrips=50,
                 blocker_sizes=(2**4, 2**14),
                 crowd_sizes=(2**18,), compute_size=2**14, fresh_rounds=1, recheck_size=2**12,
                 spread=0.0, op_sizes=(2**8, 2**12, 2**16),
                 conv_shapes=((2, 1, 12, 4, 3, 1, 0), (2, 8, 8, 8, 3, 1, 1),
                              (4, 16, 6, 16, 1, 1, 0)),
                 dot_shapes=((16, 32, 64),), layer_products=((16, 64, 32, "tb"),),
                 graph_repeats=10,
                 llc_elements=2**20, llc_buffers=(1, 2, 5, 17, 33), llc_repeats=(2, 1),
                 llc_crowd_rounds=2,
                 place_elements=2**14, place_product=(16, 64, 32), place_rounds=3)

def kernels(nd, settings, ctx=None) -> list[tuple]:
    """(name in `realexec.calibration.fits.FITTED`, op name in the engine's log, maker(size) ->
    (() -> NDArray), sizes) for every fitted op, its arrays on `ctx` (default: the CPU);
    `settings` gives `sizes`, `dot_sides` and `gemv_sides`. realexec.calibration.gpu times the
    same ops on a GPU."""
    def vec(n):
        return nd.random.uniform(shape=(n,), ctx=ctx)

    def unary(f):
        def make(n):
            x = vec(n)
            return lambda: f(x)
        return make

    def binary(n):
        x, y = vec(n), vec(n)
        return lambda: x + y

    def broadcast(n):
        x, row = nd.random.uniform(shape=(max(1, n // ROW), ROW), ctx=ctx), vec(ROW)
        return lambda: x + row

    def create(f):
        return lambda n: (lambda: f(n))

    def product(n):  # a negative side is a (1, |n|) x (|n|, |n|) product
        m = abs(n)
        a = nd.random.uniform(0, 2.0 / m, shape=(1 if n < 0 else m, m), ctx=ctx)
        b = nd.random.uniform(0, 2.0 / m, shape=(m, m), ctx=ctx)
        return lambda: nd.dot(a, b)

    sizes = settings.sizes
    # the generators are compute-bound (normal ~35 ns an element here, flat from 2**20 to 2**23):
    # past 2**21 their sweeps only took seconds (normal's alone 6 of a 45 s calibration)
    drawn = tuple(n for n in sizes if n <= 2**21)
    return [
        ("ones", "ones", create(lambda n: nd.ones((n,), ctx=ctx)), sizes),
        ("normal", "normal", create(lambda n: nd.random.normal(shape=(n,), ctx=ctx)), drawn),
        ("uniform", "uniform", create(lambda n: nd.random.uniform(shape=(n,), ctx=ctx)), drawn),
        ("add_scalar", "add_scalar", unary(lambda x: x + 1.0), sizes),
        ("add", "add", binary, sizes),
        ("broadcast", "add", broadcast, sizes),
        ("copy", "copy", unary(lambda x: x.copy()), sizes),
        ("sum", "sum", unary(lambda x: x.sum()), sizes),
        ("dot", "dot", product, settings.dot_sides + tuple(-n for n in settings.gemv_sides)),
    ]


# looks of the probes before the first step, a quarter second apart: the fastest of them is
# the usual state the steps wait for (a spell of seconds, not a slow phase of minutes: see
# `Gate.behind`)
LEARN_LOOKS = 8


def _measure(workers: int, settings: Settings, progress: bool, engine: str = "native",
             reference: float | None = None, product_reference: float | None = None,
             issue_reference: float | None = None) -> dict:
    """Run every microbenchmark; everything measured (raw numbers, fitted by `_profile`). Every
    price but a light result's is the shipped engine's (`engine="native"`); on
    `engine="native-light"` the light results' prices too (`realexec.calibration.light`).
    `reference`, `product_reference`, `issue_reference`: the speed, the product and the issue
    probe's seconds in the machine's usual state, when known (a calibration taken again:
    `realexec.calibration.calibrate`); else the gates learn them. Every step waits for the
    speed probe (`realexec.calibration.steady.Gates`); those that price products and
    convolutions for the product probe too; those taken on the engine's session for the issue
    probe too (`microbench.issue_probe`: the interpreter's state, which prices the frontend)."""
    from tqdm.auto import tqdm

    raw: dict = {}
    s = settings
    bar = tqdm(total=10 + len(FITTED), desc="calibrating", disable=not progress, leave=False)
    # this kind of machine runs slower for seconds after its cores idled
    # (realexec.calibration.steady)
    busy(1.0 if s.spread else 0.0)
    # the machine's speed while calibrating, for a measurement to compare its own against
    probes, products = [speed_probe()], [product_probe()]
    # each step in the machine's usual state, not in a slow spell; not for a quick calibration
    # (tiny sizes, no spread: the tests' and `--quick`'s), which prices nothing for real
    gate = Gate(reference) if s.spread else None
    both = Gates.of_products(gate, product_reference) if gate else None
    step = gate.run if gate else at_once
    blas = both.run if gate else at_once
    if gate and reference is None:  # the usual state learnt before the first step
        for _ in range(LEARN_LOOKS):
            both.look()
            busy(LOOK_PAUSE)
    if s.llc_elements:
        bar.set_postfix_str("last-level cache")
        raw["caches"] = step(caches.sweep, s.llc_elements, s.llc_buffers, *s.llc_repeats)
        if s.llc_crowd_rounds and workers > 1:
            raw["dram_crowding"] = step(caches.crowding, s.llc_elements,
                                        max(s.llc_buffers) // 2, s.llc_crowd_rounds)
    if s.forget_idles:
        raw["forget"] = step(caches.forgetting, s.forget_elements, s.forget_idles,
                             s.forget_rounds)
    if s.place_elements and workers > 1:
        raw["places"] = blas(places.other_core, s.place_elements, s.place_product,
                             s.place_rounds)
    bar.set_postfix_str("fresh engines")
    raw["fresh"] = step(microbench_host.fresh, workers, s.blocker_sizes, s.fresh_rounds,
                        pause=s.spread / 4)
    bar.update()
    with session(workers=workers, engine="native") as nd:
        bench = microbench._Bench(nd, workers)
        if gate:  # on the session: the issue probe's gate joins every step's
            interp = Gate(issue_reference, probe=microbench.issue_probe(bench))
            if issue_reference is None:
                for _ in range(LEARN_LOOKS):
                    interp.look()
                    busy(LOOK_PAUSE)
            step, blas = Gates(gate, interp).run, Gates(*both.gates, interp).run
            issue_probes = [interp.probe()]
        bar.set_postfix_str("frontend")
        front = step(microbench.frontend, bench, s.issue_ops, s.loops, s.spread)
        raw["issue"], raw["free"], raw["frees"] = front["issue"], front["free"], front["frees"]
        bar.update()
        bar.set_postfix_str("round trip")
        raw["roundtrip"] = step(microbench.roundtrip, bench, s.roundtrips, s.loops, s.spread / 2)
        raw["t3_after_sleep"] = step(microbench.long_wake, bench, s.loops)
        bar.update()
        bar.set_postfix_str("blockers")
        raw["blockers"] = step(microbench.blockers, bench, s.blocker_sizes, s.repeats)
        bar.update()
        bar.set_postfix_str("worker overhead")
        raw["worker"] = step(microbench.worker_overhead, bench, s.issue_ops, s.loops,
                             s.spread / 2)
        bar.update()
        raw["wake"] = step(microbench_host.wake, s.roundtrips, bursts=s.loops,
                           pause=s.spread / 2)
        raw["handover"] = step(microbench_gil.handover, s.roundtrips // 2)
        bar.set_postfix_str("blocked frontend")
        raw["blocked"] = step(microbench_host.blocked, bench, s.issue_ops, s.loops,
                              s.recheck_size, s.spread / 2)
        bar.update()
        fits = raw["kernels"] = {}
        for name, logged, make, sizes in kernels(nd, s):
            bar.set_postfix_str(name)
            times = (blas if name == "dot" else step)(
                microbench.kernel_times, bench, make, sizes, s.repeats, logged, s.sweeps,
                s.spread)
            fits[name] = {"sizes": list(sizes), "seconds": times}
            bar.update()
        bar.set_postfix_str("training ops")
        calls = training.cases(nd, s.op_sizes, s.conv_shapes, s.dot_shapes, s.layer_products)
        # gated sweep by sweep: the step takes a minute, in which spells come and go
        raw["ops"] = training.kernel_times(bench, calls, s.repeats, s.sweeps, s.spread,
                                           take=blas)
        del calls
        raw["graph_step"] = blas(training.graph_step, bench, s.graph_repeats)
        raw["op_issue"] = step(issuing.issue_times, bench, max(1, s.issue_ops // 3), s.loops,
                               s.spread / 4)
        raw["phases"] = step(issuing.phase_times, bench, max(1, s.issue_ops // 15), s.loops,
                             s.spread / 4)
        raw["firsts"] = step(firsts.first_calls, bench, max(3, s.loops), s.spread / 4)
        raw["recording"] = step(issuing.recording_overhead, bench, max(1, s.issue_ops // 3),
                                max(1, s.loops // 3), s.spread / 4)
        raw["mixed"] = step(issuing.mixed_issue, bench, s.issue_ops, max(1, s.loops // 2),
                            s.spread / 4)
        raw["reclaim"] = step(frees.reclaim, bench, s.issue_ops, s.loops, s.spread / 4)
        raw["take"] = step(frees.take, bench, s.issue_ops, s.loops, s.spread / 4)
        raw["after_gemm"] = blas(aftergemm.after_gemm, bench, 4 * s.repeats, s.sweeps)
        bar.update()
        bar.set_postfix_str("round trip")
        raw["roundtrip_late"] = step(microbench.roundtrip, bench, s.roundtrips, s.loops,
                                     s.spread / 2)
        late = step(microbench.frontend, bench, s.issue_ops, s.loops, s.spread)
        raw["issue_late"], raw["free_late"] = late["issue"], late["free"]
        raw["frees_late"] = late["frees"]
        bar.update()
        bar.set_postfix_str("concurrency")
        raw["concurrency"] = _concurrency(bench, s, step, blas) if workers > 1 else {}
        bar.update()
        if gate:
            raw["issue_probe"] = [*issue_probes, interp.probe()]  # while the session is open
        step = gate.run if gate else at_once
    if engine == "native-light":
        bar.set_postfix_str("light results")
        raw["light"] = step(light.light_prices, workers, s.issue_ops, s.loops, s.spread / 4)
    if gate:
        raw["gate"] = {**gate.summary(), "behind": max(both.behind(), interp.behind()),
                       "products": both.gates[1].summary(), "issues": interp.summary()}
    probes.append(speed_probe())
    products.append(product_probe())
    raw["speed_probe"], raw["product_probe"] = probes, products
    bar.close()
    return raw


def _concurrency(bench, s: Settings, step=at_once, blas=at_once) -> dict:
    """Memory-bound ops (two sizes), a sampler, a product and every convolution geometry of
    `conv_shapes`, one at a time and W at once; the frontend's issue period with workers asleep
    and with all of them running. `step` takes the last as one step, `blas` (a step gated on
    the product probe too) the first, and the convolutions round by round
    (`training.crowding`)."""
    nd = bench.nd
    xs = [nd.random.uniform(shape=(n,)) for n in s.crowd_sizes]
    m = nd.random.uniform(0, 1 / 256, shape=(256, 256))
    nd.waitall()
    cases = [(f"elementwise {x.size}", lambda x=x: x + 1.0, "add_scalar") for x in xs]
    cases += [("normal", lambda: nd.random.normal(shape=(s.compute_size,)), "normal"),
              ("dot", lambda: nd.dot(m, m), "dot")]

    def pairs() -> dict:
        out = {}
        for label, make, name in cases:
            alone, together = microbench_host.concurrency(bench, make, 4, name)
            out[label] = {"alone": alone, "together": together}
        return out

    out = blas(pairs)
    # convolutions two at once: their im2col and col2im copies share the memory system, more so
    # the larger the images (a 64-channel 28x28 layer's gradients slow by a quarter, a 4x4 one's
    # not at all)
    out.update(training.crowding(bench, s.conv_shapes, take=blas))
    alone_period, busy_period = step(microbench_host.busy_frontend, bench, s.issue_ops // 2,
                                     s.loops, 40 * s.issue_ops)
    out["frontend"] = {"alone": alone_period, "busy": busy_period}
    return out
